package engine

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
)

// fetchPoller is the part of a kgo.Client a changelog read needs.
type fetchPoller interface {
	PollFetches(ctx context.Context) kgo.Fetches
}

// readChangelogTo reads changelog partition p (already being consumed from
// the restore start) and calls fn with every data record at or below
// barrier, the offset of the restore barrier written just before; an error
// from fn ends the read and is returned. It stops
// at the first record at or past the barrier's offset, whatever record is
// there now: the barrier itself, or — when compaction removed it because a
// later restore wrote another barrier — anything after it, including a
// transaction marker (the client should keep control records). So a
// compacted barrier cannot make a restore wait forever; only still open
// transactions before the barrier hold it up, until they end.
//
// Both exactly-once units, Kafka partitions and Kinesis shards, restore
// with it.
func readChangelogTo(ctx context.Context, cl fetchPoller, log *slog.Logger, topic string, p int32, barrier int64, fn func(*kgo.Record) error) error {
	var fnErr error
	for done := false; !done; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		fs.EachError(func(t string, part int32, err error) {
			log.Warn("changelog fetch error", "topic", t, "partition", part, "err", err)
		})
		fs.EachRecord(func(r *kgo.Record) {
			if done || fnErr != nil || r.Topic != topic || r.Partition != p {
				return
			}
			if r.Offset >= barrier {
				done = true
			}
			if r.Offset > barrier || r.Attrs.IsControl() {
				return
			}
			fnErr = fn(r)
		})
		if fnErr != nil {
			return fnErr
		}
	}
	return nil
}
