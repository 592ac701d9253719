package engine

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/kandle/kandle/connectors/kinesis"
	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/topology"
)

// replayKinesis reads every shard of src's stream (parents before children)
// up to the tip as of the start, without touching the lease table, and feeds
// the pipeline. A child shard starts from its parents' state exactly as the
// live stage hands it over, so the candles are the same.
func replayKinesis(ctx context.Context, p *Pipeline, g *graph, srcName string, src *topology.Source, o ReplayOptions) (int64, error) {
	kc := src.Kinesis
	kin, _, err := kinesis.NewClients(ctx, kc.Region, kc.Endpoint, kc.DynamoDB)
	if err != nil {
		return 0, err
	}
	var stages []*stageSpec
	for _, s := range g.stages {
		if !s.Rollup && s.Input == srcName {
			stages = append(stages, s)
		}
	}
	pos := kinesis.Position{TrimHorizon: true}
	switch o.From.Kind {
	case BoundTime:
		t := o.From.Time.Add(-o.Warmup)
		pos = kinesis.Position{Timestamp: &t}
	case BoundOffset:
		return 0, fmt.Errorf("replay: Kinesis sources take --from earliest or a time, not an offset")
	}
	// --to TIME cuts each shard at its first record that arrived at or after
	// TIME (exclusive, like the Kafka bound). Arrival times only grow along a
	// shard, and a child's records arrive after its parents', so the cut is a
	// prefix of every shard.
	var until time.Time
	switch o.To.Kind {
	case BoundTime:
		until = o.To.Time
	case BoundOffset:
		return 0, fmt.Errorf("replay: Kinesis sources take --to end or a time, not an offset (sequence numbers differ per shard)")
	}
	ranges := newShardRanges(kin, kc.Stream)
	// mirror holds each (stage, shard) processor's committed entries, for
	// handoffs: what the shard started from (its parents' handed-over keys)
	// with every change of its processor applied, as the live shard's
	// changelog holds them.
	type stageShard struct {
		stage *stageSpec
		shard string
	}
	mirror := map[stageShard]map[string][]byte{}
	// stateOf is the state shard id of stage st ended with. A shard with no
	// record to replay has none of its own: it holds what its parents
	// handed it (the live stage commits that handoff when the shard ends),
	// and its children take their keys from that.
	var stateOf func(st *stageSpec, id string) (map[string][]byte, error)
	handed := func(st *stageSpec, id string) (map[string][]byte, error) {
		rng, err := ranges.get(ctx, id)
		if err != nil || len(rng.parents) == 0 {
			return nil, err
		}
		r, err := resharderOf(st)
		if err != nil {
			return nil, err
		}
		var parents []map[string][]byte
		for _, par := range rng.parents {
			pm, err := stateOf(st, par)
			if err != nil {
				return nil, err
			}
			parents = append(parents, pm)
		}
		entries, _, err := processors.HandOver(r, parents, rng.owns)
		if err != nil {
			return nil, fmt.Errorf("hand shard %s its parents' keys: %w", id, err)
		}
		return entries, nil
	}
	stateOf = func(st *stageSpec, id string) (map[string][]byte, error) {
		if m, ok := mirror[stageShard{st, id}]; ok {
			return m, nil
		}
		m, err := handed(st, id)
		if err != nil {
			return nil, err
		}
		if m == nil {
			m = map[string][]byte{}
		}
		mirror[stageShard{st, id}] = m
		return m, nil
	}
	ordinal := map[string]int64{}
	seen := map[string]bool{}
	var n int64
	err = kinesis.ReadRange(ctx, kin, kc.Stream, pos, func(s kinesis.Shard, b kinesis.Batch) error {
		part := shardNumber(s.ID)
		if !seen[s.ID] {
			seen[s.ID] = true
			for _, st := range stages {
				// The processor starts from the handoff, and so does the
				// mirror: a handed-over key the shard never touches is
				// still its state when its own children take over.
				entries, err := handed(st, s.ID)
				if err != nil {
					return err
				}
				if entries == nil {
					mirror[stageShard{st, s.ID}] = map[string][]byte{}
					continue
				}
				mirror[stageShard{st, s.ID}] = maps.Clone(entries)
				if err := p.restore(st, part, entries); err != nil {
					return err
				}
			}
		}
		stop := false
		for _, r := range b.Records {
			if stop = !until.IsZero() && !r.Arrival.Before(until); stop {
				break
			}
			if err := p.FeedRecord(srcName, processors.Record{Partition: part, Offset: ordinal[s.ID], Key: []byte(r.PartitionKey), Value: r.Data, Timestamp: arrivalMS(r.Arrival)}); err != nil {
				return err
			}
			ordinal[s.ID]++
			n++
		}
		for _, st := range stages {
			m := mirror[stageShard{st, s.ID}]
			p.changes(st, part, func(k, v []byte) {
				if v == nil {
					delete(m, string(k))
				} else {
					m[string(k)] = append([]byte(nil), v...)
				}
			})
		}
		if stop {
			return kinesis.ErrStopShard // past --to: the rest of this shard is not needed
		}
		return nil
	})
	return n, err
}
