package processors

// Revisions (CandleConfig.ReviseWithin = H > 0): the rules are in the
// package documentation. How they are kept:
//
// Every final window of a key inside the horizon is a keptWin: the
// revision and close of the candle that went out for it, whether it was a
// gap candle, and its trades (price, qty, exact quote, event time, id,
// side, in arrival order) when it has any. Open windows keep their trades
// too, so a window is complete when it closes. The key's base is the close
// and last trade time of the last window with trades that left the
// horizon: recomputation starts there.
//
// State: the key entry carries the base, the first window revisable and
// its open windows' trade-log chunk counts (a section after the windows,
// flagged flagRevise); each kept window has an entry "r"+len+key+open
// (its revision, flags, the close of its candle, its chunk count), written
// when it changes, deleted when it leaves the horizon; each window's trades
// are an append-only log of records (trade, cancel, correct) in chunk
// entries "t"+len+key+open+seq, one per Changes call that added to it.
// Restored kept windows and logs are put together at the first use after
// Restore (resolve). With a horizon the dedupe id chunks are not written:
// the ids are in the trade log.

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
)

// RevisionCounts is what a candles processor with a revision horizon did,
// for metrics: revisions emitted (candles with Rev > 0, and rev-0 candles
// of windows that had none, emitted by a revision), late trades counted
// into closed windows, cancels and corrections applied.
type RevisionCounts struct {
	Revisions, LateTrades, Cancels, Corrections uint64
}

// RevisionCounter is a processor that counts its revisions (the candles
// kind, with or without a horizon).
type RevisionCounter interface {
	// TakeRevisionCounts returns the counts since the last call and
	// starts them again from zero.
	TakeRevisionCounts() RevisionCounts
}

var _ RevisionCounter = (*Aggregator)(nil)

// TakeRevisionCounts returns the counts since the last call and resets them.
func (a *Aggregator) TakeRevisionCounts() RevisionCounts {
	c := a.counts
	a.counts = RevisionCounts{}
	return c
}

// keptTrade is one trade of a window, kept for recomputation.
type keptTrade struct {
	ts         int64
	price, qty decimal.Decimal
	quote      decimal.Sum
	id         string
	side       candle.Side
}

// keptWin is one final window of a key inside the revision horizon.
type keptWin struct {
	open, close int64
	rev         uint32
	emitted     bool            // a candle of it went out, with revision rev
	gap         bool            // that candle was a gap candle
	pend        bool            // its trades changed since: recompute it
	c           decimal.Decimal // the close of that candle
	w           *window         // its trades (nil: it never had any)
	dirty       bool            // in the key's ksave: its entry is written at the next Changes
	saved       bool            // its entry is stored
	span        idSpan          // without dedupe: the ids it may hold, for findTrade
}

// idSpan bounds the trade ids a kept window holds or cancelled, so that
// findTrade (without dedupe, which has no id sets) scans only the windows
// that may hold an id. It is worked out at the window's first look and
// widened by the late trades it takes after; it only ever grows, so it
// never rules out a window that holds the id (it is not stored: a
// restored window works it out again).
type idSpan struct {
	known  bool   // worked out
	num    bool   // every id is a canonical decimal number (numericID), in [lo, hi]
	lo, hi uint64 // lo > hi: no id
}

// widen makes s cover id.
func (s *idSpan) widen(id string) {
	if id == "" { // a take-back needs an id: never looked for
		return
	}
	n, ok := numericID(id)
	s.num = s.num && ok
	s.lo, s.hi = min(s.lo, n), max(s.hi, n)
}

// of works out s for window w.
func (s *idSpan) of(w *window) {
	*s = idSpan{known: true, num: true, lo: math.MaxUint64}
	for i := range w.trades {
		s.widen(w.trades[i].id)
	}
	for _, id := range w.gone {
		s.widen(id)
	}
}

// mayHold reports whether a window with span s may hold id (n, isNum its
// numericID).
func (s *idSpan) mayHold(n uint64, isNum bool) bool {
	return !s.num || (isNum && s.lo <= n && n <= s.hi)
}

// revState is a key's revision state (empty without a horizon).
type revState struct {
	kept      []keptWin // final windows inside the horizon, by open time
	baseHas   bool      // a window with trades left the horizon (or preceded it)
	baseClose decimal.Decimal
	baseTS    int64
	// revFloor: windows opening before it closed before the horizon was
	// turned on and are not revisable (0: none).
	revFloor int64
	revPend  bool      // in Aggregator.revKeys
	tdirty   []*window // windows whose trade log has records not yet saved
	ksave    []int64   // open times of the kept windows whose entries are to be written
}

// changed notes that k's kept window e is to be written at the next Changes.
func (k *keyState) changed(e *keptWin) {
	if !e.dirty {
		e.dirty = true
		k.ksave = append(k.ksave, e.open)
	}
}

// logged notes that a record is about to go into w's trade log.
func (k *keyState) logged(w *window) {
	if len(w.tlog) == 0 {
		k.tdirty = append(k.tdirty, w)
	}
}

// unlog forgets w's unsaved trade-log records (w is recycled).
func (k *keyState) unlog(w *window) {
	if len(w.tlog) > 0 {
		if i := slices.Index(k.tdirty, w); i >= 0 {
			k.tdirty = slices.Delete(k.tdirty, i, i+1)
		}
	}
}

// tchunk is a restored trade-log chunk waiting for resolve.
type tchunk struct {
	open int64
	seq  uint64
	data []byte
}

// Trade-log record kinds.
const (
	recTrade   = 0
	recCancel  = 1
	recCorrect = 2
)

// entryTrades is the kind of the trade-log chunk entries, entryKept of
// the kept window entries.
const (
	entryTrades = 't'
	entryKept   = 'r'
)

// flagRevise marks a key entry with a revision section.
const flagRevise = 32

// partRev flags a partition entry that stores reviseFrom (after the
// watermark; math.MinInt64: none).
const partRev = 8

// keep appends t to k's window w's trades and trade log.
func (k *keyState) keep(w *window, t *candle.Trade, quote decimal.Sum) {
	k.logged(w)
	w.trades = append(w.trades, keptTrade{ts: t.TS, price: t.Price, qty: t.Qty, quote: quote,
		id: strings.Clone(t.ID), side: t.Side})
	w.tlog = appendTradeRec(w.tlog, w.open, &w.trades[len(w.trades)-1])
}

func appendTradeRec(b []byte, open int64, tr *keptTrade) []byte {
	b = append(b, recTrade)
	b = binary.AppendVarint(b, tr.ts-open)
	b = appendDec(b, tr.price)
	b = appendDec(b, tr.qty)
	b = tr.quote.AppendBinary(b)
	b = append(b, byte(tr.side))
	b = binary.AppendUvarint(b, uint64(len(tr.id)))
	return append(b, tr.id...)
}

// rebuild recomputes w's candle from its trades.
func (w *window) rebuild() {
	w.o, w.h, w.l, w.c = decimal.Decimal{}, decimal.Decimal{}, decimal.Decimal{}, decimal.Decimal{}
	w.oTS, w.cTS, w.n = 0, 0, 0
	w.v, w.q, w.tbv, w.tbq = decimal.Sum{}, decimal.Sum{}, decimal.Sum{}, decimal.Sum{}
	w.fid, w.lid = w.fid[:0], w.lid[:0]
	w.fidNew, w.lidNew = true, true
	for i := range w.trades {
		tr := &w.trades[i]
		t := candle.Trade{TS: tr.ts, Price: tr.price, Qty: tr.qty, ID: tr.id, Side: tr.side}
		v, q := decimal.SumOf(tr.qty), tr.quote
		if w.n > 0 {
			v, q = w.v.AddDecimal(tr.qty), w.q.Add(tr.quote)
		}
		w.add(&t, v, q, tr.quote)
	}
}

// tradeIndex returns the index of the trade with id in w.trades, or -1.
func (w *window) tradeIndex(id string) int {
	for i := len(w.trades) - 1; i >= 0; i-- {
		if w.trades[i].id == id {
			return i
		}
	}
	return -1
}

// revisable reports whether a trade for k's window [open, close), which
// the watermark passed, may still revise it.
func (a *Aggregator) revisable(k *keyState, open, close int64) bool {
	return a.horizon > 0 && close > a.wm-a.horizon && (!a.hasRevFrom || close > a.reviseFrom) &&
		(k == nil || k.revFloor == 0 || open >= k.revFloor)
}

// beyond is the end of a late rejection's detail: how far beyond the
// revision horizon the window closed ("" without one).
func (a *Aggregator) beyond(close int64) string {
	if a.horizon == 0 {
		return ""
	}
	if lim := a.wm - a.horizon; close <= lim {
		return fmt.Sprintf(", %s before it: outside the revision horizon of %s (windows closing after %s)",
			time.Duration(a.wm-close)*time.Millisecond, time.Duration(a.horizon)*time.Millisecond, fmtMS(lim))
	}
	return ", before revisions were turned on"
}

// keptIndex returns the index of k's kept window at open, or where it goes.
func (k *keyState) keptIndex(open int64) (int, bool) {
	return slices.BinarySearchFunc(k.kept, open, func(e keptWin, o int64) int { return cmp.Compare(e.open, o) })
}

// windowAt returns k's open or kept window at open that holds trades, or nil.
func (k *keyState) windowAt(open int64) *window {
	if w := k.find(open); w != nil {
		return w
	}
	if i, ok := k.keptIndex(open); ok {
		return k.kept[i].w
	}
	return nil
}

// holds reports whether one of k's open or kept windows counted the id.
func (k *keyState) holds(id string, n uint64, isNum bool) bool {
	for _, w := range k.wins {
		if w.hasParsedID(id, n, isNum) {
			return true
		}
	}
	for i := range k.kept {
		if w := k.kept[i].w; w != nil && w.hasParsedID(id, n, isNum) {
			return true
		}
	}
	return false
}

// startKept makes k's current previous candle the base when k keeps no
// window yet.
func (k *keyState) startKept() {
	if len(k.kept) == 0 {
		k.baseHas, k.baseClose, k.baseTS = k.hasPrev, k.prevClose, k.prevTS
	}
}

// keepWindow keeps k's window w, just emitted final; false: w is not
// revisable (it opened before revisions were turned on for k).
func (a *Aggregator) keepWindow(k *keyState, w *window) bool {
	if k.revFloor != 0 && w.open < k.revFloor {
		return false
	}
	k.startKept()
	k.kept = append(k.kept, keptWin{open: w.open, close: w.close, emitted: true, c: w.c, w: w})
	k.changed(&k.kept[len(k.kept)-1])
	return true
}

// keepGap keeps the gap candle of k just emitted at open, flat at c.
func (a *Aggregator) keepGap(k *keyState, open, close int64, c decimal.Decimal) {
	if k.revFloor != 0 && open < k.revFloor {
		return
	}
	k.startKept()
	k.kept = append(k.kept, keptWin{open: open, close: close, emitted: true, gap: true, c: c})
	k.changed(&k.kept[len(k.kept)-1])
}

// gapCandle is k's gap candle of window [open, close), flat at c.
func (a *Aggregator) gapCandle(k *keyState, open, close int64, c decimal.Decimal) candle.Candle {
	return candle.Candle{Symbol: k.key, Timeframe: a.tfName, OpenTime: open, CloseTime: close,
		Open: c, High: c, Low: c, Close: c, Gap: true,
		Taker: a.side} // zero taker volumes when the series has a side; no trade ids
}

// trimKept drops k's kept windows that passed the horizon into the base,
// and frees k when nothing else holds it.
func (a *Aggregator) trimKept(k *keyState) {
	lim := a.wm - a.horizon
	n := 0
	for n < len(k.kept) && k.kept[n].close <= lim {
		if k.kept[n].saved {
			k.dropped = append(k.dropped, droppedWin{open: k.kept[n].open, kept: true})
		}
		if w := k.kept[n].w; w != nil {
			if w.n > 0 {
				k.baseHas, k.baseClose, k.baseTS = true, w.c, w.cTS
			}
			a.recycle(k, w)
		}
		n++
	}
	if n == 0 {
		return
	}
	rest := copy(k.kept, k.kept[n:])
	clear(k.kept[rest:])
	k.kept = k.kept[:rest]
	if a.horizon == 0 { // revisions were turned off: the entry goes back to its form without them
		k.baseHas, k.baseClose, k.baseTS, k.revFloor = false, decimal.Decimal{}, 0, 0
	}
	a.touch(k)
	if len(k.kept) == 0 && len(k.wins) == 0 && !k.quiet && !(a.gapFill && k.started) {
		a.deleteKey(k)
	}
}

// markPending marks k's kept window i changed.
func (a *Aggregator) markPending(k *keyState, i int) {
	k.kept[i].pend = true
	k.changed(&k.kept[i])
	if !k.revPend {
		k.revPend = true
		a.revKeys = append(a.revKeys, k)
	}
	a.touch(k)
}

// lateTrade counts the trade t, late for its final window [open, close)
// but inside the horizon, into k's kept window.
func (a *Aggregator) lateTrade(rec Record, k *keyState, t *candle.Trade, quote decimal.Sum, open, close int64, out *Output) {
	checkID := a.dedupe && t.ID != ""
	var idNum uint64
	var idIsNum bool
	if checkID {
		idNum, idIsNum = numericID(t.ID)
		if k != nil && !(idIsNum && k.newNum(idNum)) && k.holds(t.ID, idNum, idIsNum) {
			reject(out, rec, Rejection{Reason: ReasonDuplicate, Key: t.Key,
				Detail: fmt.Sprintf("trade id %q was already counted", t.ID)})
			return
		}
	}
	if k == nil {
		k = &keyState{key: t.Key, hidx: -1}
		a.keys.put(k.key, k)
	}
	k.admitted = true
	i, ok := k.keptIndex(open)
	if !ok {
		k.startKept()
		k.kept = slices.Insert(k.kept, i, keptWin{open: open, close: close})
	}
	e := &k.kept[i]
	if e.w == nil {
		e.w = a.newWindow(open, close)
		e.w.tk = a.side
	}
	w := e.w
	v, q := decimal.SumOf(t.Qty), quote
	if w.n > 0 {
		v, q = w.v.AddDecimal(t.Qty), w.q.Add(quote)
	}
	w.add(t, v, q, quote)
	k.keep(w, t, quote)
	if e.span.known {
		e.span.widen(t.ID)
	}
	if checkID {
		w.addParsedID(t.ID, idNum, idIsNum, false)
		k.noteID(idNum, idIsNum)
	}
	a.markPending(k, i)
	a.schedule(k)
	a.counts.LateTrades++
}

// takeBack applies a cancel or correction t of the trade t.ID. The id
// finds the trade: first in the window of the record's event time, then in
// the key's other windows inside the horizon (see findTrade), so a feed
// may stamp a take-back with its own time rather than the trade's.
func (a *Aggregator) takeBack(rec Record, k *keyState, t *candle.Trade, quote decimal.Sum, out *Output) {
	what := "cancel"
	if t.Action == candle.ActionCorrect {
		what = "correction"
	} else if t.Action != candle.ActionCancel {
		reject(out, rec, Rejection{Reason: ReasonInvalidAction, Key: t.Key, Detail: fmt.Sprintf("action %d is unknown", t.Action)})
		return
	}
	rej := func(r Reason, format string, args ...any) {
		reject(out, rec, Rejection{Reason: r, Key: t.Key, Detail: fmt.Sprintf(format, args...)})
	}
	if t.ID == "" {
		rej(ReasonUnknownTrade, "a %s names the trade it takes back by its id: the record has none", what)
		return
	}
	if a.horizon == 0 {
		rej(ReasonUnknownTrade, "a %s of trade %q needs the trades it names kept: the processor has no revision horizon (revise_within)", what, t.ID)
		return
	}
	open := a.tf.Start(t.TS)
	close := a.tf.End(open)
	final := a.hasMax && close <= a.wm
	var w *window
	ki, j, gone := -1, -1, false
	if k != nil {
		w, ki, j, gone = a.findTrade(k, t.ID, open)
	}
	switch {
	case w == nil && final && !a.revisable(k, open, close):
		rej(ReasonBeyondHorizon, "%s of trade %q: window %s of %s closed: watermark is %s%s; no window inside the horizon holds the trade",
			what, t.ID, fmtMS(open), a.tfName, fmtMS(a.wm), a.beyond(close))
		return
	case w == nil && !final && k != nil && k.revFloor != 0 && open < k.revFloor:
		rej(ReasonBeyondHorizon, "%s of trade %q: window %s of %s was open when revisions were turned on: its trades from before are not kept",
			what, t.ID, fmtMS(open), a.tfName)
		return
	case w == nil:
		rej(ReasonUnknownTrade, "%s of trade %q: no window of %s inside the revision horizon holds such a trade (the window of its time is %s)",
			what, t.ID, a.tfName, fmtMS(open))
		return
	case gone:
		rej(ReasonDuplicate, "trade %q was already cancelled", t.ID)
		return
	}
	tr := &w.trades[j]
	if t.Action == candle.ActionCorrect {
		if tr.price.Cmp(t.Price) == 0 && tr.qty.Cmp(t.Qty) == 0 {
			rej(ReasonDuplicate, "trade %q already has price %s and quantity %s", t.ID, t.Price, t.Qty)
			return
		}
		tr.price, tr.qty, tr.quote = t.Price, t.Qty, quote
		k.logged(w)
		w.tlog = append(w.tlog, recCorrect)
		w.tlog = binary.AppendUvarint(w.tlog, uint64(len(t.ID)))
		w.tlog = append(w.tlog, t.ID...)
		w.tlog = appendDec(w.tlog, t.Price)
		w.tlog = appendDec(w.tlog, t.Qty)
		w.tlog = quote.AppendBinary(w.tlog)
	} else {
		w.gone = append(w.gone, tr.id)
		w.trades = slices.Delete(w.trades, j, j+1)
		k.logged(w)
		w.tlog = append(w.tlog, recCancel)
		w.tlog = binary.AppendUvarint(w.tlog, uint64(len(t.ID)))
		w.tlog = append(w.tlog, t.ID...)
	}
	w.rebuild()
	if t.Action == candle.ActionCorrect {
		a.counts.Corrections++
	} else {
		a.counts.Cancels++
	}
	k.admitted = true
	a.touch(k)
	if ki >= 0 {
		a.markPending(k, ki)
		return
	}
	if !k.act {
		k.act = true
		a.active = append(a.active, k)
	}
	if w.n == 0 {
		a.dropOpen(k, w)
	}
}

// findTrade finds the trade id among k's windows a take-back may change:
// the open windows (but those open when revisions were turned on, whose
// earlier trades are not kept) and the kept windows inside the horizon.
// The window at open (that of the take-back's event time) is looked at
// first, then the others from the newest to the oldest; the first window
// that holds the id, or cancelled it, answers. w is nil when none does;
// else ki is w's index in k.kept (-1: an open window) and j the trade's
// index in w.trades, or gone is true: w cancelled it. With dedupe a
// window's id set rules it out at once; without, a closed window whose
// idSpan cannot hold the id is skipped, the others' kept trades are
// scanned. The answer depends on the state only, which a restore brings
// back whole (the spans only skip windows that cannot hold the id): a
// replay and a restarted run find the same window.
func (a *Aggregator) findTrade(k *keyState, id string, open int64) (w *window, ki, j int, gone bool) {
	n, isNum := numericID(id)
	look := func(x *window) bool {
		if x == nil || (k.revFloor != 0 && x.open < k.revFloor) || (a.dedupe && !x.hasParsedID(id, n, isNum)) {
			return false
		}
		if j = x.tradeIndex(id); j >= 0 {
			return true
		}
		gone = slices.Contains(x.gone, id)
		return gone
	}
	keptAt := func(i int) *window {
		e := &k.kept[i]
		if e.w == nil || !a.revisable(k, e.open, e.close) {
			return nil
		}
		if !a.dedupe {
			if !e.span.known {
				e.span.of(e.w)
			}
			if !e.span.mayHold(n, isNum) {
				return nil
			}
		}
		return e.w
	}
	// The window of the take-back's time.
	if x := k.find(open); look(x) {
		return x, -1, j, gone
	}
	own, ownKept := k.keptIndex(open)
	if ownKept && look(keptAt(own)) {
		return k.kept[own].w, own, j, gone
	}
	// The others, newest first: open windows open after every kept one.
	for i := len(k.wins) - 1; i >= 0; i-- {
		if x := k.wins[i]; x.open != open && look(x) {
			return x, -1, j, gone
		}
	}
	for i := len(k.kept) - 1; i >= 0; i-- {
		if k.kept[i].open != open && look(keptAt(i)) {
			return k.kept[i].w, i, j, gone
		}
	}
	return nil, -1, -1, false
}

// dropOpen drops k's open window w, left without trades by a cancel.
func (a *Aggregator) dropOpen(k *keyState, w *window) {
	i := slices.Index(k.wins, w)
	k.wins = slices.Delete(k.wins, i, i+1)
	a.recycle(k, w)
	if a.gapFill && k.started && !k.quiet && !k.hasPrev { // the run had not begun: it begins at the next window
		if len(k.wins) > 0 {
			k.nextOpen, k.nextClose = k.wins[0].open, k.wins[0].close
		} else {
			k.started = false
		}
	}
	if len(k.wins) == 0 && len(k.kept) == 0 && !k.quiet && !(a.gapFill && k.started) {
		a.deleteKey(k)
		return
	}
	a.schedule(k)
}

// revise emits the revisions pending since the last watermark move, key by
// key in key order.
func (a *Aggregator) revise(out *Output) {
	slices.SortFunc(a.revKeys, func(x, y *keyState) int { return strings.Compare(x.key, y.key) })
	for i, k := range a.revKeys {
		a.revKeys[i] = nil
		if k.revPend && !k.deleted {
			a.reviseKey(k, out)
		}
		k.revPend = false
	}
	a.revKeys = a.revKeys[:0]
}

// reviseKey recomputes k's final windows in window order from the base and
// emits those whose candle changed.
func (a *Aggregator) reviseKey(k *keyState, out *Output) {
	f := a.tf.Start(a.wm) // the first window not final
	hasPrev, prevClose, prevTS := k.baseHas, k.baseClose, k.baseTS
	i := 0
	x := f
	if len(k.kept) > 0 {
		x = k.kept[0].open
	}
	for x < f {
		xc := a.tf.End(x)
		at := i < len(k.kept) && k.kept[i].open == x
		has := at && k.kept[i].w != nil && k.kept[i].w.n > 0
		run := a.gapFill && hasPrev && (a.maxIdle == 0 || x < prevTS+a.maxIdle)
		switch {
		case has:
			e := &k.kept[i]
			if !e.emitted || e.pend || e.gap {
				a.emitRevision(k, e, a.candleOf(k, e.w), out)
			}
			hasPrev, prevClose, prevTS = true, e.w.c, e.w.cTS
		case run || (at && k.kept[i].emitted):
			if !at {
				k.kept = slices.Insert(k.kept, i, keptWin{open: x, close: xc})
			}
			e := &k.kept[i]
			c := prevClose
			if !hasPrev {
				c = e.c // a cancel emptied the key's first candle: it stays at its close
			}
			if !e.emitted || !e.gap || e.c.Cmp(c) != 0 {
				a.emitRevision(k, e, a.gapCandle(k, x, xc, c), out)
			}
			at = true
		}
		if at {
			if k.kept[i].pend {
				k.kept[i].pend = false
				k.changed(&k.kept[i])
			}
			i++
		}
		if a.gapFill && hasPrev && (a.maxIdle == 0 || xc < prevTS+a.maxIdle) {
			x = xc // a gap candle follows
		} else if i < len(k.kept) {
			x = k.kept[i].open // nothing until the next kept window
		} else {
			break
		}
	}
	for ; i < len(k.kept); i++ { // none left, but be safe
		if k.kept[i].pend {
			k.kept[i].pend = false
			k.changed(&k.kept[i])
		}
	}
	k.hasPrev, k.prevClose, k.prevTS = hasPrev, prevClose, prevTS
	if a.gapFill {
		runs := hasPrev && (a.maxIdle == 0 || f < prevTS+a.maxIdle)
		switch {
		case runs && (!k.started || k.quiet || k.nextOpen > f):
			// The run goes on (or again) through the watermark.
			k.started, k.quiet = true, false
			k.nextOpen, k.nextClose = f, a.tf.End(f)
		case !hasPrev && k.started && !k.quiet:
			// No candle left to fill gaps from: the run begins at the next window.
			if len(k.wins) > 0 {
				k.nextOpen, k.nextClose = k.wins[0].open, k.wins[0].close
			} else {
				k.started = false
			}
		}
	}
	a.touch(k)
	a.schedule(k)
}

// emitRevision emits c as the next revision of k's kept window e (rev 0
// when no candle of it went out yet).
func (a *Aggregator) emitRevision(k *keyState, e *keptWin, c candle.Candle, out *Output) {
	if e.emitted {
		e.rev++
	}
	e.emitted, e.gap, e.c = true, c.Gap, c.Close
	c.Rev = e.rev
	k.changed(e)
	out.Candles = append(out.Candles, c)
	a.counts.Revisions++
	a.touch(k)
}

// replay applies one restored trade-log chunk to k's window w.
func (a *Aggregator) replay(k *keyState, w *window, data []byte) error {
	r := reader{b: data}
	for len(r.b) > 0 && r.err == nil {
		kind := r.bytes(1)
		if kind == nil {
			break
		}
		switch kind[0] {
		case recTrade:
			var tr keptTrade
			tr.ts = w.open + r.varint()
			tr.price, tr.qty = r.dec(), r.dec()
			tr.quote = r.sum(stateVersion)
			if s := r.bytes(1); s != nil {
				tr.side = candle.Side(s[0])
			}
			tr.id = string(r.bytes(r.uvarint()))
			if r.err != nil {
				break
			}
			w.trades = append(w.trades, tr)
			if a.dedupe && tr.id != "" {
				n, isNum := numericID(tr.id)
				w.addParsedID(tr.id, n, isNum, a.horizon == 0) // turned off: saved as id chunks again
				k.noteID(n, isNum)
			}
		case recCancel, recCorrect:
			id := string(r.bytes(r.uvarint()))
			var price, qty decimal.Decimal
			var quote decimal.Sum
			if kind[0] == recCorrect {
				price, qty = r.dec(), r.dec()
				quote = r.sum(stateVersion)
			}
			j := w.tradeIndex(id)
			if r.err != nil || j < 0 {
				r.fail()
				break
			}
			if kind[0] == recCorrect {
				w.trades[j].price, w.trades[j].qty, w.trades[j].quote = price, qty, quote
			} else {
				w.gone = append(w.gone, id)
				w.trades = slices.Delete(w.trades, j, j+1)
			}
		default:
			r.fail()
		}
	}
	return r.err
}

// resolve replays the restored trade logs into their windows and
// recomputes the kept windows; pending ones are revised at the next move.
// A chunk that no window takes, or a corrupt one, is dropped (the state
// was checkpointed whole: it does not happen).
func (a *Aggregator) resolve() {
	a.needResolve = false
	for name, ks := range a.kstash {
		k, _ := a.keys.getString(name)
		if k == nil {
			continue
		}
		slices.SortFunc(ks, func(x, y keptWin) int { return cmp.Compare(x.open, y.open) })
		k.kept = ks
		a.schedule(k) // its kept windows expire
	}
	a.kstash = nil
	for name, cs := range a.tstash {
		k, _ := a.keys.getString(name)
		if k == nil {
			continue
		}
		slices.SortFunc(cs, func(x, y tchunk) int { return cmp.Or(cmp.Compare(x.open, y.open), cmp.Compare(x.seq, y.seq)) })
		for _, c := range cs {
			if w := k.windowAt(c.open); w != nil {
				_ = a.replay(k, w, c.data)
			}
		}
	}
	a.tstash = nil
	for k := range a.keys.all() {
		if a.horizon == 0 {
			// Revisions were turned off: the entry goes back to its form
			// without them, the open windows' trade logs are deleted (their
			// ids are saved as id chunks instead; the kept windows go at the
			// next emission).
			if len(k.kept) == 0 && (k.baseHas || k.revFloor != 0) {
				k.baseHas, k.baseClose, k.baseTS, k.revFloor = false, decimal.Decimal{}, 0, 0
				a.touch(k)
			}
			for _, w := range k.wins {
				if w.tchunks > 0 {
					k.dropped = append(k.dropped, droppedWin{open: w.open, tchunks: w.tchunks})
					w.tchunks = 0
					clear(w.trades)
					w.trades = w.trades[:0]
					a.touch(k)
				}
			}
		}
		for i := range k.kept {
			e := &k.kept[i]
			if e.w != nil {
				e.w.rebuild()
			}
			if e.pend && !k.revPend {
				k.revPend = true
				a.revKeys = append(a.revKeys, k)
			}
		}
	}
}

// restoreTrades stashes one trade-log chunk entry for resolve.
func (a *Aggregator) restoreTrades(key, val []byte) error {
	r := reader{b: key[1:]}
	name := string(r.bytes(r.uvarint()))
	open := r.varint()
	seq := r.uvarint()
	if r.err != nil || val == nil {
		return fmt.Errorf("restore: trade log entry %q: %w", key, errCorrupt)
	}
	if a.tstash == nil {
		a.tstash = make(map[string][]tchunk)
	}
	a.tstash[name] = append(a.tstash[name], tchunk{open, seq, slices.Clone(val)})
	a.needResolve = true
	return nil
}

// hasRev reports whether k's entry needs a revision section.
func (k *keyState) hasRev() bool {
	if k.baseHas || k.revFloor != 0 {
		return true
	}
	for _, w := range k.wins {
		if w.tchunks > 0 {
			return true
		}
	}
	return false
}

// appendRev writes k's revision section of its key entry.
func appendRev(b []byte, k *keyState) []byte {
	for _, w := range k.wins {
		b = binary.AppendUvarint(b, uint64(w.tchunks))
	}
	if k.baseHas {
		b = append(b, 1)
		b = appendDec(b, k.baseClose)
		b = binary.AppendVarint(b, k.baseTS)
	} else {
		b = append(b, 0)
	}
	return binary.AppendVarint(b, k.revFloor)
}

// readRev reads what appendRev wrote into k (whose open windows are read).
func (a *Aggregator) readRev(r *reader, k *keyState) {
	for _, w := range k.wins {
		w.tchunks = uint32(r.uvarint())
	}
	if b := r.bytes(1); b != nil && b[0] == 1 {
		k.baseHas, k.baseClose, k.baseTS = true, r.dec(), r.varint()
	}
	k.revFloor = r.varint()
	a.needResolve = true // the kept windows come in their own entries
}

// noRevFrom is the stored reviseFrom of a partition without one.
const noRevFrom = math.MinInt64

// saveTrades writes the trade-log records k's windows added since the last
// Changes as new chunk entries.
func (a *Aggregator) saveTrades(k *keyState, fn func(key, val []byte)) {
	for i, w := range k.tdirty {
		k.tdirty[i] = nil
		a.kbuf = binary.AppendVarint(keyPrefix(a.kbuf[:0], entryTrades, k.key), w.open)
		a.kbuf = binary.AppendUvarint(a.kbuf, uint64(w.tchunks))
		fn(a.kbuf, w.tlog)
		w.tchunks++
		w.tlog = w.tlog[:0]
		if j, ok := k.keptIndex(w.open); ok && k.kept[j].w == w {
			k.changed(&k.kept[j]) // its entry counts the chunks
		}
	}
	k.tdirty = k.tdirty[:0]
}

// saveKept writes the entries of k's kept windows that changed.
func (a *Aggregator) saveKept(k *keyState, fn func(key, val []byte)) {
	for _, open := range k.ksave {
		i, ok := k.keptIndex(open)
		if !ok || !k.kept[i].dirty {
			continue // it left the horizon
		}
		e := &k.kept[i]
		e.dirty, e.saved = false, true
		a.kbuf = binary.AppendVarint(keyPrefix(a.kbuf[:0], entryKept, k.key), e.open)
		a.vbuf = appendKept(a.vbuf[:0], e)
		fn(a.kbuf, a.vbuf)
	}
	k.ksave = k.ksave[:0]
}

// appendKept writes the value of kept window e's entry: version, length,
// revision, flags (1 emitted, 2 gap, 4 pending, 8 has trades), the close
// of its candle and, with trades, its trade-log chunk count.
func appendKept(b []byte, e *keptWin) []byte {
	b = append(b, stateVersion)
	b = binary.AppendVarint(b, e.close-e.open)
	b = binary.AppendUvarint(b, uint64(e.rev))
	var fl byte
	for bit, on := range [...]bool{e.emitted, e.gap, e.pend, e.w != nil} {
		if on {
			fl |= 1 << bit
		}
	}
	b = append(b, fl)
	b = appendDec(b, e.c)
	if e.w != nil {
		b = binary.AppendUvarint(b, uint64(e.w.tchunks))
	}
	return b
}

// restoreKept stashes one kept window entry for resolve.
func (a *Aggregator) restoreKept(key, val []byte) error {
	r := reader{b: key[1:]}
	name := string(r.bytes(r.uvarint()))
	var e keptWin
	e.open = r.varint()
	if r.err != nil || len(r.b) != 0 || len(val) < 1 || val[0] != stateVersion {
		return fmt.Errorf("restore: kept window entry %q: %w", key, errCorrupt)
	}
	r = reader{b: val[1:]}
	e.close = e.open + r.varint()
	e.rev = uint32(r.uvarint())
	fl := r.bytes(1)
	e.c = r.dec()
	if fl != nil {
		e.emitted, e.gap, e.pend, e.saved = fl[0]&1 != 0, fl[0]&2 != 0, fl[0]&4 != 0, true
		if fl[0]&8 != 0 {
			e.w = a.newWindow(e.open, e.close)
			e.w.tk = a.side
			e.w.tchunks = uint32(r.uvarint())
		}
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = errCorrupt
	}
	if r.err != nil {
		return fmt.Errorf("restore: kept window entry %q: %w", key, r.err)
	}
	if a.kstash == nil {
		a.kstash = make(map[string][]keptWin)
	}
	a.kstash[name] = append(a.kstash[name], e)
	a.needResolve = true
	return nil
}
