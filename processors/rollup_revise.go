package processors

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
)

// rollRev flags a rollup key entry that goes on, after the open candle,
// with the key's kept windows (RollupConfig.ReviseWithin > 0): its clock,
// the open time before which its windows are unknown, a quiet byte, then
// each kept window (open, length, rev, flags 1 emitted and 2 base has
// trades, the close of the last folded sub-candle, the base candle, the
// kept sub-candles). It is only read: such an entry is rewritten in the
// layout of rollRevOwn (see rollup_revise_state.go) the first time it is
// saved. Entries with neither flag (written with no horizon) restore as a
// key whose windows before its open one are unknown.
const rollRev = 16

// rollKept is one key's kept windows, with a revision horizon.
type rollKept struct {
	// clock is the key's own clock: the close of its latest sub-candle, or
	// the Until of its latest QuietMark when later.
	clock int64
	// keptFrom: windows opening before it are unknown (the state was
	// written without a horizon); math.MinInt64 when all are known.
	keptFrom int64
	quiet    bool // a QuietMark came after the key's last sub-candle
	listed   bool // in Rollup.quietKeys
	// wins are the kept windows in time order: the open one (last, when
	// the key has one) and the emitted ones closing after clock − horizon.
	wins []*rollWin
	// own: restored from a key entry flagged rollRevOwn, whose windows
	// come in entries of their own.
	own bool
	// ops are the window and sub-candle entries to write or delete at the
	// next Changes, in order.
	ops []rollOp
}

// rollWin is one kept higher window. Its candle is base merged with subs,
// in order: base holds the sub-candles folded away because they closed at
// or before the key's clock − horizon (no revision of them can come), subs
// the latest revision of each later one.
type rollWin struct {
	open, close int64
	rev         uint32 // the rev of its last emission
	emitted     bool
	base        candle.Candle
	baseNG      bool  // base holds a sub-candle with trades
	folded      int64 // close of the last sub-candle folded into base (open when none)
	subs        []candle.Candle
	dirty       bool // its entry is to be written (an op is queued)
	stub        bool // restored from sub-candle entries only, so far
}

// openWin starts the kept window of k's new open candle.
func (r *Rollup) openWin(k *rollKey) {
	w := &rollWin{open: k.acc.OpenTime, close: k.acc.CloseTime, base: k.acc, folded: k.acc.OpenTime}
	k.rv.wins = append(k.rv.wins, w)
	r.saveWin(k, w)
}

// find returns the kept window opening at open and its index, or nil and
// where it would go.
func (kp *rollKept) find(open int64) (*rollWin, int) {
	i, ok := slices.BinarySearchFunc(kp.wins, open, func(w *rollWin, t int64) int { return cmpInt(w.open, t) })
	if ok {
		return kp.wins[i], i
	}
	return nil, i
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// value is w's candle before FlattenGap, and whether a sub-candle of it had
// trades: base merged with every kept sub-candle in order.
func (w *rollWin) value() (candle.Candle, bool) {
	acc, ng := w.base, w.baseNG
	for i := range w.subs {
		ng = candle.Merge(&acc, &w.subs[i], ng)
	}
	return acc, ng
}

// processRev takes sub-candle c of key k with a revision horizon (see
// Rollup).
func (r *Rollup) processRev(rec Record, k *rollKey, c *candle.Candle, out *Output) {
	kp := k.rv
	if kp == nil {
		if c.Rev > 0 && r.pclock != math.MinInt64 && c.CloseTime <= r.pclock-r.h {
			// A revision for a key the rollup does not hold: a quiet key
			// freed once the partition's clock passed it by the horizon.
			delete(r.keys, k.key)
			reject(out, rec, Rejection{Reason: ReasonBeyondHorizon, Key: c.Symbol,
				Detail: fmt.Sprintf("revision %d of the sub-candle closing %s: the partition's sub-candles closing at or before %s (its latest, %s, minus the revision horizon %s) are final",
					c.Rev, fmtMS(c.CloseTime), fmtMS(r.pclock-r.h), fmtMS(r.pclock), time.Duration(r.h)*time.Millisecond)})
			return
		}
		kp = &rollKept{clock: math.MinInt64, keptFrom: math.MinInt64}
		k.rv = kp
	}
	open := r.tf.Start(c.OpenTime)
	if !k.hasLast || c.CloseTime > k.lastSub { // the key's next sub-candle in time
		kp.quiet = false
		r.advance(k, c.CloseTime)
		if w, _ := kp.find(open); w != nil && w.emitted {
			// A window a QuietMark closed gets a sub-candle after all (a
			// late trade created it): a revision of that window.
			k.lastSub = c.CloseTime
			r.revise(k, w, c, out)
			return
		}
		r.take(k, c, out)
		return
	}
	cut := kp.clock - r.h
	w, _ := kp.find(open)
	if c.CloseTime <= cut || open < kp.keptFrom || w != nil && c.CloseTime <= w.folded {
		if c.Rev == 0 {
			rejectReplay(out, rec, k, c)
			return
		}
		why := fmt.Sprintf("the key's sub-candles closing at or before %s (its latest, %s, minus the revision horizon %s) are final",
			fmtMS(cut), fmtMS(kp.clock), time.Duration(r.h)*time.Millisecond)
		if c.CloseTime > cut {
			why = fmt.Sprintf("its window opening %s is from before this rollup kept sub-candles (its state was written without a revision horizon)", fmtMS(open))
		}
		reject(out, rec, Rejection{Reason: ReasonBeyondHorizon, Key: c.Symbol,
			Detail: fmt.Sprintf("revision %d of the sub-candle closing %s: %s", c.Rev, fmtMS(c.CloseTime), why)})
		return
	}
	if w != nil {
		if i, ok := findSub(w, c.OpenTime); ok && c.Rev <= w.subs[i].Rev {
			reject(out, rec, Rejection{Reason: ReasonDuplicate, Key: c.Symbol,
				Detail: fmt.Sprintf("sub-candle closing %s has rev %d, not above the one taken (rev %d)", fmtMS(c.CloseTime), c.Rev, w.subs[i].Rev)})
			return
		}
	}
	r.revise(k, w, c, out)
}

func findSub(w *rollWin, open int64) (int, bool) {
	return slices.BinarySearchFunc(w.subs, open, func(s candle.Candle, t int64) int { return cmpInt(s.OpenTime, t) })
}

// revise puts c, a newer revision of a kept sub-candle or a sub-candle
// new to a closed window, into window w (nil: a window that had no
// sub-candle, which a late trade created) and recomputes it from its
// sub-candles. An open window is updated; a closed one is emitted again,
// with rev one higher, when a value changed; a window that had no candle
// is emitted with rev 0.
func (r *Rollup) revise(k *rollKey, w *rollWin, c *candle.Candle, out *Output) {
	kp := k.rv
	r.touch(k)
	if w == nil {
		open := r.tf.Start(c.OpenTime)
		acc := candle.NewWindow(k.key, r.to, open, r.tf.End(open))
		w = &rollWin{open: acc.OpenTime, close: acc.CloseTime, base: acc, folded: acc.OpenTime, emitted: true}
		_, at := kp.find(w.open)
		kp.wins = slices.Insert(kp.wins, at, w)
		w.subs = append(w.subs, *c)
		r.saveWin(k, w)
		r.saveSub(k, w, c.OpenTime)
		v, ng := w.value()
		candle.FlattenGap(&v, ng)
		out.Candles = append(out.Candles, v)
		return
	}
	before, ngBefore := w.value()
	if i, ok := findSub(w, c.OpenTime); ok {
		w.subs[i] = *c
	} else {
		w.subs = slices.Insert(w.subs, i, *c)
	}
	r.saveSub(k, w, c.OpenTime)
	after, ng := w.value()
	if k.open && w.open == k.acc.OpenTime && !w.emitted {
		k.acc, k.hasNonGap = after, ng
		r.activate(k)
		return
	}
	candle.FlattenGap(&before, ngBefore)
	candle.FlattenGap(&after, ng)
	if after.Equal(&before) {
		return
	}
	w.rev++
	r.saveWin(k, w)
	after.Rev = w.rev
	out.Candles = append(out.Candles, after)
}

// rollFoldBatch is how many sub-candles past the horizon a kept window
// holds before they are folded into its base: folding rewrites the window's
// entry, so it is done in batches (a window usually leaves the horizon
// before), and the candle is the same either way (the sub-candles are
// merged in the same order; those past the horizon are refused before).
const rollFoldBatch = 8

// advance moves k's clock to t when later: windows that closed at or before
// the new clock − horizon are dropped, and the sub-candles that did are
// folded into their window's base, rollFoldBatch or more at a time; the
// partition's clock follows.
func (r *Rollup) advance(k *rollKey, t int64) {
	kp := k.rv
	if t <= kp.clock {
		return
	}
	kp.clock = t
	cut := t - r.h
	drop := 0
	for drop < len(kp.wins) && kp.wins[drop].emitted && kp.wins[drop].close <= cut {
		drop++
	}
	if drop > 0 {
		for _, w := range kp.wins[:drop] {
			r.dropWin(k, w)
		}
		clear(kp.wins[:drop])
		kp.wins = kp.wins[drop:]
	}
	for _, w := range kp.wins {
		if w.open >= cut {
			break
		}
		n := 0
		for n < len(w.subs) && w.subs[n].CloseTime <= cut {
			n++
		}
		if n < rollFoldBatch {
			continue
		}
		for i := range n {
			w.baseNG = candle.Merge(&w.base, &w.subs[i], w.baseNG)
			w.folded = w.subs[i].CloseTime
			r.dropSub(k, w, w.subs[i].OpenTime)
		}
		r.saveWin(k, w)
		w.subs = slices.Delete(w.subs, 0, n)
	}
	if t > r.pclock {
		r.pclock = t
		r.freeQuiet()
	}
}

// quietRev takes a QuietMark of k with a horizon: k's clock moves to until
// and k stays, quiet, until the partition's clock has passed its own by the
// horizon (a late trade may still revise its windows until then).
func (r *Rollup) quietRev(k *rollKey, until int64) {
	kp := k.rv
	if kp == nil { // not possible: every key with a horizon has kept windows
		kp = &rollKept{clock: math.MinInt64, keptFrom: math.MinInt64}
		k.rv = kp
	}
	r.touch(k)
	kp.quiet = true
	r.advance(k, until)
	if r.freeable(k) {
		r.free(k)
		return
	}
	if !kp.listed {
		kp.listed = true
		r.quietKeys = append(r.quietKeys, k)
	}
}

// freeable reports whether k is quiet, has no open window, and the
// partition's clock is at least the horizon past k's own clock: no
// revision of its windows can come any more.
func (r *Rollup) freeable(k *rollKey) bool {
	return k.rv.quiet && !k.open && k.rv.clock <= r.pclock-r.h
}

// freeQuiet frees the quiet keys the partition's clock has passed.
func (r *Rollup) freeQuiet() {
	keep := r.quietKeys[:0]
	for _, k := range r.quietKeys {
		switch {
		case r.keys[k.key] != k || !k.rv.quiet:
			k.rv.listed = false
		case r.freeable(k):
			k.rv.listed = false
			r.free(k)
		default:
			keep = append(keep, k)
		}
	}
	clear(r.quietKeys[len(keep):])
	r.quietKeys = keep
}

// restoreRev sets up the kept windows of k, restored from an entry whose
// kept windows are kp (nil: the entry was written without a horizon, so
// only its open window is known, with every sub-candle so far folded).
// Windows read from the key entry (kp nil or flagged rollRev) are saved in
// entries of their own at the next Changes; those of a key entry flagged
// rollRevOwn come in their own entries (resolve).
func (r *Rollup) restoreRev(k *rollKey, kp *rollKept) {
	k.rv = kp
	if kp == nil {
		kp = &rollKept{clock: k.lastSub, keptFrom: k.lastSub}
		if !k.hasLast {
			kp.clock, kp.keptFrom = math.MinInt64, math.MinInt64
		}
		k.rv = kp
		if k.open {
			kp.keptFrom = k.acc.OpenTime
			kp.wins = []*rollWin{{open: k.acc.OpenTime, close: k.acc.CloseTime, base: k.acc, baseNG: k.hasNonGap, folded: k.lastSub}}
		}
	}
	if !kp.own {
		for _, w := range kp.wins {
			r.saveWin(k, w)
			for i := range w.subs {
				r.saveSub(k, w, w.subs[i].OpenTime)
			}
		}
	}
	if kp.clock > r.pclock {
		r.pclock = kp.clock
	}
	if kp.quiet {
		kp.listed = true
		r.quietKeys = append(r.quietKeys, k)
	}
}

// readKeyLayout reads the kept windows of a key entry flagged rollRev (the
// layout before they had entries of their own), for key name. They are read
// even by a rollup without a horizon (which then drops them).
func (r *Rollup) readKeyLayout(rd *reader, name string) *rollKept {
	kp := &rollKept{clock: rd.varint(), keptFrom: rd.varint()}
	q := rd.bytes(1)
	if q == nil {
		return nil
	}
	kp.quiet = q[0]&1 != 0
	n := rd.uvarint()
	for i := uint64(0); i < n && rd.err == nil; i++ {
		w := &rollWin{open: rd.varint()}
		w.close = w.open + rd.varint()
		w.rev = uint32(rd.uvarint())
		flags := rd.bytes(1)
		if flags == nil {
			break
		}
		w.emitted, w.baseNG = flags[0]&1 != 0, flags[0]&2 != 0
		w.folded = w.open + rd.varint()
		w.base = r.readRollCandle(rd, name, r.to, w.open)
		subs := rd.uvarint()
		for j := uint64(0); j < subs && rd.err == nil; j++ {
			w.subs = append(w.subs, r.readRollCandle(rd, name, r.from, w.open))
		}
		kp.wins = append(kp.wins, w)
	}
	return kp
}

// appendRollCandle writes a kept sub-candle or a window's base; times are
// relative to rel, the window's open time.
func appendRollCandle(b []byte, c *candle.Candle, rel int64) []byte {
	b = binary.AppendVarint(b, c.OpenTime-rel)
	b = binary.AppendVarint(b, c.CloseTime-c.OpenTime)
	b = append(b, boolBits(c.Gap, false))
	b = binary.AppendUvarint(b, uint64(c.Rev))
	for _, d := range [...]decimal.Decimal{c.Open, c.High, c.Low, c.Close} {
		b = appendDec(b, d)
	}
	b = c.Volume.AppendBinary(b)
	b = c.QuoteVolume.AppendBinary(b)
	b = binary.AppendUvarint(b, uint64(c.Trades))
	return appendTrade(b, c.Taker, c.TakerBuyVolume, c.TakerBuyQuoteVolume, []byte(c.FirstTradeID), []byte(c.LastTradeID))
}

func (r *Rollup) readRollCandle(rd *reader, name, tf string, rel int64) candle.Candle {
	c := candle.Candle{Symbol: name, Timeframe: tf}
	c.OpenTime = rel + rd.varint()
	c.CloseTime = c.OpenTime + rd.varint()
	if f := rd.bytes(1); f != nil {
		c.Gap = f[0]&1 != 0
	}
	c.Rev = uint32(rd.uvarint())
	c.Open, c.High, c.Low, c.Close = rd.dec(), rd.dec(), rd.dec(), rd.dec()
	c.Volume, c.QuoteVolume = rd.sum(stateVersion), rd.sum(stateVersion)
	c.Trades = int64(rd.uvarint())
	var fid, lid []byte
	c.Taker, c.TakerBuyVolume, c.TakerBuyQuoteVolume, fid, lid = rd.trade(nil, nil)
	c.FirstTradeID, c.LastTradeID = string(fid), string(lid)
	return c
}
