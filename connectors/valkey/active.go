package valkey

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/valkey-io/valkey-go"

	"github.com/kandle/kandle/connectors/sinkkit"
)

// entry is the sink's state of one live candle key (timeframe, symbol). One
// map lookup in Active finds both its pending windows and what the sink
// stored last.
type entry struct {
	key
	head int32 // newest-added pending slot of the key in Sink.slots, -1 none; guarded by amu
	busy bool  // a flush in progress holds updates of the key; guarded by amu

	// owned by the flush goroutine (chunks in flight share no key)
	stored    int64 // newest open_time this sink stored in the hash
	hasStored bool
}

// slot is one pending window. The pending windows of a key are chained
// from entry.head through next (almost always one).
type slot struct {
	c    candle.Candle
	e    *entry
	next int32 // older-added pending slot of the same key, -1 end
	dead bool  // replaced while Valkey was unreachable, or superseded by a final: never sent
}

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
	k := keyOf(&c)
	s.amu.Lock()
	if s.closed {
		s.amu.Unlock()
		s.m.dropped.Inc()
		return
	}
	e := s.keys[k]
	if e == nil {
		e = &entry{key: k, head: -1}
		s.keys[k] = e
	}
	s.put(e, &c, false)
	s.amu.Unlock()
	if s.cfg.Coalesce == 0 {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// put adds c to the pending windows of its key e: it replaces a pending
// update of the same window (unless c is an unsent one put back after a
// failed flush: then the pending one is newer and c is dropped).
//
// While Valkey is unreachable only the newest window of each key may wait,
// so an outage of any length holds at most one candle per key (memory stays
// bounded by the number of symbols, not by time): an older window than the
// newest pending one is dropped, and a newer one takes the place of the
// key's pending windows (dropped). Caller holds amu.
func (s *Sink) put(e *entry, c *candle.Candle, requeued bool) {
	newest, has := int64(0), false
	for i := e.head; i >= 0; i = s.slots[i].next {
		p := &s.slots[i]
		if p.c.OpenTime == c.OpenTime {
			switch {
			case requeued:
				s.m.dropped.Inc() // a newer update of the window is pending
			case s.down.Load():
				p.c = *c
				s.m.dropped.Inc() // replaced while Valkey is unreachable: never sent
			default:
				p.c = *c
				s.m.coalesced.Inc()
			}
			return
		}
		if !has || p.c.OpenTime > newest {
			newest, has = p.c.OpenTime, true
		}
	}
	if !s.down.Load() || !has {
		s.slots = append(s.slots, slot{c: *c, e: e, next: e.head})
		e.head = int32(len(s.slots) - 1)
		return
	}
	if c.OpenTime < newest {
		s.m.dropped.Inc() // an older window than one already waiting for Valkey
		return
	}
	// The newest window now: it reuses the head's slot, the others die.
	h := &s.slots[e.head]
	for i := h.next; i >= 0; i = s.slots[i].next {
		s.slots[i].dead = true
		s.m.dropped.Inc()
	}
	h.c, h.next = *c, -1
	s.m.dropped.Inc()
}

// liveFirst orders the live path before the finals of s.buf: the pending
// updates of their keys at or before a final's window are superseded by it
// and dropped (counted as coalesced); if any other update of those keys is
// pending or in a flush in progress, it flushes the active candles (after
// that flush) and returns its error. When nothing of those keys is pending
// or in flight it costs no round trip. Caller holds fmu.
func (s *Sink) liveFirst(ctx context.Context) error {
	need := false
	s.amu.Lock()
	if len(s.keys) > 0 {
		for i := range s.buf {
			f := &s.buf[i]
			e := s.keys[keyOf(f)]
			if e == nil {
				continue
			}
			prev := int32(-1)
			for j := e.head; j >= 0; {
				sl := &s.slots[j]
				next := sl.next
				if sl.c.OpenTime <= f.OpenTime { // superseded by the final: never sent
					sl.dead, sl.next = true, -1
					if prev < 0 {
						e.head = next
					} else {
						s.slots[prev].next = next
					}
					s.m.coalesced.Inc()
				} else {
					prev = j
				}
				j = next
			}
			need = need || e.head >= 0 || e.busy
		}
	}
	s.amu.Unlock()
	if !need {
		return nil
	}
	if err := s.FlushActive(ctx); err != nil {
		return fmt.Errorf("valkey: publish pending live updates before their finals: %w", err)
	}
	return nil
}

// pendingWindows returns the windows waiting to be sent, for tests.
func (s *Sink) pendingWindows() []window {
	s.amu.Lock()
	defer s.amu.Unlock()
	var ws []window
	for i := range s.slots {
		if !s.slots[i].dead {
			ws = append(ws, windowOf(&s.slots[i].c))
		}
	}
	return ws
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

// loop is the one goroutine that sends active candles (with up to
// activeInFlight helpers it waits for); it exits when Close cancels s.ctx.
func (s *Sink) loop() {
	defer close(s.done)
	defer func() { // Close during an outage: what is left never reaches Valkey
		s.amu.Lock()
		for i := range s.slots {
			if !s.slots[i].dead {
				s.m.dropped.Inc()
			}
			s.slots[i].e.head = -1
		}
		s.slots = nil
		s.amu.Unlock()
	}()
	ctx := s.ctx // cancelled by Close; also ends an in-flight round trip
	a := &activeWriter{s: s}
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

// maxPipeline is the most candles in one active pipeline; a flush of more
// keys is sent as several, up to activeInFlight at once.
const (
	maxPipeline    = 2048
	activeInFlight = 4
)

// activeWriter is the state of the flush goroutine.
type activeWriter struct {
	s      *Sink
	spare  []slot  // the slots taken by the last flush, reused by Active
	heads  []int32 // the head slot of each key taken
	chunks []activeChunk
	pipes  [activeInFlight]pipeline // one per sender, reused
	wrong  map[string]bool          // hashes whose WRONGTYPE was logged
}

// activeChunk is one pipeline: whole keys (all their pending windows), so
// chunks in flight at once share no key.
type activeChunk struct {
	heads    []int32 // of the keys in the chunk
	n        int     // candles
	err      error
	rejected []*slot // refused for good (WRONGTYPE)
	stale    int
}

// flush sends every pending candle, maxPipeline per round trip, up to
// activeInFlight round trips at once. On failure the unsent candles go back
// to pending unless Active replaced them (those are counted as dropped).
//
// It takes the pending slots whole and leaves Active the slots of the last
// flush to refill, so Active waits for a swap, not for a copy, and appends
// without growing the slice (growing a slice of candles was most of
// Active's CPU in BenchmarkSinkVsIdeal).
func (a *activeWriter) flush(ctx context.Context) error {
	s := a.s
	s.amu.Lock()
	taken := s.slots
	if cap(a.spare) < len(taken) { // sized like the last one taken: Active does not regrow it
		a.spare = make([]slot, 0, cap(taken))
	}
	s.slots = a.spare[:0]
	a.heads = a.heads[:0]
	for i := range taken { // a key's head is its last slot
		if e := taken[i].e; e.head == int32(i) {
			a.heads = append(a.heads, int32(i))
			e.head = -1
			e.busy = true
		}
	}
	s.amu.Unlock()
	defer func() {
		a.spare = taken
		if len(a.heads) == 0 {
			return
		}
		s.amu.Lock() // after any requeue: a key's updates are sent or pending again
		for _, h := range a.heads {
			taken[h].e.busy = false
		}
		s.amu.Unlock()
	}()

	a.chunks = a.chunks[:0]
	var ch *activeChunk
	for _, h := range a.heads {
		if ch == nil || ch.n >= maxPipeline {
			a.chunks = append(a.chunks, activeChunk{heads: nil})
			ch = &a.chunks[len(a.chunks)-1]
		}
		ch.heads = append(ch.heads, h)
		for i := h; i >= 0; i = taken[i].next {
			if !taken[i].dead {
				ch.n++
			}
		}
	}
	if len(a.chunks) == 0 {
		return nil
	}
	next := make(chan *activeChunk)
	var wg sync.WaitGroup
	for w := range min(activeInFlight, len(a.chunks)) {
		p := &a.pipes[w]
		wg.Go(func() {
			for ch := range next {
				ch.err = p.send(ctx, s, taken, ch)
			}
		})
	}
	for i := range a.chunks {
		next <- &a.chunks[i]
	}
	close(next)
	wg.Wait()

	var err error
	sent := 0
	for i := range a.chunks {
		ch := &a.chunks[i]
		if ch.err != nil {
			if err == nil {
				err = fmt.Errorf("valkey: send %d active candles: %w", ch.n, ch.err)
			}
			a.requeue(taken, ch.heads)
			continue
		}
		sent++
		a.reject(taken, ch)
		s.m.written.WithLabelValues(kindActive).Add(float64(ch.n - len(ch.rejected)))
		s.m.stale.Add(float64(ch.stale))
	}
	if sent > 0 && err == nil {
		s.down.Store(false)
	}
	return err
}

// pipeline is the reusable buffers of one sender.
type pipeline struct {
	cmds  valkey.Commands
	owner []*slot // cmds[i] belongs to candle owner[i] (nil: none)
	syms  []string
	seen  map[string]struct{}
	msg   []byte
}

// send writes the candles of ch in one pipeline: HSET+PEXPIRE of each key's
// newest window (unless this sink stored a newer one before), PUBLISH of
// every window, one SADD of the symbols. After success it records what was
// stored.
func (p *pipeline) send(ctx context.Context, s *Sink, taken []slot, ch *activeChunk) error {
	b := s.client.B()
	p.cmds, p.owner, p.syms = p.cmds[:0], p.owner[:0], p.syms[:0]
	if p.seen == nil {
		p.seen = make(map[string]struct{})
	}
	clear(p.seen)
	ch.stale, ch.rejected = 0, ch.rejected[:0]
	for _, h := range ch.heads {
		e := taken[h].e
		// The hash gets the newest window only: newer than what this sink
		// stored before and than the key's other pending windows.
		top, ok := e.stored, e.hasStored
		for i := h; i >= 0; i = taken[i].next {
			if !taken[i].dead && (!ok || taken[i].c.OpenTime > top) {
				top, ok = taken[i].c.OpenTime, true
			}
		}
		for i := h; i >= 0; i = taken[i].next {
			sl := &taken[i]
			if sl.dead {
				continue
			}
			c := &sl.c
			if c.OpenTime == top {
				hk := s.names.hash(c.Timeframe, c.Symbol)
				p.cmds = append(p.cmds, hset(b, hk, c), b.Pexpire().Key(hk).Milliseconds(ttl(s.ttlMs, c)).Build())
				p.owner = append(p.owner, sl, sl)
			} else {
				ch.stale++ // a late update of an older window: publish only
			}
			p.msg = message(p.msg, c, false)
			p.cmds = append(p.cmds, b.Publish().Channel(s.names.channel(c.Timeframe, c.Symbol)).Message(string(p.msg)).Build())
			p.owner = append(p.owner, sl)
			if _, ok := p.seen[c.Symbol]; !ok {
				p.seen[c.Symbol] = struct{}{}
				p.syms = append(p.syms, c.Symbol)
			}
		}
	}
	p.cmds = append(p.cmds, b.Sadd().Key(s.names.symbols()).Member(p.syms...).Build())
	p.owner = append(p.owner, nil)

	// The pipeline's commands are independent: a key that holds another
	// type (WRONGTYPE) fails only its own commands, and retrying cannot fix
	// it, so that key's update is rejected while every other key's stands.
	// Any other error (connection lost, timeout) retries the whole chunk.
	err := s.timed(ctx, kindActive, func(ctx context.Context) error {
		ch.rejected = ch.rejected[:0]
		for i, r := range s.doMulti(ctx, s.client, p.cmds...) {
			err := r.Error()
			if err == nil {
				continue
			}
			if isWrongType(err) && p.owner[i] != nil {
				if n := len(ch.rejected); n == 0 || ch.rejected[n-1] != p.owner[i] {
					ch.rejected = append(ch.rejected, p.owner[i])
				}
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
	for _, h := range ch.heads {
		e := taken[h].e
		for i := h; i >= 0; i = taken[i].next {
			if !taken[i].dead && (!e.hasStored || taken[i].c.OpenTime > e.stored) {
				e.stored, e.hasStored = taken[i].c.OpenTime, true
			}
		}
	}
	return nil
}

// reject counts and logs (once per key until it recovers) the active
// updates of ch that Valkey refused with WRONGTYPE.
func (a *activeWriter) reject(taken []slot, ch *activeChunk) {
	s := a.s
	if len(ch.rejected) == 0 && len(a.wrong) == 0 {
		return
	}
	if a.wrong == nil {
		a.wrong = make(map[string]bool)
	}
	for _, sl := range ch.rejected {
		hk := s.names.hash(sl.c.Timeframe, sl.c.Symbol)
		s.m.activeRejected.Inc()
		if !a.wrong[hk] {
			a.wrong[hk] = true
			s.log.Warn("valkey: key holds another type (WRONGTYPE); its live updates are rejected, other keys go on. Delete or rename the key to resume it",
				"key", hk, "symbol", sl.c.Symbol, "timeframe", sl.c.Timeframe)
		}
	}
	if len(a.wrong) == 0 {
		return
	}
	bad := make(map[*slot]bool, len(ch.rejected))
	for _, sl := range ch.rejected {
		bad[sl] = true
	}
	for _, h := range ch.heads {
		for i := h; i >= 0; i = taken[i].next {
			if sl := &taken[i]; !sl.dead && !bad[sl] {
				delete(a.wrong, s.names.hash(sl.c.Timeframe, sl.c.Symbol))
			}
		}
	}
}

// requeue puts the unsent candles of the keys at heads back (at most one
// per key while Valkey is down) unless a newer one is pending; the replaced
// ones never reach Valkey and count as dropped.
func (a *activeWriter) requeue(taken []slot, heads []int32) {
	s := a.s
	s.amu.Lock()
	defer s.amu.Unlock()
	s.down.Store(true)
	for _, h := range heads {
		for i := h; i >= 0; i = taken[i].next {
			sl := &taken[i]
			switch {
			case sl.dead:
			case s.closed:
				s.m.dropped.Inc()
			default:
				s.put(sl.e, &sl.c, true)
			}
		}
	}
}
