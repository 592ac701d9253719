package kafka

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TopicSpec is a topic a topology needs.
type TopicSpec struct {
	Name       string
	Partitions int32 // < 1: the broker's default
	Compacted  bool  // cleanup.policy=compact (changelogs, latest-value topics)
	Configs    map[string]*string
}

// TopicWarning says an existing topic differs from its spec. EnsureTopics
// never changes an existing topic, so the operator decides what to do.
type TopicWarning struct {
	Topic string
	// Have and Want are partition counts; Want is 0 for a config mismatch.
	Have, Want int32
	// Detail describes a config mismatch ("" for a partition mismatch).
	Detail string
}

func (w TopicWarning) String() string {
	if w.Detail != "" {
		return fmt.Sprintf("topic %q: %s", w.Topic, w.Detail)
	}
	return fmt.Sprintf("topic %q has %d partitions, the topology asks for %d: keys hash to different partitions than expected; add partitions with `kafka-topics --alter --partitions %d` (or recreate the topic) if this is not intended",
		w.Topic, w.Have, w.Want, w.Want)
}

// EnsureTopics creates the topics in specs that do not exist yet and leaves
// existing ones alone. It returns a warning for each existing topic with
// fewer partitions than asked or, for a compacted spec, without
// cleanup.policy=compact; an error only when a topic could not be listed or
// created.
func EnsureTopics(ctx context.Context, cl *kgo.Client, specs []TopicSpec) ([]TopicWarning, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	adm := kadm.NewClient(cl)
	names := make([]string, 0, len(specs))
	for _, s := range specs {
		if s.Name == "" {
			return nil, errors.New("kafka: ensure topics: a topic spec has no name")
		}
		names = append(names, s.Name)
	}
	parts, err := partitionCounts(ctx, cl, names)
	if err != nil {
		return nil, err
	}
	var existing []TopicSpec
	for _, s := range specs {
		if _, ok := parts[s.Name]; ok {
			existing = append(existing, s)
			continue
		}
		parts := s.Partitions
		if parts < 1 {
			parts = -1 // broker default
		}
		resp, err := adm.CreateTopic(ctx, parts, -1, specConfigs(s), s.Name)
		switch {
		case errors.Is(err, kerr.TopicAlreadyExists):
			existing = append(existing, s) // created concurrently
		case err != nil:
			msg := resp.ErrMessage
			if msg != "" {
				msg = " (" + msg + ")"
			}
			return nil, fmt.Errorf("kafka: create topic %q with %d partitions%s: %w", s.Name, s.Partitions, msg, err)
		}
	}
	// Ask once more for every topic: this checks that all exist and
	// refreshes cl's metadata cache, which may still hold "unknown" for the
	// topics just created.
	parts, err = partitionCounts(ctx, cl, names)
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		if _, ok := parts[n]; !ok {
			return nil, fmt.Errorf("kafka: topic %q was created but the broker does not list it yet; retry", n)
		}
	}
	return checkExisting(ctx, adm, parts, existing)
}

// PartitionCounts returns the partition count of each of topics that
// exists, asking the broker directly.
func PartitionCounts(ctx context.Context, cl *kgo.Client, topics []string) (map[string]int32, error) {
	if len(topics) == 0 {
		return map[string]int32{}, nil
	}
	return partitionCounts(ctx, cl, topics)
}

// partitionCounts asks the broker directly for the partition counts of the
// topics that exist. kadm.ListTopics answers from the client's metadata
// cache, which can still say "unknown" for a topic created a moment ago.
func partitionCounts(ctx context.Context, cl *kgo.Client, topics []string) (map[string]int32, error) {
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("kafka: list topics %v (is the broker reachable?): %w", topics, err)
	}
	out := make(map[string]int32, len(resp.Topics))
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		err := kerr.ErrorForCode(t.ErrorCode)
		switch {
		case errors.Is(err, kerr.UnknownTopicOrPartition):
		case err != nil:
			return nil, fmt.Errorf("kafka: describe topic %q: %w", *t.Topic, err)
		default:
			out[*t.Topic] = int32(len(t.Partitions))
		}
	}
	return out, nil
}

func specConfigs(s TopicSpec) map[string]*string {
	if !s.Compacted {
		return s.Configs
	}
	m := make(map[string]*string, len(s.Configs)+1)
	for k, v := range s.Configs {
		m[k] = v
	}
	m["cleanup.policy"] = kadm.StringPtr("compact")
	return m
}

// checkExisting compares existing topics with their specs.
func checkExisting(ctx context.Context, adm *kadm.Client, parts map[string]int32, specs []TopicSpec) ([]TopicWarning, error) {
	var compacted []string
	var warns []TopicWarning
	for _, s := range specs {
		have := parts[s.Name]
		if s.Partitions > 0 && have < s.Partitions {
			warns = append(warns, TopicWarning{Topic: s.Name, Have: have, Want: s.Partitions})
		}
		if s.Compacted {
			compacted = append(compacted, s.Name)
		}
	}
	if len(compacted) > 0 {
		cfgs, err := adm.DescribeTopicConfigs(ctx, compacted...)
		if err != nil {
			return nil, fmt.Errorf("kafka: describe configs of %v: %w", compacted, err)
		}
		for _, rc := range cfgs {
			if rc.Err != nil {
				return nil, fmt.Errorf("kafka: describe configs of %q: %w", rc.Name, rc.Err)
			}
			policy := "delete"
			for _, c := range rc.Configs {
				if c.Key == "cleanup.policy" && c.Value != nil {
					policy = *c.Value
				}
			}
			if policy != "compact" && policy != "compact,delete" && policy != "delete,compact" {
				warns = append(warns, TopicWarning{Topic: rc.Name,
					Detail: fmt.Sprintf("cleanup.policy is %q, the topology asks for compact; set it with `kafka-configs --alter --add-config cleanup.policy=compact`", policy)})
			}
		}
	}
	sort.Slice(warns, func(i, j int) bool { return warns[i].Topic < warns[j].Topic })
	return warns, nil
}

// CheckSessionTimeout fails when d is outside the range of group session
// timeouts the brokers accept (group.min.session.timeout.ms …
// group.max.session.timeout.ms): a consumer group member asking for another
// one is refused at every join, forever. Brokers that do not report the
// range (or do not let us read broker configs) are not checked.
func CheckSessionTimeout(ctx context.Context, cl *kgo.Client, d time.Duration) error {
	cfgs, err := kadm.NewClient(cl).DescribeBrokerConfigs(ctx)
	if err != nil {
		return nil // cannot tell: the broker is the judge at the join
	}
	var lo, hi time.Duration
	for _, rc := range cfgs {
		if rc.Err != nil {
			continue
		}
		for _, c := range rc.Configs {
			if c.Value == nil {
				continue
			}
			ms, err := strconv.ParseInt(*c.Value, 10, 64)
			if err != nil {
				continue
			}
			switch c.Key {
			case "group.min.session.timeout.ms":
				lo = max(lo, time.Duration(ms)*time.Millisecond)
			case "group.max.session.timeout.ms":
				if v := time.Duration(ms) * time.Millisecond; hi == 0 || v < hi {
					hi = v
				}
			}
		}
	}
	if (lo > 0 && d < lo) || (hi > 0 && d > hi) {
		return fmt.Errorf("kafka: the session timeout %s is outside the range the brokers allow (%s to %s, group.min.session.timeout.ms and group.max.session.timeout.ms): set --session-timeout within it, or change the broker's range", d, lo, rangeEnd(hi))
	}
	return nil
}

func rangeEnd(hi time.Duration) string {
	if hi == 0 {
		return "no limit"
	}
	return hi.String()
}

// EndOffsets returns the end offset (high watermark: the offset the next
// record will get) of every partition of topics.
func EndOffsets(ctx context.Context, cl *kgo.Client, topics ...string) (map[string]map[int32]int64, error) {
	listed, err := kadm.NewClient(cl).ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("kafka: list end offsets of %v: %w", topics, err)
	}
	out := make(map[string]map[int32]int64, len(listed))
	var firstErr error
	listed.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("kafka: end offset of %s[%d]: %w", o.Topic, o.Partition, o.Err)
			}
			return
		}
		put(out, o.Topic, o.Partition, o.Offset)
	})
	return out, firstErr
}

// CommittedOffsets returns the offsets group has committed for topics (all
// topics when none are named). Partitions without a commit are absent, and
// a group that never committed gives an empty map.
// Pending transactional commits are waited for, so the answer is stable.
func CommittedOffsets(ctx context.Context, cl *kgo.Client, group string, topics ...string) (map[string]map[int32]int64, error) {
	adm := kadm.NewClient(cl)
	ctx = kadm.RequireStable(ctx)
	var (
		resps kadm.OffsetResponses
		err   error
	)
	if len(topics) == 0 {
		resps, err = adm.FetchOffsets(ctx, group)
	} else {
		resps, err = adm.FetchOffsetsForTopics(ctx, group, topics...)
	}
	out := make(map[string]map[int32]int64)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return out, nil // a group that never committed
	}
	if err != nil {
		return nil, fmt.Errorf("kafka: fetch committed offsets of group %q: %w", group, err)
	}
	var firstErr error
	resps.Each(func(o kadm.OffsetResponse) {
		if o.Err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("kafka: committed offset of group %q at %s[%d]: %w", group, o.Topic, o.Partition, o.Err)
			}
			return
		}
		if o.At >= 0 {
			put(out, o.Topic, o.Partition, o.At)
		}
	})
	return out, firstErr
}

func put(m map[string]map[int32]int64, t string, p int32, v int64) {
	ps := m[t]
	if ps == nil {
		ps = make(map[int32]int64)
		m[t] = ps
	}
	ps[p] = v
}
