package kinesis

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// runShard opens one leased shard, reads it until SHARD_END or until the
// lease is lost or the consumer stops, and then ends or gives up the lease.
func (c *Consumer) runShard(ctx context.Context, w *worker) {
	s := w.shard
	log := c.log.With("shard", s.ID)
	res, err := c.readOwned(ctx, w)
	if err == nil && res.ended {
		if err = c.endShard(ctx, w, res.children); err == nil {
			return
		}
	}
	if c.abandon {
		return // simulated crash: the lease stays until it expires
	}
	cause := context.Cause(ctx)
	switch {
	case errors.Is(err, ErrLeaseLost) || errors.Is(cause, ErrLeaseLost):
		log.Info("kinesis: shard stopped, lease lost")
	case ctx.Err() != nil:
		log.Debug("kinesis: shard stopped", "cause", cause)
	default:
		log.Warn("kinesis: shard failed; releasing its lease for a retry", "err", err)
	}
	c.h.Lost(s)
	if !w.lease.isLost() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.releaseTimeout())
		defer cancel()
		if err := w.lease.release(rctx); err != nil && !errors.Is(err, ErrLeaseLost) {
			log.Warn("kinesis: lease release failed; it will expire instead", "err", err)
		}
	}
}

// readOwned calls Open and reads from the position it (or the lease) gives.
func (c *Consumer) readOwned(ctx context.Context, w *worker) (readResult, error) {
	s := w.shard
	resume, err := c.h.Open(ctx, s)
	if err != nil {
		return readResult{}, fmt.Errorf("kinesis: open shard %s: %w", s.ID, err)
	}
	if resume == "" {
		resume = w.lease.LastCheckpoint()
	}
	if resume == ShardEnd {
		return readResult{ended: true}, nil
	}
	pos, _ := c.h.(PositionHandler)
	onBatch := func(b Batch) {
		c.m.records.Add(float64(len(b.Records)))
		c.m.behind.WithLabelValues(s.ID).Set(float64(b.MillisBehindLatest))
		if pos != nil {
			pos.Position(s, b.MillisBehindLatest)
		}
	}
	read := (&shardReader{
		kin: c.kin, stream: c.cfg.Stream, shard: s.ID, poll: c.cfg.PollInterval, limit: c.cfg.MaxRecords,
		log: c.log, onThrottle: c.m.throttled.Inc, onBatch: onBatch,
	}).read
	if c.fo != nil {
		read = (&fanOutReader{
			api: c.fo, kin: c.kin, consumer: c.arn, stream: c.cfg.Stream, shard: s.ID, log: c.log,
			closed: func() bool { return c.isClosed(s.ID) }, onThrottle: c.m.throttled.Inc,
			onSubscribe: c.m.subscribe.Inc, onBatch: onBatch, maxEvents: c.maxEvents,
		}).read
	}
	return read(ctx, afterCheckpoint(resume), func(b Batch) error {
		if w.lease.isLost() {
			return fmt.Errorf("shard %s: %w", s.ID, ErrLeaseLost)
		}
		if err := c.h.Records(ctx, s, b); err != nil {
			return fmt.Errorf("kinesis: handler for shard %s: %w", s.ID, err)
		}
		return nil
	})
}

// endShard hands a finished shard to End, checkpoints SHARD_END, releases the
// lease and makes sure the children have leases so they are taken next.
func (c *Consumer) endShard(ctx context.Context, w *worker, children []string) error {
	s := w.shard
	var listed []string
	if shards, err := listShards(ctx, c.kin, c.cfg.Stream); err == nil {
		listed = childrenOf(shards, s.ID)
	} else if len(children) == 0 {
		return err // kinesalite sends no ChildShards: the listing is the only source
	}
	for _, id := range listed {
		if !slices.Contains(children, id) {
			children = append(children, id)
		}
	}
	slices.Sort(children)
	if err := c.h.End(ctx, s, children); err != nil {
		return fmt.Errorf("kinesis: handler End for shard %s: %w", s.ID, err)
	}
	if err := w.lease.finish(ctx); err != nil {
		return err
	}
	c.log.Info("kinesis: shard finished", "shard", s.ID, "children", children)
	if len(children) > 0 {
		select {
		case c.syncNow <- struct{}{}: // create child leases and take them soon
		default:
		}
	}
	return nil
}
