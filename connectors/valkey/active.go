package valkey

import (
	"context"
	"fmt"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/valkey-io/valkey-go"

	"github.com/kandle/kandle/connectors/sinkkit"
)

// Active records the newest state of an open candle. It never blocks and
// never fails: the candle replaces any pending one for the same window
// (timeframe, symbol, open_time) and is sent with the next coalesced flush
// (at once when Config.Coalesce is 0). Invalid candles and calls after Close
// are dropped and counted.
func (s *Sink) Active(c candle.Candle) {
	if invalid(&c) != "" {
		s.m.dropped.Inc()
		return
	}
	k := windowOf(&c)
	s.amu.Lock()
	if s.closed {
		s.amu.Unlock()
		s.m.dropped.Inc()
		return
	}
	down := s.down.Load()
	if down && !s.keepNewest(k) {
		s.amu.Unlock()
		s.m.dropped.Inc() // an older window than one already waiting for Valkey
		return
	}
	if _, ok := s.pending[k]; ok {
		if down {
			s.m.dropped.Inc() // replaced while Valkey is unreachable: never sent
		} else {
			s.m.coalesced.Inc()
		}
	}
	s.pending[k] = c
	s.newest[k.key] = max(s.newest[k.key], k.open)
	s.amu.Unlock()
	if s.cfg.Coalesce == 0 {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// keepNewest decides, while Valkey is unreachable, whether an update of
// window w may wait in pending: only the newest window of each key does, so
// an outage of any length holds at most one candle per key (memory stays
// bounded by the number of symbols, not by time). An older pending window
// of the key is dropped (counted) in its favour. Caller holds amu.
func (s *Sink) keepNewest(w window) bool {
	n, ok := s.newest[w.key]
	switch {
	case !ok || w.open == n:
		return true
	case w.open < n:
		return false
	}
	if _, waiting := s.pending[window{w.key, n}]; waiting {
		delete(s.pending, window{w.key, n})
		s.m.dropped.Inc()
	}
	return true
}

// FlushActive sends the pending active candles now and waits for the result.
// It returns an error if Valkey did not take them (they stay pending and are
// retried by the flush goroutine) or ctx ended first.
func (s *Sink) FlushActive(ctx context.Context) error {
	reply := make(chan error, 1)
	select {
	case s.flushes <- reply:
	case <-s.done:
		return ErrClosed
	case <-ctx.Done():
		return fmt.Errorf("valkey: flush active candles: %w", ctx.Err())
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return fmt.Errorf("valkey: flush active candles: %w", ctx.Err())
	}
}

// loop is the one goroutine that sends active candles. It owns newest and
// the batch buffers; it exits when Close cancels s.ctx.
func (s *Sink) loop() {
	defer close(s.done)
	defer func() { // Close during an outage: what is left never reaches Valkey
		s.amu.Lock()
		s.m.dropped.Add(float64(len(s.pending)))
		clear(s.pending)
		clear(s.newest)
		s.amu.Unlock()
	}()
	ctx := s.ctx // cancelled by Close; also ends an in-flight round trip
	a := &activeWriter{s: s, newest: make(map[key]int64)}
	var tick <-chan time.Time
	if s.cfg.Coalesce > 0 {
		t := time.NewTicker(s.cfg.Coalesce)
		defer t.Stop()
		tick = t.C
	}
	fails := 0
	for {
		var reply chan error
		select {
		case <-ctx.Done():
			return
		case <-tick:
		case <-s.wake:
		case reply = <-s.flushes:
		}
		err := a.flush(ctx)
		if reply != nil {
			reply <- err
		}
		if err == nil {
			fails = 0
			continue
		}
		if fails%20 == 0 {
			s.log.Warn("valkey unreachable; holding the newest active candle per window until it is back", "err", err, "attempt", fails+1)
		}
		fails++
		if sinkkit.Sleep(ctx, backoff(fails-1)) != nil {
			return
		}
		select { // retry what was put back, also when coalesce is 0
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// activeWriter is the state of the flush goroutine.
type activeWriter struct {
	s      *Sink
	newest map[key]int64 // newest open_time stored in each hash by this sink
	top    map[key]int64 // newest open_time per key in the chunk being sent
	batch  []candle.Candle
	cmds   valkey.Commands
	syms   []string
	seen   map[string]struct{}
	msg    []byte
	owner  []int           // cmds[i] belongs to candle owner[i] of the chunk (-1: none)
	wrong  map[string]bool // hashes whose WRONGTYPE was logged
}

// maxPipeline is the most candles in one active pipeline; a flush of more
// keys is sent as several.
const maxPipeline = 2048

// flush sends every pending candle, maxPipeline per round trip. On failure
// the unsent candles go back to pending unless Active replaced them (those
// are counted as dropped).
//
// It takes the pending map whole and leaves Active a new one, so Active
// waits for a pointer swap, not for a copy, and no entry is deleted one by
// one (the deletes were a sixth of the flush's CPU in BenchmarkSinkVsIdeal).
// The new map is sized like the last one taken; after an outage the
// oversized map goes to the garbage collector instead of staying.
func (a *activeWriter) flush(ctx context.Context) error {
	s := a.s
	s.amu.Lock()
	taken := s.pending
	s.pending = make(map[window]candle.Candle, len(taken))
	clear(s.newest)
	s.amu.Unlock()
	a.batch = a.batch[:0]
	for _, c := range taken {
		a.batch = append(a.batch, c)
	}
	for i := 0; i < len(a.batch); i += maxPipeline {
		chunk := a.batch[i:min(i+maxPipeline, len(a.batch))]
		if err := a.send(ctx, chunk); err != nil {
			a.requeue(a.batch[i:])
			return fmt.Errorf("valkey: send %d active candles: %w", len(a.batch)-i, err)
		}
	}
	if len(a.batch) > 0 {
		s.down.Store(false)
	}
	return nil
}

// send writes cs in one pipeline: HSET+PEXPIRE (unless the hash holds a newer
// window), PUBLISH each, one SADD of the symbols.
func (a *activeWriter) send(ctx context.Context, cs []candle.Candle) error {
	s := a.s
	b := s.client.B()
	a.cmds = a.cmds[:0]
	a.syms = a.syms[:0]
	if a.seen == nil {
		a.seen = make(map[string]struct{})
	}
	clear(a.seen)
	// The hash gets the newest window only: newer than what this sink
	// stored before and than the other windows of the key in this chunk.
	if a.top == nil {
		a.top = make(map[key]int64)
	}
	clear(a.top)
	for i := range cs {
		k := keyOf(&cs[i])
		top, ok := a.top[k]
		if !ok {
			top, ok = a.newest[k]
		}
		if !ok || cs[i].OpenTime > top {
			top = cs[i].OpenTime
		}
		a.top[k] = top
	}
	stale := 0
	a.owner = a.owner[:0]
	for i := range cs {
		c := &cs[i]
		if c.OpenTime == a.top[keyOf(c)] {
			hk := s.names.hash(c.Timeframe, c.Symbol)
			a.cmds = append(a.cmds, hset(b, hk, c), b.Pexpire().Key(hk).Milliseconds(ttl(s.ttlMs, c)).Build())
			a.owner = append(a.owner, i, i)
		} else {
			stale++ // a late update of an older window: publish only
		}
		a.msg = message(a.msg, c, false)
		a.cmds = append(a.cmds, b.Publish().Channel(s.names.channel(c.Timeframe, c.Symbol)).Message(string(a.msg)).Build())
		a.owner = append(a.owner, i)
		if _, ok := a.seen[c.Symbol]; !ok {
			a.seen[c.Symbol] = struct{}{}
			a.syms = append(a.syms, c.Symbol)
		}
	}
	a.cmds = append(a.cmds, b.Sadd().Key(s.names.symbols()).Member(a.syms...).Build())
	a.owner = append(a.owner, -1)

	// The pipeline's commands are independent: a key that holds another
	// type (WRONGTYPE) fails only its own commands, and retrying cannot fix
	// it, so that key's update is rejected while every other key's stands.
	// Any other error (connection lost, timeout) retries the whole chunk.
	var rejected []int
	err := s.timed(ctx, kindActive, func(ctx context.Context) error {
		rejected = rejected[:0]
		for i, r := range s.doMulti(ctx, s.client, a.cmds...) {
			err := r.Error()
			if err == nil {
				continue
			}
			if isWrongType(err) && a.owner[i] >= 0 {
				rejected = append(rejected, a.owner[i])
				continue
			}
			if isWrongType(err) { // the symbols set itself
				s.log.Warn("valkey: the symbols set holds another type; remove or rename that key", "key", s.names.symbols(), "err", err)
				continue
			}
			return err
		}
		return nil
	})
	if err != nil {
		s.m.errors.WithLabelValues(kindActive).Inc()
		return err
	}
	for k, top := range a.top {
		a.newest[k] = top
	}
	bad := a.reject(cs, rejected)
	s.m.written.WithLabelValues(kindActive).Add(float64(len(cs) - bad))
	s.m.stale.Add(float64(stale))
	return nil
}

// reject counts and logs (once per key until it recovers) the active
// updates of cs at the given positions that Valkey refused with WRONGTYPE,
// and returns how many candles that was.
func (a *activeWriter) reject(cs []candle.Candle, at []int) int {
	s := a.s
	if a.wrong == nil {
		a.wrong = make(map[string]bool)
	}
	seen := map[int]bool{}
	for _, i := range at {
		if seen[i] {
			continue
		}
		seen[i] = true
		c := &cs[i]
		hk := s.names.hash(c.Timeframe, c.Symbol)
		s.m.activeRejected.Inc()
		if !a.wrong[hk] {
			a.wrong[hk] = true
			s.log.Warn("valkey: key holds another type (WRONGTYPE); its live updates are rejected, other keys go on. Delete or rename the key to resume it",
				"key", hk, "symbol", c.Symbol, "timeframe", c.Timeframe)
		}
	}
	if len(a.wrong) > 0 && len(seen) < len(cs) {
		for i := range cs {
			if !seen[i] {
				delete(a.wrong, s.names.hash(cs[i].Timeframe, cs[i].Symbol))
			}
		}
	}
	return len(seen)
}

// requeue puts unsent candles back (at most one per key) unless a newer one
// is pending; the replaced ones never reach Valkey and count as dropped.
func (a *activeWriter) requeue(cs []candle.Candle) {
	s := a.s
	s.down.Store(true)
	s.amu.Lock()
	defer s.amu.Unlock()
	for _, c := range cs {
		w := windowOf(&c)
		if _, ok := s.pending[w]; !ok && !s.closed && s.keepNewest(w) {
			s.pending[w] = c
			s.newest[w.key] = max(s.newest[w.key], w.open)
		} else {
			s.m.dropped.Inc()
		}
	}
}
