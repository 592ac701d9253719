package processors

// Closing windows: the watermark passes a key's pending close, the key's
// next window (a candle, or a gap candle with gap fill) is emitted, and the
// key is rescheduled in the heap.

import "github.com/kandle/kandle/candle"

// advance emits, in (close time, key) order, every window with close ≤ W.
func (a *Aggregator) advance(out *Output) {
	wm := a.maxTS - a.lateness
	for len(a.heap) > 0 && a.heap[0].pending <= wm {
		a.emitOne(a.heap[0], out)
	}
}

// emitOne emits the next window of k (a candle or a gap) and reschedules k.
func (a *Aggregator) emitOne(k *keyState, out *Output) {
	if !a.gapFill {
		a.emitWindow(k, out)
		if len(k.wins) == 0 {
			a.deleteKey(k)
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
			if len(k.wins) == 0 {
				a.deleteKey(k) // a later trade starts afresh
				return
			}
			// A trade after the silence already arrived: its window starts a
			// new run, the silence stays unfilled. (A trade arriving later for
			// a window between them moves nextOpen back; see Process.)
			k.nextOpen, k.nextClose = k.wins[0].open, k.wins[0].close
			a.touch(k)
			a.schedule(k)
			return
		}
		c := k.prevClose
		out.Candles = append(out.Candles, candle.Candle{Symbol: k.key, Timeframe: a.tfName,
			OpenTime: k.nextOpen, CloseTime: k.nextClose, Open: c, High: c, Low: c, Close: c, Gap: true})
	}
	k.nextOpen = k.nextClose
	k.nextClose = a.tf.End(k.nextOpen)
	a.touch(k)
	a.schedule(k)
}

// emitWindow emits k's first open window as a final candle and drops it.
func (a *Aggregator) emitWindow(k *keyState, out *Output) {
	w := k.wins[0]
	out.Candles = append(out.Candles, a.candleOf(k, w))
	k.prevClose, k.prevTS, k.hasPrev = w.c, w.cTS, true
	k.lastN = int(min(w.n, 1<<12))
	copy(k.wins, k.wins[1:])
	k.wins[len(k.wins)-1] = nil
	k.wins = k.wins[:len(k.wins)-1]
	a.recycle(k, w)
	a.touch(k)
}

// recycle returns w to the pool, remembering its persisted id chunks so the
// next Changes call deletes them.
func (a *Aggregator) recycle(k *keyState, w *window) {
	if w.chunks > 0 {
		k.dropped = append(k.dropped, droppedWin{w.open, w.chunks})
	}
	w.reset()
	a.winPool = append(a.winPool, w)
}

func (a *Aggregator) candleOf(k *keyState, w *window) candle.Candle {
	return candle.Candle{Symbol: k.key, Timeframe: a.tfName, OpenTime: w.open, CloseTime: w.close,
		Open: w.o, High: w.h, Low: w.l, Close: w.c, Volume: w.v, QuoteVolume: w.q, Trades: w.n}
}

func (a *Aggregator) newWindow(open, close int64) *window {
	var w *window
	if n := len(a.winPool); n > 0 {
		w = a.winPool[n-1]
		a.winPool[n-1] = nil
		a.winPool = a.winPool[:n-1]
	} else {
		w = new(window)
	}
	w.open, w.close = open, close
	return w
}

// schedule puts k in the heap at its next pending close.
func (a *Aggregator) schedule(k *keyState) {
	var p int64
	switch {
	case a.gapFill && k.started:
		p = k.nextClose
	case len(k.wins) > 0:
		p = k.wins[0].close
	default:
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
	k.wins = nil
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
