package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/connectors/kafka"
	"github.com/kandle/kandle/topology"
)

// FingerprintTopic is the compacted topic that records, per processor (the
// record key), the fingerprint its state was written under.
func FingerprintTopic(t *topology.Topology) string { return t.Name + ".fingerprints" }

// ErrIncompatibleState is wrapped by the error Run returns when a processor's
// stored state was written under settings the topology no longer has.
var ErrIncompatibleState = errors.New("topology edit is incompatible with the stored state")

// StoredFingerprints reads the fingerprints recorded on the brokers for t's
// processors (and for processors t no longer has). A missing topic means no
// state was ever written: the result is empty.
func StoredFingerprints(ctx context.Context, t *topology.Topology, brokers []string) (map[string]topology.Fingerprint, error) {
	cl, err := newClient(t, brokers)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	if err := kafka.CheckAuth(ctx, cl, t.Kafka); err != nil {
		return nil, err
	}
	return readFingerprints(ctx, cl, FingerprintTopic(t))
}

func readFingerprints(ctx context.Context, cl *kgo.Client, topic string) (map[string]topology.Fingerprint, error) {
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("read state fingerprints from %s: %w", topic, err)
	}
	out := map[string]topology.Fingerprint{}
	left := map[int32]int64{}
	offsets := map[int32]kgo.Offset{}
	var lerr error
	ends.Each(func(o kadm.ListedOffset) {
		switch {
		case errors.Is(o.Err, kerr.UnknownTopicOrPartition):
		case o.Err != nil:
			lerr = o.Err
		case o.Offset > 0:
			left[o.Partition] = o.Offset
			offsets[o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	if lerr != nil {
		return nil, fmt.Errorf("read state fingerprints from %s: %w", topic, lerr)
	}
	if len(left) == 0 {
		return out, nil
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets})
	defer cl.RemoveConsumePartitions(map[string][]int32{topic: slices.Collect(maps.Keys(offsets))})
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read state fingerprints from %s: %w", topic, err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return nil, fmt.Errorf("read state fingerprints from %s: %w", topic, ferr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := left[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if r.Value == nil {
				delete(out, string(r.Key)) // a tombstone: the operator removed the state
			} else if fp, err := topology.DecodeFingerprint(r.Value); err == nil {
				out[string(r.Key)] = fp
			} else if ferr == nil {
				// A record no retry reads better: an operator removes it.
				ferr = configError{fmt.Errorf("processor %s: %w", r.Key, err)}
			}
			if r.Offset+1 >= end {
				delete(left, r.Partition)
			}
		})
		if ferr != nil {
			return nil, fmt.Errorf("read state fingerprints from %s: %w", topic, ferr)
		}
	}
	return out, nil
}

// checkFingerprints runs before any stage starts. For every processor this
// instance runs it compares the fingerprint of the topology with the one its
// state was written under; a processor without a recorded fingerprint gets
// the current one. A processor whose state was written under other settings
// makes Run fail with what to do, unless it has no state at all (an empty
// changelog and no committed offsets: the operator reset it).
func (e *Engine) checkFingerprints(ctx context.Context) error {
	cl, err := kgo.NewClient(e.kafkaOpts(e.clientID(), kgo.WithLogger(kgoLogger(e.log)))...)
	if err != nil {
		return configError{err}
	}
	defer cl.Close()
	topic := FingerprintTopic(e.top)
	compact := "compact"
	if _, err := kafka.EnsureTopics(ctx, cl, []kafka.TopicSpec{{Name: topic, Partitions: 1,
		Configs: map[string]*string{"cleanup.policy": &compact}}}); err != nil {
		return fmt.Errorf("create the state fingerprint topic: %w", kafka.Explain(err, e.top.Kafka))
	}
	stored, err := readFingerprints(ctx, cl, topic)
	if err != nil {
		return err
	}
	var refused []string
	var write []*kgo.Record
	type localReset struct {
		stage string
		fp    []byte
		drop  bool // else only the fingerprint is recorded again
	}
	var resets []localReset
	for _, s := range e.g.stages {
		if !e.runs(s.Name) {
			continue
		}
		cur, err := e.top.Fingerprint(s.Name)
		if err != nil {
			return configError{err}
		}
		old, recorded := stored[s.Name]
		if recorded {
			cur = cur.Carry(old)
			if d, ok := old.StateLateness(); ok {
				s.stateLateness = &d
			}
		}
		// Local state is a cache of the changelog: if it was written under
		// incompatible settings (or before fingerprints were kept, or
		// before an operator reset the processor), drop it; restore then
		// reads the changelog from its start. Compatible changes (rules,
		// a record from an older kandle) keep it.
		enc := cur.Encode()
		if have, ok, err := e.store.Fingerprint(s.Name); err != nil {
			return configError{err} // the local state store: not the brokers
		} else if !ok || !bytes.Equal(have, enc) {
			drop := true
			if ok {
				if was, err := topology.DecodeFingerprint(have); err == nil && len(cur.Changes(was)) == 0 {
					drop = false
				} else {
					e.log.Info("local state was written under other settings: dropped, to be rebuilt from the changelog", "processor", s.Name)
				}
			}
			resets = append(resets, localReset{s.Name, enc, drop})
		}
		if recorded {
			changes := cur.Changes(old)
			if len(changes) == 0 {
				// Compatible changes (rules, rollups removed, a record
				// from an older kandle) are recorded, so that adding a
				// rollup back later is seen as new.
				if !bytes.Equal(enc, old.Encode()) {
					for _, c := range cur.CompatibleChanges(old) {
						e.log.Info("setting changed; the state is kept", "processor", s.Name, "change", c.String(), "why", c.Why)
					}
					write = append(write, &kgo.Record{Topic: topic, Key: []byte(s.Name), Value: enc})
				}
				continue
			}
			has, err := e.hasState(ctx, cl, s.Name)
			if err != nil {
				return err
			}
			if has {
				refused = append(refused, incompatibleLine(s.Name, changes))
				continue
			}
			e.log.Info("processor has no state yet: recording its new settings", "processor", s.Name)
		}
		write = append(write, &kgo.Record{Topic: topic, Key: []byte(s.Name), Value: enc})
	}
	if len(refused) > 0 {
		return fmt.Errorf("%w:\n  %s\n%s", ErrIncompatibleState, strings.Join(refused, "\n  "), incompatibleAdvice(e.top))
	}
	if len(resets) > 0 {
		local := e.store.NewBatch()
		for _, r := range resets {
			if r.drop {
				local.DropStage(r.stage)
			}
			local.SetFingerprint(r.stage, r.fp)
		}
		if err := local.Commit(); err != nil {
			return configError{err}
		}
	}
	if len(write) > 0 {
		if err := cl.ProduceSync(ctx, write...).FirstErr(); err != nil {
			return fmt.Errorf("record state fingerprints in %s: %w", topic, err)
		}
	}
	return nil
}

// hasState reports whether a processor ever wrote state: a changelog record
// or a committed input offset.
func (e *Engine) hasState(ctx context.Context, cl *kgo.Client, stage string) (bool, error) {
	adm := kadm.NewClient(cl)
	changelog := e.g.changelogTopic(stage)
	ends, err := adm.ListEndOffsets(ctx, changelog)
	if err != nil {
		return false, fmt.Errorf("end offsets of %s: %w", changelog, err)
	}
	has := false
	ends.Each(func(o kadm.ListedOffset) { has = has || (o.Err == nil && o.Offset > 0) })
	if has {
		return true, nil
	}
	offs, err := adm.FetchOffsets(ctx, e.g.groupID(stage))
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return false, fmt.Errorf("committed offsets of %s: %w", e.g.groupID(stage), err)
	}
	offs.Each(func(o kadm.OffsetResponse) { has = has || (o.Err == nil && o.At >= 0) })
	return has, nil
}

// incompatibleLine is "processor c5m: timeframe 5m → 3m, dedupe true → false".
func incompatibleLine(name string, changes []topology.FieldChange) string {
	parts := make([]string, len(changes))
	for i, c := range changes {
		parts[i] = c.String()
	}
	return fmt.Sprintf("processor %s: %s since its state was written", name, strings.Join(parts, ", "))
}

func incompatibleAdvice(t *topology.Topology) string {
	file := t.File
	if file == "" {
		file = "TOPOLOGY"
	}
	return fmt.Sprintf(`kandle never carries state on under other settings (its candles would mix both). Either:
  - undo the edit; or
  - give each processor listed a new name and a new output topic: it starts with empty state and reads its
    input from the earliest retained record, so its candles are rebuilt; point rollups and sinks at it; or
  - reset the processor under its name: stop every instance, delete its changelog topic (%s.<processor>.changelog)
    and its consumer group (%s.<processor>), then start again.
'kandle plan -t %s' shows what each processor keeps; 'kandle replay -t %s --processors NAME --from TIME --out topics'
rebuilds the candles of a past range.`,
		t.Name, t.Group, file, file)
}
