package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/connectors/kafka"
	"github.com/kandle/kandle/connectors/kinesis"
	"github.com/kandle/kandle/topology"
)

// PartitionOffsets is one input partition of a stage or sink.
type PartitionOffsets struct {
	Partition    int32
	Committed    int64 // -1: the group never committed
	End          int64 // last stable offset
	Lag          int64
	Watermark    int64 // Unix ms, when HasWatermark
	HasWatermark bool
}

// GroupOffsets is the progress of one consumer group of a topology.
type GroupOffsets struct {
	Name, Kind, Group string // Kind: "processor" or "sink"
	Topics            map[string][]PartitionOffsets
	// Shards lists the lease table of a stage reading a Kinesis stream
	// (Group is then the table's name; Topics is empty).
	Shards []kinesis.LeaseInfo
	// FusedInto names the processor whose stage runs this one fused (in
	// its transactions, fed from memory): Group is then not joined, and
	// Committed is the position the processor's changelog holds (the
	// offset after the last input record its committed state reflects).
	FusedInto string
	// HoldingBack names the input partition furthest behind (lowest
	// watermark, else largest lag): for a rollup, the upstream partition
	// whose candles it waits for. Empty when nothing lags.
	HoldingBack string
}

// Offsets reports every processor stage's and sink's committed offsets,
// end offsets, lag and (for candle stages) watermarks read from the tail of
// the stage's changelog.
func Offsets(ctx context.Context, t *topology.Topology, brokers []string) ([]GroupOffsets, error) {
	g, err := buildGraph(t)
	if err != nil {
		return nil, err
	}
	cl, err := newClient(t, brokers, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	if err := kafka.CheckAuth(ctx, cl, t.Kafka); err != nil {
		return nil, err
	}
	adm := kadm.NewClient(cl)
	var out []GroupOffsets
	for _, s := range g.stages {
		if src := s.kinesisSource(); src != nil {
			gofs, err := kinesisOffsets(ctx, src.Kinesis, s.Name)
			if err != nil {
				return nil, fmt.Errorf("stage %s: %w", s.Name, err)
			}
			gofs.Name, gofs.Kind = s.Name, "processor"
			out = append(out, gofs)
			continue
		}
		gofs, err := groupOffsets(ctx, adm, g.groupID(s.Name), s.InputTopic)
		if err != nil {
			return nil, err
		}
		gofs.Name, gofs.Kind = s.Name, "processor"
		if s.fusedInto != nil {
			gofs.FusedInto = s.root().Name
		}
		if !s.Rollup || s.fusedInto != nil {
			if err := addProgress(ctx, cl, adm, g.changelogTopic(s.Name), gofs.Topics[s.InputTopic], s.fusedInto != nil); err != nil {
				return nil, err
			}
		}
		gofs.HoldingBack = holdingBack(gofs)
		out = append(out, gofs)
	}
	for _, name := range slices.Sorted(maps.Keys(t.Sinks)) {
		var topics []string
		for _, from := range t.Sinks[name].From {
			if st, ok := g.byName[from]; ok {
				topics = append(topics, st.OutputTopic)
			} else if src, ok := t.Sources[from]; ok {
				topics = append(topics, src.Topic)
			}
		}
		gofs, err := groupOffsets(ctx, adm, g.groupID("sink."+name), topics...)
		if err != nil {
			return nil, err
		}
		gofs.Name, gofs.Kind = name, "sink"
		gofs.HoldingBack = holdingBack(gofs)
		out = append(out, gofs)
	}
	return out, nil
}

// kinesisOffsets reads a Kinesis stage's leases (its namespace of the lease
// table): who holds each shard and its last checkpoint.
func kinesisOffsets(ctx context.Context, kc topology.Kinesis, stage string) (GroupOffsets, error) {
	_, ddb, err := kinesis.NewClients(ctx, kc.Region, kc.Endpoint, kc.DynamoDB)
	if err != nil {
		return GroupOffsets{}, err
	}
	leases, err := kinesis.ReadLeases(ctx, ddb, kc.LeaseTable, stage)
	if err != nil {
		return GroupOffsets{}, err
	}
	return GroupOffsets{Group: kc.LeaseTable, Shards: leases}, nil
}

func groupOffsets(ctx context.Context, adm *kadm.Client, group string, topics ...string) (GroupOffsets, error) {
	res := GroupOffsets{Group: group, Topics: map[string][]PartitionOffsets{}}
	ends, err := adm.ListCommittedOffsets(ctx, topics...)
	if err != nil {
		return res, fmt.Errorf("end offsets of %v: %w", topics, err)
	}
	committed, err := adm.FetchOffsetsForTopics(ctx, group, topics...)
	if err != nil && !errors.Is(err, kadm.ErrEmpty) && !errors.Is(err, kerr.GroupIDNotFound) { // a group never joined (a fused processor's) has nothing committed
		return res, fmt.Errorf("committed offsets of group %s: %w", group, err)
	}
	ends.Each(func(o kadm.ListedOffset) {
		po := PartitionOffsets{Partition: o.Partition, Committed: -1, End: o.Offset, Lag: o.Offset}
		if c, ok := committed.Lookup(o.Topic, o.Partition); ok && c.Err == nil && c.At >= 0 {
			po.Committed, po.Lag = c.At, max(o.Offset-c.At, 0)
		}
		res.Topics[o.Topic] = append(res.Topics[o.Topic], po)
	})
	for _, ps := range res.Topics {
		sort.Slice(ps, func(i, j int) bool { return ps[i].Partition < ps[j].Partition })
	}
	return res, nil
}

// addProgress reads the last progress record of each changelog partition:
// its watermark, and with position its next input offset as the committed
// one (a fused processor, whose consumer group is not used).
func addProgress(ctx context.Context, cl *kgo.Client, adm *kadm.Client, changelog string, parts []PartitionOffsets, position bool) error {
	ends, err := adm.ListEndOffsets(ctx, changelog)
	if err != nil {
		return fmt.Errorf("end offsets of %s: %w", changelog, err)
	}
	for i := range parts {
		p := &parts[i]
		end, ok := ends.Lookup(changelog, p.Partition)
		if !ok || end.Offset == 0 {
			continue
		}
		start := max(end.Offset-256, 0)
		cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{changelog: {p.Partition: kgo.NewOffset().At(start)}})
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			fs := cl.PollFetches(pctx)
			cancel()
			last := int64(-1)
			fs.EachRecord(func(r *kgo.Record) {
				last = r.Offset
				if string(r.Key) == string(keyOffset) {
					if pr, ok := DecodeProgress(r.Value); ok {
						p.Watermark, p.HasWatermark = pr.Watermark, pr.HasWatermark
						if position {
							// The record at a fused position is the marker
							// of the transaction that wrote the input it
							// took last: not a record to read.
							p.Committed, p.Lag = pr.NextInput, max(p.End-pr.NextInput-1, 0)
						}
					}
				}
			})
			if last >= end.Offset-2 || ctx.Err() != nil {
				break
			}
		}
		cl.RemoveConsumePartitions(map[string][]int32{changelog: {p.Partition}})
	}
	return nil
}

func holdingBack(g GroupOffsets) string {
	best, bestWM, bestLag := "", int64(1<<62), int64(0)
	for topic, ps := range g.Topics {
		for _, p := range ps {
			name := fmt.Sprintf("%s[%d]", topic, p.Partition)
			switch {
			case p.HasWatermark && p.Watermark < bestWM:
				best, bestWM = name, p.Watermark
			case !p.HasWatermark && bestWM == 1<<62 && p.Lag > bestLag:
				best, bestLag = name, p.Lag
			}
		}
	}
	return best
}

// OffsetReset is one partition's planned move.
type OffsetReset struct {
	Topic     string
	Partition int32
	From, To  int64
}

// PlanReset computes, for the consumer group of the processor or sink name,
// the offsets at time at (the first record at or after it).
func PlanReset(ctx context.Context, t *topology.Topology, brokers []string, name string, at time.Time) (group string, plan []OffsetReset, err error) {
	all, err := Offsets(ctx, t, brokers)
	if err != nil {
		return "", nil, err
	}
	cl, err := newClient(t, brokers)
	if err != nil {
		return "", nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for _, g := range all {
		if g.Name != name {
			continue
		}
		if g.FusedInto != "" {
			return "", nil, fmt.Errorf("processor %s runs fused into %s: its position is %s's input position, not a consumer group's; reset %s (a replay rebuilds the chain), or set fuse: false on %s first", name, g.FusedInto, g.FusedInto, g.FusedInto, name)
		}
		for topic, ps := range g.Topics {
			listed, err := adm.ListOffsetsAfterMilli(ctx, at.UnixMilli(), topic)
			if err != nil {
				return "", nil, err
			}
			for _, p := range ps {
				to := p.End
				if l, ok := listed.Lookup(topic, p.Partition); ok && l.Err == nil && l.Offset >= 0 {
					to = l.Offset
				}
				plan = append(plan, OffsetReset{Topic: topic, Partition: p.Partition, From: p.Committed, To: to})
			}
		}
		sort.Slice(plan, func(i, j int) bool {
			return plan[i].Topic < plan[j].Topic || plan[i].Topic == plan[j].Topic && plan[i].Partition < plan[j].Partition
		})
		return g.Group, plan, nil
	}
	return "", nil, fmt.Errorf("no processor or sink named %q", name)
}

// ApplyReset commits plan for group on brokers, connecting with t's TLS and
// SASL settings. The group must have no members: stop every instance first.
func ApplyReset(ctx context.Context, t *topology.Topology, brokers []string, group string, plan []OffsetReset) error {
	cl, err := newClient(t, brokers)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	described, err := adm.DescribeGroups(ctx, group)
	if err == nil {
		if d, ok := described[group]; ok && len(d.Members) > 0 {
			return fmt.Errorf("group %s has %d running members: stop every kandle instance before resetting", group, len(d.Members))
		}
	}
	var os kadm.Offsets
	for _, r := range plan {
		os.AddOffset(r.Topic, r.Partition, r.To, -1)
	}
	resp, err := adm.CommitOffsets(ctx, group, os)
	if err != nil {
		return err
	}
	return resp.Error()
}
