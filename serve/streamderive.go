package serve

import (
	"cmp"
	"context"
	"slices"

	"github.com/kandle/kandle/candle"
)

// The stream serves a derived timeframe (see timeframe) from the updates
// of the stored timeframe it is built from: the process subscribes to that
// stored series once, and each derived series keeps, for its last
// markWindows windows, the finals received so far folded into one candle
// (in time order, without holes) and the newest state of each later
// sub-candle. Every update of a sub-candle is combined with the rest of its
// window by the query side's rule (combine), so the derived bar the stream
// sends equals the candle /v1/candles builds from the same stored
// candles. It is final once the finals of the whole window are folded in.
//
// A derived series starts silent: its first subscription reads the stored
// sub-candles of the newest window and of those it holds (as the query
// side reads them) and only then sends, so a window already under way is
// complete and a final is never sent without the sub-candles before it. Afterwards the sub-candles come
// from the stream, which delivers every window of a key once it has
// traded (gap candles included), a window's final possibly after the next
// window's first update. A window whose first sub-candles the stream never
// delivered (a key that starts trading, or trades again after max_idle,
// inside it) is sent, but not as final, and keeps its sub-candles until it
// leaves the last markWindows; the API has its final candle.

// derivedSeries is the state of one derived series.
type derivedSeries struct {
	tf     candle.Timeframe
	seeded bool             // the stored sub-candles were read: updates may go out
	wins   []*derivedWindow // oldest first, at most markWindows
}

// derivedWindow is one window of a derived series.
type derivedWindow struct {
	tf     candle.Timeframe
	open   int64
	done   *candle.Candle  // the finals folded so far, as one candle of the window
	folded []candle.Candle // those finals, in order (a revision of one rebuilds done)
	doneTo int64           // close time of the last final folded in (open: none)
	tail   []Update        // later sub-candles by open time, the newest state of each
}

// add takes an update of a sub-candle and returns the derived window's
// update, or false when it changes nothing (an update older than what the
// window holds, or of a window older than every one kept) or the series
// is not seeded yet.
func (d *derivedSeries) add(u Update) (Update, bool) {
	w := d.window(d.tf.Start(u.Candle.OpenTime))
	if w == nil || !w.add(u) || !d.seeded {
		return Update{}, false
	}
	return w.update(), true
}

// window returns the window opening at o, new if need be; nil when o is
// older than every window kept.
func (d *derivedSeries) window(o int64) *derivedWindow {
	i, found := slices.BinarySearchFunc(d.wins, o, func(w *derivedWindow, o int64) int { return cmp.Compare(w.open, o) })
	if found {
		return d.wins[i]
	}
	if i < len(d.wins) && d.seeded {
		// Older than the newest window held and not held: its first
		// sub-candles may have gone by (it left the last markWindows), so
		// what came after them would make an incomplete bar.
		return nil
	}
	if i == 0 && len(d.wins) >= markWindows {
		return nil
	}
	w := &derivedWindow{tf: d.tf, open: o, doneTo: o}
	d.wins = slices.Insert(d.wins, i, w)
	if n := len(d.wins) - markWindows; n > 0 {
		d.wins = slices.Delete(d.wins, 0, n)
	}
	return w
}

// add records u unless the window already holds as new a state of its
// sub-candle, then folds the finals at the head of the tail into done.
func (w *derivedWindow) add(u Update) bool {
	o := u.Candle.OpenTime
	if o < w.doneTo {
		// Its final is folded in already: only a higher revision of it
		// changes the window, rebuilt from the finals with it.
		j, found := slices.BinarySearchFunc(w.folded, o, func(c candle.Candle, o int64) int { return cmp.Compare(c.OpenTime, o) })
		if !found || !revision(&u) || u.Candle.Rev <= w.folded[j].Rev {
			return false
		}
		w.folded[j] = u.Candle
		c := combine(w.folded, w.tf)[0]
		w.done = &c
		return true
	}
	i, found := slices.BinarySearchFunc(w.tail, o, func(x Update, o int64) int { return cmp.Compare(x.Candle.OpenTime, o) })
	if found {
		t := w.tail[i]
		if !newMark(&t).admits(u) || (t.Final == u.Final && t.Candle.Equal(&u.Candle)) {
			return false // older, or nothing new
		}
		w.tail[i] = u
	} else {
		w.tail = slices.Insert(w.tail, i, u)
	}
	w.foldFinals()
	return true
}

// foldFinals folds the finals that follow done without a hole into it.
func (w *derivedWindow) foldFinals() {
	n := 0
	for n < len(w.tail) && w.tail[n].Final && w.tail[n].Candle.OpenTime == w.doneTo {
		w.doneTo = w.tail[n].Candle.CloseTime
		n++
	}
	if n > 0 {
		c := w.fold(w.tail[:n])
		w.done = &c
		for _, u := range w.tail[:n] {
			w.folded = append(w.folded, u.Candle)
		}
		w.tail = slices.Delete(w.tail, 0, n)
	}
}

// fold combines done with subs (sub-candles after it, in order) into one
// candle of the window. done counts as one sub-candle: its open, high and
// low come from its sub-candles with trades (none when it is a gap), its
// close is the last one's, its sums theirs, so combining it again gives
// what combining all of its sub-candles would.
func (w *derivedWindow) fold(subs []Update) candle.Candle {
	cs := make([]candle.Candle, 0, len(subs)+1)
	if w.done != nil {
		cs = append(cs, *w.done)
	}
	for _, u := range subs {
		cs = append(cs, u.Candle)
	}
	return combine(cs, w.tf)[0]
}

// update is the window's candle: final once every sub-candle up to the
// window's end is folded in.
func (w *derivedWindow) update() Update {
	c := w.fold(w.tail)
	return Update{Candle: c, Final: len(w.tail) == 0 && w.doneTo == c.CloseTime}
}

// derivedSnapshot gives c the newest window of the derived series k. The
// first time, it reads the stored sub-candles of the newest stored window
// and of every window the series holds (the query side's reads: history
// stores and the open window) into the series' state, which may then
// send: every window it holds goes to its clients. A window the stream
// opened while the stores were read is read too (up to three rounds);
// one still unread then is dropped, as it could lack sub-candles.
func (s *Server) derivedSnapshot(ctx context.Context, c *client, k key, tf, base candle.Timeframe) error {
	h := s.hub
	var subs []candle.Candle
	var err error
	openFrom, read := int64(maxTime+1), int64(maxTime+1) // read: where subs start
	for round := 0; ; round++ {
		h.mu.Lock()
		ch := h.subs[k]
		if ch == nil || ch.d == nil {
			h.mu.Unlock()
			return err // unsubscribed meanwhile
		}
		d := ch.d
		if d.seeded {
			// Read once: later clients get what the stream built since.
			if len(d.wins) > 0 {
				c.push(k, newFrame(d.wins[len(d.wins)-1].update()))
			}
			h.mu.Unlock()
			return err
		}
		lo := read
		if len(d.wins) > 0 {
			lo = min(lo, d.wins[0].open)
		}
		if err == nil && (round == 0 || (lo < read && round < 3)) {
			h.mu.Unlock()
			if round == 0 {
				var newest []candle.Candle
				newest, _, _, err = s.candles(ctx, query{symbol: k.symbol, tf: base, from: 0, to: maxTime + 1, limit: 1, desc: true})
				if len(newest) > 0 {
					lo = min(lo, tf.Start(newest[0].OpenTime))
				}
			}
			if err == nil && lo <= maxTime {
				subs, _, openFrom, err = s.candles(ctx, query{symbol: k.symbol, tf: base, from: lo, to: maxTime + 1, limit: maxDerivedReads})
				read = lo
			}
			continue
		}
		d.wins = slices.DeleteFunc(d.wins, func(w *derivedWindow) bool { return w.open < read })
		d.seed(subs, openFrom)
		for _, w := range d.wins {
			f := newFrame(w.update())
			for cl := range ch.clients {
				cl.push(k, f)
			}
		}
		h.mu.Unlock()
		return err
	}
}

// seed adds the stored sub-candles subs (in time order, from a window's
// start; those opening at or after openFrom are not final) and lets the
// series send.
func (d *derivedSeries) seed(subs []candle.Candle, openFrom int64) {
	for i, sub := range subs {
		w := d.window(d.tf.Start(sub.OpenTime))
		if w == nil {
			continue
		}
		if (i == 0 || d.tf.Start(subs[i-1].OpenTime) != w.open) && w.done == nil && w.doneTo < sub.OpenTime &&
			(len(w.tail) == 0 || w.tail[0].Candle.OpenTime >= sub.OpenTime) {
			// The stores hold nothing before it in its window: the key
			// started trading inside the window.
			w.doneTo = sub.OpenTime
			w.foldFinals()
		}
		w.add(Update{Candle: sub, Final: sub.OpenTime < openFrom})
	}
	d.seeded = true
}
