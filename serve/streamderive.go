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
// (in time order) and the newest state of each later sub-candle. Every
// update of a sub-candle is combined with the rest of its window by the
// query side's rule (combine), so the derived bar the stream sends equals
// the candle /v1/candles builds from the same stored candles; it is final
// once the final of its window's last sub-candle is folded in.
//
// The first subscription of a client reads the stored sub-candles of the
// newest window (as the query side would), so a window already under way
// is complete; afterwards the sub-candles come from the stream, which
// delivers every window of a key once it traded (gap candles included).

// derivedSeries is the state of one derived series.
type derivedSeries struct {
	tf   candle.Timeframe
	wins []*derivedWindow // oldest first, at most markWindows
}

// derivedWindow is one window of a derived series.
type derivedWindow struct {
	tf     candle.Timeframe
	open   int64
	done   *candle.Candle // the finals folded so far, as one candle of the window
	doneTo int64          // close time of the last final folded in
	tail   []Update       // later sub-candles by open time, the newest state of each
}

// add takes an update of a sub-candle and returns the derived window's
// update, or false when it changes nothing (an update older than what the
// window holds, or of a window older than every one kept).
func (d *derivedSeries) add(u Update) (Update, bool) {
	o := d.tf.Start(u.Candle.OpenTime)
	i, found := slices.BinarySearchFunc(d.wins, o, func(w *derivedWindow, o int64) int { return cmp.Compare(w.open, o) })
	if !found {
		if i == 0 && len(d.wins) >= markWindows {
			return Update{}, false
		}
		d.wins = slices.Insert(d.wins, i, &derivedWindow{tf: d.tf, open: o, doneTo: o})
		if n := len(d.wins) - markWindows; n > 0 {
			d.wins = slices.Delete(d.wins, 0, n)
			i -= n
		}
	}
	w := d.wins[i]
	if !w.add(u) {
		return Update{}, false
	}
	return w.update(), true
}

// newest returns the update of the newest window held.
func (d *derivedSeries) newest() (Update, bool) {
	if len(d.wins) == 0 {
		return Update{}, false
	}
	return d.wins[len(d.wins)-1].update(), true
}

// add records u unless the window already holds as new a state of its
// sub-candle, then folds the finals at the head of the tail into done.
func (w *derivedWindow) add(u Update) bool {
	o := u.Candle.OpenTime
	if o < w.doneTo {
		return false // its final is folded in already
	}
	i, found := slices.BinarySearchFunc(w.tail, o, func(x Update, o int64) int { return cmp.Compare(x.Candle.OpenTime, o) })
	if found {
		t := w.tail[i]
		if !(mark{o, t.Candle.Trades, t.Final}).admits(u) || (t.Final == u.Final && t.Candle.Equal(&u.Candle)) {
			return false // older, or nothing new
		}
		w.tail[i] = u
	} else {
		w.tail = slices.Insert(w.tail, i, u)
	}
	for len(w.tail) > 0 && w.tail[0].Final {
		c := w.fold(w.tail[:1])
		w.done, w.doneTo = &c, w.tail[0].Candle.CloseTime
		w.tail = slices.Delete(w.tail, 0, 1)
	}
	return true
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

// update is the window's candle: final once the final of its last
// sub-candle is folded in.
func (w *derivedWindow) update() Update {
	c := w.fold(w.tail)
	return Update{Candle: c, Final: len(w.tail) == 0 && w.doneTo == c.CloseTime}
}

// derivedSnapshot gives c the newest window of the derived series k: it
// reads that window's stored sub-candles (the query side's reads: history
// stores and the open window), adds them to the series' state and pushes
// the result.
func (s *Server) derivedSnapshot(ctx context.Context, c *client, k key, tf, base candle.Timeframe) error {
	newest, _, _, err := s.candles(ctx, query{symbol: k.symbol, tf: base, from: 0, to: maxTime + 1, limit: 1, desc: true})
	if err != nil || len(newest) == 0 {
		return err
	}
	o := tf.Start(newest[0].OpenTime)
	subs, _, openFrom, err := s.candles(ctx, query{symbol: k.symbol, tf: base, from: o, to: tf.End(o), limit: maxDerivedReads})
	if err != nil {
		return err
	}
	h := s.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := h.subs[k]
	if ch == nil || ch.d == nil {
		return nil // unsubscribed meanwhile
	}
	for _, sub := range subs {
		h.send(ch, Update{Candle: sub, Final: sub.OpenTime < openFrom})
	}
	if u, ok := ch.d.newest(); ok {
		c.push(k, u, nil)
	}
	return nil
}
