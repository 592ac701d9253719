package processors

// Closing windows: the watermark passes a key's pending close, the key's
// next window (a candle, or a gap candle with gap fill) is emitted, and the
// key is rescheduled in the heap.

import (
	"unsafe"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/internal/invariant"
)

// advance raises W to max event time − lateness (W never goes back) and
// emits, in (close time, key) order, every window with close ≤ W.
func (a *Aggregator) advance(out *Output) {
	if invariant.Enabled {
		old := a.wm
		defer func() {
			invariant.Check(a.wm >= old, "aggregator %s: watermark went back from %s to %s", a.tfName, fmtMS(old), fmtMS(a.wm))
		}()
	}
	if len(a.revKeys) > 0 {
		a.revise(out) // windows that closed before this move: in window order, before the new finals
	}
	if w := a.maxTS - a.lateness; w > a.wm {
		a.wm = w
	}
	wm := a.wm
	for len(a.heap) > 0 && a.heap[0].pending <= wm {
		a.emitOne(a.heap[0], out)
	}
}

// emitOne emits the next window of k (a candle or a gap) and reschedules k.
func (a *Aggregator) emitOne(k *keyState, out *Output) {
	if len(k.kept) > 0 && k.kept[0].close+a.horizon <= a.wm {
		a.trimKept(k)
		if k.deleted {
			return
		}
		if p, ok := a.duePending(k); !ok || p > a.wm {
			a.schedule(k)
			return
		}
	}
	if k.quiet {
		a.emitQuiet(k, out)
		return
	}
	if !a.gapFill {
		end := k.wins[0].close // emitWindow recycles the window
		a.emitWindow(k, out)
		if len(k.wins) == 0 {
			a.endRun(k, end)
			return
		}
		// Without gap fill a key's next window may open after a silence. A
		// rollup window holding the window just emitted that ends in that
		// silence gets no sub-candle ending on its boundary: direct
		// aggregation closes it when the watermark passes its end, so the
		// rollups get marks then, not only when the next window arrives
		// (which may be long after, or never). The mark at end itself is
		// left out: the sub-candle ending there already closed that window.
		if m, ok := a.nextMark(end, end+1); ok && m <= k.wins[0].open {
			a.goQuiet(k, end, m)
			return
		}
		a.schedule(k)
		return
	}
	if len(k.wins) > 0 && k.wins[0].open == k.nextOpen {
		a.emitWindow(k, out)
	} else {
		if a.maxIdle > 0 && k.nextOpen >= k.prevTS+a.maxIdle {
			// Silent for max_idle: the run of candles ends here.
			a.endRun(k, k.nextOpen)
			return
		}
		c := k.prevClose
		if invariant.Enabled {
			a.checkFinal(k.key, k.nextOpen, k.nextClose)
		}
		if a.horizon > 0 {
			a.keepGap(k, k.nextOpen, k.nextClose, c)
		}
		out.Candles = append(out.Candles, a.gapCandle(k, k.nextOpen, k.nextClose, c))
	}
	k.nextOpen = k.nextClose
	k.nextClose = a.tf.End(k.nextOpen)
	a.touch(k)
	a.schedule(k)
}

// endRun ends k's run of candles: every window opening before n is emitted
// and no gap candle follows. With rollups k goes quiet (QuietMarks follow);
// else the next run starts or k is freed.
func (a *Aggregator) endRun(k *keyState, n int64) {
	if m, ok := a.nextMark(n, n); ok {
		a.goQuiet(k, n, m)
		return
	}
	a.resume(k)
}

// goQuiet makes k quiet after its window ending at n: its next QuietMark is
// at m, and more follow (see emitQuiet) until a window of k opens before one.
func (a *Aggregator) goQuiet(k *keyState, n, m int64) {
	k.quiet, k.quietAt, k.quietNext = true, n, m
	a.touch(k)
	a.schedule(k)
}

// resume ends k's quiet time: a trade that came after the silence starts a
// new run at its window, the silence stays unfilled (a trade arriving later
// for a window between them moves nextOpen back; see Process); with none, k
// is freed and a later trade starts afresh.
func (a *Aggregator) resume(k *keyState) {
	k.quiet = false
	if len(k.wins) == 0 {
		if len(k.kept) > 0 { // kept for revisions: freed when they pass the horizon
			k.started = false
			a.touch(k)
			a.schedule(k)
			return
		}
		a.deleteKey(k)
		return
	}
	if a.gapFill {
		k.nextOpen, k.nextClose = k.wins[0].open, k.wins[0].close
	}
	a.touch(k)
	a.schedule(k)
}

// emitQuiet emits k's next QuietMark, unless a new run begins before it.
func (a *Aggregator) emitQuiet(k *keyState, out *Output) {
	if len(k.wins) == 0 || k.quietNext <= k.wins[0].open {
		out.Quiet = append(out.Quiet, QuietMark{Key: k.key, Until: k.quietNext})
		if m, ok := a.nextMark(k.quietAt, k.quietNext+1); ok {
			k.quietNext = m
			a.touch(k)
			a.schedule(k)
			return
		}
	}
	a.resume(k)
}

// nextMark returns the first boundary at or after from that ends a rollup
// window holding the window that ends at n (the key's last emitted one).
func (a *Aggregator) nextMark(n, from int64) (int64, bool) {
	var best int64
	ok := false
	for _, tf := range a.rollups {
		if e := tf.End(tf.Start(n - 1)); e >= from && (!ok || e < best) {
			best, ok = e, true
		}
	}
	return best, ok
}

// emitWindow emits k's first open window as a final candle and drops it.
func (a *Aggregator) emitWindow(k *keyState, out *Output) {
	w := k.wins[0]
	if invariant.Enabled {
		a.checkFinal(k.key, w.open, w.close)
	}
	out.Candles = append(out.Candles, a.candleOf(k, w))
	kept := a.horizon > 0 && a.keepWindow(k, w) // before prevClose moves: it may become the base
	k.prevClose, k.prevTS, k.hasPrev = w.c, w.cTS, true
	k.lastN = int(min(w.n, 1<<12))
	copy(k.wins, k.wins[1:])
	k.wins[len(k.wins)-1] = nil
	k.wins = k.wins[:len(k.wins)-1]
	if kept {
		if k.cur == w {
			k.cur = nil
		}
	} else {
		a.recycle(k, w)
	}
	a.touch(k)
}

// checkFinal checks (invariants build) that the window of key from open to
// close is final: the watermark passed its close, and no later window of
// the key was emitted before it.
func (a *Aggregator) checkFinal(key string, open, close int64) {
	invariant.Check(a.hasMax && close <= a.wm, "aggregator %s: key %q: window %s emitted before the watermark (%s) passed its close %s",
		a.tfName, key, fmtMS(open), fmtMS(a.wm), fmtMS(close))
	a.finals.emitted("aggregator "+a.tfName, key, open)
}

// recycle returns w to the pool, remembering its persisted id chunks so the
// next Changes call deletes them.
func (a *Aggregator) recycle(k *keyState, w *window) {
	if k.cur == w {
		k.cur = nil
	}
	k.unlog(w)
	if w.chunks > 0 || w.tchunks > 0 {
		k.dropped = append(k.dropped, droppedWin{open: w.open, chunks: w.chunks, tchunks: w.tchunks})
	}
	w.reset()
	a.winPool = append(a.winPool, w)
}

func (a *Aggregator) candleOf(k *keyState, w *window) candle.Candle {
	var c candle.Candle
	a.fillCandle(&c, k, w)
	return c
}

// fillCandle sets *c to the candle of k's window w. The trade id strings
// are made only when the ids changed since the last candle of w, from
// a.idStrs.
func (a *Aggregator) fillCandle(c *candle.Candle, k *keyState, w *window) {
	if w.fidNew {
		w.fidS, w.fidNew = a.idStrs.of(w.fid), false
	}
	if w.lidNew {
		w.lidS, w.lidNew = a.idStrs.of(w.lid), false
	}
	if invariant.Enabled {
		invariant.Check(string(w.fid) == w.fidS && string(w.lid) == w.lidS,
			"aggregator %s: key %q: window %s: cached trade ids %q, %q differ from %q, %q",
			a.tfName, k.key, fmtMS(w.open), w.fidS, w.lidS, w.fid, w.lid)
	}
	*c = candle.Candle{Symbol: k.key, Timeframe: a.tfName, OpenTime: w.open, CloseTime: w.close,
		Open: w.o, High: w.h, Low: w.l, Close: w.c, Volume: w.v, QuoteVolume: w.q, Trades: w.n,
		Taker: w.tk, TakerBuyVolume: w.tbv, TakerBuyQuoteVolume: w.tbq,
		FirstTradeID: w.fidS, LastTradeID: w.lidS}
}

// idStrings makes the trade id strings of candles. Short ids are carved
// out of shared blocks of idStringsBlock bytes instead of allocated one by
// one: the live scan (Active) makes a new last trade id for nearly every
// key it visits. A string handed out is never written again (a block is
// only appended to, and replaced when full), so a candle kept by a
// publisher stays valid; it keeps its block (at most idStringsBlock bytes)
// alive with it.
type idStrings struct{ blk []byte }

const idStringsBlock = 64

// of returns b as a string.
func (s *idStrings) of(b []byte) string {
	switch {
	case len(b) == 0:
		return ""
	case len(b) > idStringsBlock/4:
		return string(b)
	}
	if cap(s.blk)-len(s.blk) < len(b) {
		s.blk = make([]byte, 0, idStringsBlock)
	}
	n := len(s.blk)
	s.blk = append(s.blk, b...)
	return unsafe.String(&s.blk[n], len(b))
}

func (a *Aggregator) newWindow(open, close int64) *window {
	var w *window
	if n := len(a.winPool); n > 0 {
		w = a.winPool[n-1]
		a.winPool[n-1] = nil
		a.winPool = a.winPool[:n-1]
	} else {
		w = new(window)
		w.lid = w.lidBuf[:0]
	}
	w.open, w.close = open, close
	return w
}

// duePending returns the close time that makes k emit next (ok false:
// none), not counting the expiry of its kept windows.
func (a *Aggregator) duePending(k *keyState) (p int64, ok bool) {
	switch {
	case k.quiet:
		p = k.quietNext
		if len(k.wins) > 0 {
			p = min(p, k.wins[0].close)
		}
	case a.gapFill && k.started:
		p = k.nextClose
	case len(k.wins) > 0:
		p = k.wins[0].close
	default:
		return 0, false
	}
	return p, true
}

// schedule puts k in the heap at its next pending close, or when its
// oldest kept window passes the revision horizon if that comes first.
func (a *Aggregator) schedule(k *keyState) {
	p, ok := a.duePending(k)
	if len(k.kept) > 0 {
		if e := k.kept[0].close + a.horizon; !ok || e < p {
			p, ok = e, true
		}
	}
	if !ok {
		a.heap.remove(k)
		return
	}
	if k.hidx < 0 {
		k.pending = p
		a.heap.push(k)
	} else if p != k.pending {
		k.pending = p
		a.heap.fix(k.hidx)
	}
}

func (a *Aggregator) deleteKey(k *keyState) {
	a.heap.remove(k)
	a.keys.del(k.key)
	for _, w := range k.wins {
		a.recycle(k, w)
	}
	for _, e := range k.kept {
		if e.saved {
			k.dropped = append(k.dropped, droppedWin{open: e.open, kept: true})
		}
		if e.w != nil {
			a.recycle(k, e.w)
		}
	}
	k.wins, k.kept = nil, nil
	k.deleted = true
	a.touch(k)
}

func (a *Aggregator) touch(k *keyState) {
	if !k.dirty {
		k.dirty = true
		a.dirty = append(a.dirty, k)
	}
}

// find returns k's open window at open, or nil. Trades mostly hit the last one.
func (k *keyState) find(open int64) *window {
	for i := len(k.wins) - 1; i >= 0; i-- {
		if k.wins[i].open == open {
			return k.wins[i]
		}
		if k.wins[i].open < open {
			break
		}
	}
	return nil
}

// insert adds w keeping k.wins ordered by open time.
func (k *keyState) insert(w *window) {
	i := len(k.wins)
	for i > 0 && k.wins[i-1].open > w.open {
		i--
	}
	k.wins = append(k.wins, nil)
	copy(k.wins[i+1:], k.wins[i:])
	k.wins[i] = w
}
