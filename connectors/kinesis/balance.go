package kinesis

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// takeRound scans the lease table once: it updates counter observations,
// takes free or expired leases up to this instance's fair share, and, when
// nothing is free, steals one lease from the most loaded owner.
func (c *Consumer) takeRound(ctx context.Context) {
	items, err := c.table.scan(ctx)
	if err != nil {
		c.logErr(err, "lease scan failed")
		return
	}
	now := c.clock.Now()
	byID := make(map[string]leaseItem, len(items))
	for _, it := range items {
		byID[it.ShardID] = it
		if o, ok := c.obs[it.ShardID]; !ok || o.counter != it.Counter || o.owner != it.Owner {
			c.obs[it.ShardID] = observation{counter: it.Counter, owner: it.Owner, seen: now}
		}
	}
	for id := range c.obs {
		if _, ok := byID[id]; !ok {
			delete(c.obs, id)
		}
	}

	c.mu.Lock()
	mine := make(map[string]bool, len(c.held))
	for id := range c.held {
		mine[id] = true
	}
	c.mu.Unlock()

	// Work is every unfinished lease whose parents are finished.
	var free []leaseItem
	load := map[string][]leaseItem{} // live owner → leases
	eligible := 0
	for _, it := range items {
		if it.Checkpoint == ShardEnd || !parentsDone(it, byID) {
			continue
		}
		eligible++
		switch {
		case mine[it.ShardID]:
			load[c.cfg.Owner] = append(load[c.cfg.Owner], it)
		case it.Owner == "" || now.Sub(c.obs[it.ShardID].seen) >= c.cfg.LeaseDuration:
			free = append(free, it) // unowned, or expired by our own observation
		default:
			load[it.Owner] = append(load[it.Owner], it)
		}
	}
	instances := len(load)
	if _, ok := load[c.cfg.Owner]; !ok {
		instances++
	}
	target := (eligible + instances - 1) / instances
	have := len(load[c.cfg.Owner])
	if have >= target {
		return
	}
	// Shuffled so instances starting together do not race for the same leases.
	rand.Shuffle(len(free), func(i, j int) { free[i], free[j] = free[j], free[i] })
	for _, it := range free {
		if have >= target || ctx.Err() != nil {
			return
		}
		if c.take(ctx, it, false) {
			have++
		}
	}
	if len(free) > 0 {
		return
	}
	// Nothing free: steal one lease from the most loaded owner above target.
	var victim string
	for owner, ls := range load {
		if owner != c.cfg.Owner && len(ls) > target && (victim == "" || len(ls) > len(load[victim]) ||
			len(ls) == len(load[victim]) && owner < victim) {
			victim = owner
		}
	}
	if victim != "" {
		ls := load[victim]
		c.take(ctx, ls[rand.IntN(len(ls))], true)
	}
}

// parentsDone reports whether every parent lease is checkpointed SHARD_END
// (a parent without a lease was trimmed and counts as done).
func parentsDone(it leaseItem, byID map[string]leaseItem) bool {
	for _, p := range it.Parents {
		if pl, ok := byID[p]; ok && pl.Checkpoint != ShardEnd {
			return false
		}
	}
	return true
}

// take claims one lease and starts its worker. It reports success.
func (c *Consumer) take(ctx context.Context, it leaseItem, steal bool) bool {
	l, err := c.table.take(ctx, it, c.cfg.Owner)
	if err != nil {
		if !errors.Is(err, ErrLeaseLost) {
			c.logErr(err, "take lease failed")
		}
		return false
	}
	if steal {
		c.m.stolen.Inc()
		c.log.Info("kinesis: stole lease", "shard", it.ShardID, "from", it.Owner)
	} else {
		c.m.taken.Inc()
		c.log.Info("kinesis: took lease", "shard", it.ShardID, "previous_owner", it.Owner)
	}
	c.obs[it.ShardID] = observation{counter: l.counter, owner: c.cfg.Owner, seen: c.clock.Now()}
	id := it.ShardID
	c.start(ctx, Shard{ID: id, Parents: it.Parents, Lease: l, Listed: func() (bool, time.Duration) { return c.listed(id) }})
	return true
}

// start runs a worker goroutine for s; Run waits for it.
func (c *Consumer) start(ctx context.Context, s Shard) {
	wctx, cancel := context.WithCancelCause(ctx)
	w := &worker{shard: s, lease: s.Lease, cancel: cancel}
	c.mu.Lock()
	c.held[s.ID] = w
	c.m.held.Set(float64(len(c.held)))
	c.mu.Unlock()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer func() {
			cancel(nil)
			c.mu.Lock()
			delete(c.held, s.ID)
			c.m.held.Set(float64(len(c.held)))
			c.mu.Unlock()
		}()
		c.runShard(wctx, w)
	}()
}

// releaseTimeout bounds the release write made after a worker stops.
func (c *Consumer) releaseTimeout() time.Duration { return c.cfg.LeaseDuration }
