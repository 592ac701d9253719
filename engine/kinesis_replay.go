package engine

import (
	"context"
	"fmt"
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
	// state mirrors each (stage, shard) processor's entries, for handoffs.
	type stageShard struct {
		stage *stageSpec
		shard string
	}
	mirror := map[stageShard]map[string][]byte{}
	ordinal := map[string]int64{}
	seen := map[string]bool{}
	var n int64
	err = kinesis.ReadRange(ctx, kin, kc.Stream, pos, func(s kinesis.Shard, b kinesis.Batch) error {
		part := shardNumber(s.ID)
		if !seen[s.ID] {
			seen[s.ID] = true
			if len(s.Parents) > 0 {
				rng, err := ranges.get(ctx, s.ID)
				if err != nil {
					return err
				}
				for _, st := range stages {
					r, err := resharderOf(g.top, st)
					if err != nil {
						return err
					}
					var parents []map[string][]byte
					for _, par := range s.Parents {
						parents = append(parents, mirror[stageShard{st, par}])
					}
					entries, _, err := processors.HandOver(r, parents, rng.owns)
					if err != nil {
						return fmt.Errorf("hand shard %s its parents' keys: %w", s.ID, err)
					}
					if err := p.restore(st, part, entries); err != nil {
						return err
					}
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
			if m == nil {
				m = map[string][]byte{}
				mirror[stageShard{st, s.ID}] = m
			}
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
