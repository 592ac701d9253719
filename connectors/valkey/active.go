package valkey

import (
	"context"
	"fmt"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/valkey-io/valkey-go"
)

// Active records the newest state of an open candle. It never blocks and
// never fails: the candle replaces any pending one for the same (timeframe,
// symbol) and is sent with the next coalesced flush (immediately when
// Config.Coalesce is 0). Invalid candles and calls after Close are dropped
// and counted.
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
	if _, ok := s.pending[k]; ok {
		if s.down.Load() {
			s.m.dropped.Inc() // replaced while Valkey is unreachable: never sent
		} else {
			s.m.coalesced.Inc()
		}
	}
	s.pending[k] = c
	s.amu.Unlock()
	if s.cfg.Coalesce == 0 {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
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
// the batch buffers; it exits when stop is closed.
func (s *Sink) loop() {
	defer close(s.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // ends in-flight round trips when the sink closes
		<-s.stop
		cancel()
	}()

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
		case <-s.stop:
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
			s.log.Warn("valkey unreachable, active candles are being dropped until it is back", "err", err, "attempt", fails+1)
		}
		fails++
		if !sleep(ctx, backoff(fails-1)) {
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
	batch  []candle.Candle
	cmds   valkey.Commands
	syms   []string
	seen   map[string]struct{}
	msg    []byte
}

// flush sends every pending candle in one pipeline. On failure the batch is
// counted as dropped and put back unless a newer candle replaced it.
func (a *activeWriter) flush(ctx context.Context) error {
	s := a.s
	s.amu.Lock()
	a.batch = a.batch[:0]
	for k, c := range s.pending {
		a.batch = append(a.batch, c)
		delete(s.pending, k)
	}
	s.amu.Unlock()
	if len(a.batch) == 0 {
		return nil
	}

	b := s.client.B()
	a.cmds = a.cmds[:0]
	a.syms = a.syms[:0]
	if a.seen == nil {
		a.seen = make(map[string]struct{})
	}
	clear(a.seen)
	stale := 0
	for i := range a.batch {
		c := &a.batch[i]
		k := keyOf(c)
		if last, ok := a.newest[k]; !ok || c.OpenTime >= last {
			hk := s.names.hash(c.Timeframe, c.Symbol)
			a.cmds = append(a.cmds, hset(b, hk, c), b.Pexpire().Key(hk).Milliseconds(ttl(s.ttlMs, c)).Build())
		} else {
			stale++ // a late update of an older window: publish only
		}
		a.msg = message(a.msg, c, false)
		a.cmds = append(a.cmds, b.Publish().Channel(s.names.channel(c.Timeframe, c.Symbol)).Message(string(a.msg)).Build())
		if _, ok := a.seen[c.Symbol]; !ok {
			a.seen[c.Symbol] = struct{}{}
			a.syms = append(a.syms, c.Symbol)
		}
	}
	a.cmds = append(a.cmds, b.Sadd().Key(s.names.symbols()).Member(a.syms...).Build())

	err := s.timed(ctx, kindActive, func(ctx context.Context) error {
		for _, r := range s.doMulti(ctx, s.client, a.cmds...) {
			if err := r.Error(); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		for i := range a.batch {
			c := &a.batch[i]
			if k := keyOf(c); c.OpenTime >= a.newest[k] {
				a.newest[k] = c.OpenTime
			}
		}
		s.down.Store(false)
		s.m.written.WithLabelValues(kindActive).Add(float64(len(a.batch)))
		s.m.stale.Add(float64(stale))
		return nil
	}
	// Not stored. Keep the newest candle per key for the next attempt
	// (bounded: one per key); one that Active already replaced is dropped.
	s.m.errors.WithLabelValues(kindActive).Inc()
	s.down.Store(true)
	s.amu.Lock()
	for _, c := range a.batch {
		if _, ok := s.pending[keyOf(&c)]; !ok && !s.closed {
			s.pending[keyOf(&c)] = c
		} else {
			s.m.dropped.Inc()
		}
	}
	s.amu.Unlock()
	return fmt.Errorf("valkey: send %d active candles: %w", len(a.batch), err)
}
