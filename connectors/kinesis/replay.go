package kinesis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// Position says where ReadRange starts on each shard. For a shard, the first
// of these that applies wins: After[id], Seq[id], Timestamp, TRIM_HORIZON.
// A shard missing from the maps (a child created after the checkpoints were
// taken, say) therefore starts at Timestamp or at its beginning.
type Position struct {
	Timestamp   *time.Time        // AT_TIMESTAMP: records that arrived at or after it
	Seq         map[string]string // AT_SEQUENCE_NUMBER per shard (that record is included)
	After       map[string]string // AFTER_SEQUENCE_NUMBER per shard (checkpoints); ShardEnd skips the shard
	TrimHorizon bool              // from the oldest retained record
}

func (p Position) start(shard string) (startPos, bool) {
	if seq, ok := p.After[shard]; ok {
		if seq == ShardEnd {
			return startPos{}, false
		}
		return afterCheckpoint(seq), true
	}
	if seq, ok := p.Seq[shard]; ok {
		return startPos{typ: types.ShardIteratorTypeAtSequenceNumber, seq: seq}, true
	}
	if p.Timestamp != nil {
		return startPos{typ: types.ShardIteratorTypeAtTimestamp, ts: *p.Timestamp}, true
	}
	return startPos{typ: types.ShardIteratorTypeTrimHorizon}, true
}

// ErrStopShard, returned by ReadRange's callback, ends the read of the
// current shard (a replay past its upper bound) and moves on to the next.
var ErrStopShard = errors.New("kinesis: stop reading this shard")

// ReadRange reads every shard that exists when it starts, from `from` up to
// the tip as of the time each shard is read, without touching any lease
// table: the replay path. Shards are read one at a time, parents before
// children and otherwise by shard ID, so the sequence of fn calls is
// deterministic for a given stream content. A shard stops at SHARD_END or at
// the first empty response with MillisBehindLatest == 0, or when fn returns
// ErrStopShard. Any other error of fn stops the read and is returned.
func ReadRange(ctx context.Context, client KinesisAPI, stream string, from Position, fn func(s Shard, b Batch) error, opts ...Option) error {
	if client == nil || stream == "" || fn == nil {
		return errors.New("kinesis: ReadRange needs a client, a stream name and a callback")
	}
	if from.Timestamp == nil && !from.TrimHorizon && len(from.Seq) == 0 && len(from.After) == 0 {
		return errors.New("kinesis: ReadRange needs a start: set Position.Timestamp, Seq, After or TrimHorizon")
	}
	o := buildOptions(opts)
	shards, err := listShards(ctx, client, stream)
	if err != nil {
		return err
	}
	for _, s := range replayOrder(shards) {
		pos, ok := from.start(s.ID)
		if !ok {
			continue
		}
		r := &shardReader{kin: client, stream: stream, shard: s.ID, limit: 10000, stopAtTip: true,
			log: o.log.With(slog.String("replay", stream))}
		if _, err := r.read(ctx, pos, func(b Batch) error { return fn(s, b) }); err != nil && !errors.Is(err, ErrStopShard) {
			return fmt.Errorf("kinesis: replay shard %s of %s from %s: %w", s.ID, stream, pos, err)
		}
	}
	return nil
}

// replayOrder sorts shards topologically (parents first), ties by ID.
func replayOrder(shards []types.Shard) []Shard {
	listed := map[string]bool{}
	for _, s := range shards {
		listed[aws.ToString(s.ShardId)] = true
	}
	pending := make([]Shard, 0, len(shards))
	for _, s := range shards {
		var parents []string
		for _, p := range parentsOf(s) {
			if listed[p] {
				parents = append(parents, p)
			}
		}
		pending = append(pending, Shard{ID: aws.ToString(s.ShardId), Parents: parents})
	}
	slices.SortFunc(pending, func(a, b Shard) int { return strings.Compare(a.ID, b.ID) })
	done := map[string]bool{}
	out := make([]Shard, 0, len(pending))
	for len(pending) > 0 {
		i := slices.IndexFunc(pending, func(s Shard) bool {
			return !slices.ContainsFunc(s.Parents, func(p string) bool { return !done[p] })
		})
		if i < 0 { // a cycle cannot happen in Kinesis; read the rest by ID
			return append(out, pending...)
		}
		done[pending[i].ID] = true
		out = append(out, pending[i])
		pending = slices.Delete(pending, i, i+1)
	}
	return out
}
