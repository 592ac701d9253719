package processors

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
	"github.com/kandle/kandle/internal/invariant"
)

// RollupConfig configures a Rollup: To is built from closed From candles.
type RollupConfig struct {
	From, To candle.Timeframe
	// ReviseWithin is the revision horizon of the candles processor at the
	// bottom of the chain: a revised sub-candle (Rev > 0) closing less than
	// this long before the key's latest sub-candle recomputes its parent
	// from the latest revision of each sub-candle, and the parent is
	// emitted again with Rev one higher when one of its values changed
	// (the rules: see Rollup). 0 = off.
	ReviseWithin time.Duration
}

// Rollup builds a higher timeframe from the closed candles of a lower one,
// key by key. A key's higher window is emitted as soon as that key's last
// sub-candle of the window arrives (or one of a later window does), so it
// never waits for other keys sharing the partition.
//
// # Revisions
//
// With RollupConfig.ReviseWithin H > 0 a rollup follows revisions of its
// sub-candles (with H = 0 it behaves, and writes its state, exactly as
// without this section: a sub-candle not after the key's last one is a
// duplicate).
//
//   - Clock. Each key has its own clock: the close of its latest sub-candle
//     in time, or the Until of its latest QuietMark when later. It never
//     runs ahead of the watermark of the candles processor that made the
//     sub-candles (a candle is emitted once that watermark passes its
//     close), so a revision that processor makes inside its horizon is
//     inside the rollup's too; it depends on no other key sharing the
//     partition, and it moves with its key at a reshard.
//   - Kept windows. A key keeps its open window and the windows it emitted
//     that close after clock − H, each with the latest revision of every
//     sub-candle closing after clock − H. Sub-candles closing at or before
//     it can no longer be revised: they are merged, in order, into the
//     window's base, which the later ones are merged onto (a few at a
//     time: see rollFoldBatch).
//   - A sub-candle after the key's last one in time is taken as without a
//     horizon, whatever its rev, unless its window is one the key already
//     emitted (a QuietMark closed it and a late trade then created this
//     sub-candle): then it is a revision of that window, as below.
//   - A sub-candle at or before the key's last one: closing at or before
//     clock − H (or in a window opening before the key's kept windows
//     begin, for state written without a horizon) it is dead-lettered,
//     `duplicate` when its rev is 0 (a replayed input, as without a horizon),
//     `beyond_horizon` when its rev is above 0. Inside the horizon, the
//     same sub-candle kept with a rev at least as high makes it a
//     `duplicate`; otherwise it replaces the kept one, or joins its window
//     in time order when the window had none for its time (a rev 0
//     sub-candle a late trade created).
//   - The window is then recomputed from its sub-candles (candle.Merge in
//     time order, never by deltas). An open window is only updated (no
//     rev; its final is rev 0 and holds the revision). An emitted window
//     whose candle changed in any value, Rev aside, is emitted again with
//     Rev one higher; unchanged, nothing is emitted. A window that had no
//     sub-candle at all before is emitted for the first time, with rev 0.
//   - Calendar windows (days, weeks and months in a zone) follow the same
//     rules: only the window boundaries differ.
//   - QuietMark. An open window ending by Until is emitted as without a
//     horizon; the key's clock moves to Until, and the key stays, quiet,
//     with its kept windows, until the partition's clock (the latest clock
//     of any of the rollup's keys) is H or more past its own; then it is
//     freed and its state entry deleted. A revision (rev > 0) of a key the
//     rollup does not hold, closing at or before the partition's clock − H,
//     is `beyond_horizon`. The partition's clock is the latest of the
//     keys' clocks, so it restores exactly from the keys' entries (a key is
//     freed only behind it); a rollup reading a topic fed by several
//     candles partitions whose watermarks differ by more than H may free a
//     quiet key whose sub-candles a lagging partition can still revise.
//   - State. A key's entry ("k"+key, flag rollRevOwn) holds its clock and
//     open candle; each kept window and each kept sub-candle has an entry
//     of its own, keyed by the key and open times (rollup_revise_state.go),
//     deleted when it leaves the horizon, so a sub-candle writes a few
//     small entries whatever H is. A reshard hands a key's entries over
//     together (RollupResharder), and a restart gives the output of no
//     restart. Entries written when the kept windows lived inside the key
//     entry (flag rollRev) restore and are rewritten in this layout. An
//     entry written without a horizon restores under one as a key whose
//     open window holds its sub-candles so far, folded: none of them, and
//     no window before it, can be revised. State written with a horizon
//     restores without one as the plain state it also holds (the window
//     and sub-candle entries are deleted).
//   - Cost (BenchmarkRollupRevise, 1m → 5m, 100 keys, H = 1h, per
//     sub-candle with its state written; benchstat of interleaved runs on a
//     loaded 2-core machine): 282 bytes of state values against 8.1 KB
//     when the kept windows lived in the key entry (94 with H = 0), and
//     1.3–1.8 µs against 3.5–8.3 µs (0.36–0.46 µs with H = 0, unchanged).
type Rollup struct {
	from, to string
	tf       candle.Timeframe
	h        int64 // the revision horizon in ms; 0 = off
	// pclock is the partition's clock with a horizon: the latest clock of
	// any of its keys (math.MinInt64 before the first).
	pclock    int64
	quietKeys []*rollKey // keys kept quiet with a horizon, until pclock frees them
	keys      map[string]*rollKey
	dirty     []*rollKey
	active    []*rollKey
	scratch   candle.Candle
	kbuf      []byte
	vbuf      []byte
	finals    finals // the invariants build only
	// staged holds the kept window and sub-candle entries restored, by
	// key, until resolve gives them to their keys; orphans the entries to
	// delete at the next Changes (kept by no key, or restored without a
	// horizon).
	staged  map[string]map[int64]*rollWin
	orphans [][]byte
}

// rollKey is one key's higher window in progress.
type rollKey struct {
	key        string
	hasLast    bool
	lastSub    int64 // CloseTime of the last sub-candle taken
	open       bool  // a higher window is in progress
	acc        candle.Candle
	hasNonGap  bool
	dirty, act bool
	deleted    bool      // freed (by a QuietMark; with a horizon, once the partition's clock passed it)
	rv         *rollKept // the kept windows with a revision horizon; nil without
}

// NewRollup checks that cfg.To nests over cfg.From.
func NewRollup(cfg RollupConfig) (*Rollup, error) {
	if err := candle.Nests(cfg.From, cfg.To); err != nil {
		return nil, fmt.Errorf("rollup: %w", err)
	}
	if cfg.ReviseWithin < 0 || (cfg.ReviseWithin > 0 && cfg.ReviseWithin < time.Millisecond) {
		return nil, fmt.Errorf("rollup: revise_within %s: want 0 (off) or at least 1ms", cfg.ReviseWithin)
	}
	return &Rollup{from: cfg.From.String(), to: cfg.To.String(), tf: cfg.To, h: cfg.ReviseWithin.Milliseconds(),
		pclock: math.MinInt64, keys: make(map[string]*rollKey), finals: newFinals()}, nil
}

// Process takes one closed sub-candle (JSON, as written by candle.AppendJSON).
// It is read without building the symbol and timeframe strings: the key
// table is looked up with the record's bytes, and only a new key costs a
// string.
func (r *Rollup) Process(rec Record, out *Output) {
	r.resolve()
	var c candle.Candle
	sym, tf, err := candle.ParseJSONRaw(rec.Value, &c)
	if err != nil {
		reject(out, rec, Rejection{Reason: ReasonMalformedJSON, Detail: fmt.Sprintf("not a candle: %v", err)})
		return
	}
	if string(tf) != r.from {
		reject(out, rec, Rejection{Reason: ReasonMalformedJSON, Key: string(sym),
			Detail: fmt.Sprintf("candle timeframe is %q, this rollup reads %q: check the rollup's input topic", tf, r.from)})
		return
	}
	r.takeSub(rec, r.key(sym), &c, out)
}

// Take takes one closed sub-candle that the processor this rollup reads has
// just emitted in the same process (a rollup fused into its stage), as
// Process takes its JSON, without encoding and parsing it again: the same
// checks, state and output. c must be what Process would read back from
// c.AppendJSON (its Symbol printable UTF-8 and its trade ids valid UTF-8,
// which the JSON keeps as they are); c is not modified. A dead letter's
// value is rec.Value, which the caller may leave nil and fill in with the
// JSON only when there is one.
func (r *Rollup) Take(rec Record, c *candle.Candle, out *Output) {
	r.resolve()
	if c.Timeframe != r.from {
		reject(out, rec, Rejection{Reason: ReasonMalformedJSON, Key: c.Symbol,
			Detail: fmt.Sprintf("candle timeframe is %q, this rollup reads %q: check the rollup's input topic", c.Timeframe, r.from)})
		return
	}
	sub := *c
	r.takeSub(rec, r.key([]byte(c.Symbol)), &sub, out)
}

// key returns the rollup's key sym, adding it when it is new (only a new
// key costs a string).
func (r *Rollup) key(sym []byte) *rollKey {
	k := r.keys[string(sym)]
	if k == nil {
		k = &rollKey{key: string(sym)}
		r.keys[k.key] = k
	}
	return k
}

// takeSub takes sub-candle c of key k (read from rec), whose timeframe
// is the rollup's input timeframe.
func (r *Rollup) takeSub(rec Record, k *rollKey, c *candle.Candle, out *Output) {
	c.Symbol, c.Timeframe = k.key, r.from
	if r.h > 0 {
		r.processRev(rec, k, c, out)
		return
	}
	if k.hasLast && c.CloseTime <= k.lastSub {
		rejectReplay(out, rec, k, c)
		return
	}
	r.take(k, c, out)
}

// rejectReplay dead-letters c, a sub-candle not after k's last one, as a
// duplicate (a replayed input).
func rejectReplay(out *Output, rec Record, k *rollKey, c *candle.Candle) {
	reject(out, rec, Rejection{Reason: ReasonDuplicate, Key: c.Symbol,
		Detail: fmt.Sprintf("sub-candle closing %s is not after the last one (%s)", fmtMS(c.CloseTime), fmtMS(k.lastSub))})
}

// take adds c, the key's next sub-candle in time, to its window: a window
// still open from an earlier higher window is emitted first (a later one
// has begun), and the window is emitted when c ends on its close.
func (r *Rollup) take(k *rollKey, c *candle.Candle, out *Output) {
	open := r.tf.Start(c.OpenTime)
	if k.open && k.acc.OpenTime != open {
		r.emit(k, out) // the unfinished window: a later one has begun
	}
	if !k.open {
		k.open, k.hasNonGap = true, false
		k.acc = candle.NewWindow(k.key, r.to, open, r.tf.End(open))
		if k.rv != nil {
			r.openWin(k)
		}
	}
	r.add(k, c)
	k.lastSub, k.hasLast = c.CloseTime, true
	r.touch(k)
	r.activate(k)
	if c.CloseTime >= k.acc.CloseTime {
		r.emit(k, out)
	}
}

func (r *Rollup) activate(k *rollKey) {
	if !k.act {
		k.act = true
		r.active = append(r.active, k)
	}
}

func (r *Rollup) add(k *rollKey, c *candle.Candle) {
	k.hasNonGap = candle.Merge(&k.acc, c, k.hasNonGap)
	if k.rv != nil {
		w := k.rv.wins[len(k.rv.wins)-1] // the open window
		w.subs = append(w.subs, *c)
		r.saveSub(k, w, c.OpenTime)
	}
}

func (r *Rollup) emit(k *rollKey, out *Output) {
	c := k.acc
	if invariant.Enabled {
		r.finals.emitted("rollup "+r.to, k.key, c.OpenTime)
	}
	candle.FlattenGap(&c, k.hasNonGap)
	out.Candles = append(out.Candles, c)
	if k.rv != nil {
		w := k.rv.wins[len(k.rv.wins)-1]
		w.emitted = true
		r.saveWin(k, w)
	}
	k.open, k.hasNonGap = false, false
	k.acc = candle.Candle{}
	r.touch(k)
}

func (r *Rollup) touch(k *rollKey) {
	if !k.dirty {
		k.dirty = true
		r.dirty = append(r.dirty, k)
	}
}

// Quiet takes a QuietMark of the input: every sub-candle of m.Key opening
// before m.Until has arrived, and the key went quiet. Its open higher window
// closes when it ends by m.Until, exactly as direct aggregation closes it
// (with the sub-candles it has: no more come); a key with nothing open is
// freed, its state entry deleted. The mark is passed on in out.Quiet for the
// rollups built from this one.
func (r *Rollup) Quiet(m QuietMark, out *Output) {
	r.resolve()
	if k := r.keys[m.Key]; k != nil {
		if k.open && k.acc.CloseTime <= m.Until {
			r.emit(k, out)
		}
		if r.h > 0 {
			r.quietRev(k, m.Until)
		} else if !k.open {
			r.free(k)
		}
	}
	out.Quiet = append(out.Quiet, m)
}

// free forgets k and deletes its state entry.
func (r *Rollup) free(k *rollKey) {
	delete(r.keys, k.key)
	k.deleted = true
	r.touch(k)
	if k.rv != nil {
		for _, w := range k.rv.wins {
			r.dropWin(k, w)
		}
		clear(k.rv.wins)
		k.rv.wins = nil
	}
}

// Tick does nothing: rollups close on their input. It keeps the interface
// uniform with Aggregator.
func (r *Rollup) Tick(out *Output) {}

// ResetIdle does nothing: rollups do not advance by the wall clock.
func (r *Rollup) ResetIdle() {}

// Active calls fn with the in-progress higher candle of every key that
// changed since the last call. The candle is only valid during fn.
func (r *Rollup) Active(fn func(c *candle.Candle)) {
	for i, k := range r.active {
		r.active[i] = nil
		k.act = false
		if !k.open {
			continue
		}
		r.scratch = k.acc
		candle.FlattenGap(&r.scratch, k.hasNonGap)
		fn(&r.scratch)
	}
	r.active = r.active[:0]
}

// Changes calls fn with every key entry changed since the last call ("k"+key).
// key and val are only valid during fn.
func (r *Rollup) Changes(fn func(key, val []byte)) {
	r.resolve()
	r.dropOrphans(fn)
	for i, k := range r.dirty {
		r.dirty[i] = nil
		k.dirty = false
		if k.deleted {
			r.saveRev(k, fn)
			r.kbuf = append(append(r.kbuf[:0], entryKey), k.key...)
			if r.keys[k.key] == nil {
				fn(r.kbuf, nil)
			} // else the key came back: its new state is written instead
			continue
		}
		r.kbuf = append(append(r.kbuf[:0], entryKey), k.key...)
		a := &k.acc
		flags := boolBits(k.open, k.hasNonGap) | boolBits(false, k.hasLast)<<1
		trade := k.open && (a.Taker || a.FirstTradeID != "" || a.LastTradeID != "")
		if trade {
			flags |= rollTrade
		}
		if k.rv != nil {
			flags |= rollRevOwn
		}
		b := append(r.vbuf[:0], stateVersion, flags)
		b = binary.AppendVarint(b, k.lastSub)
		if k.open {
			b = binary.AppendVarint(b, a.OpenTime)
			b = binary.AppendVarint(b, a.CloseTime-a.OpenTime)
			for _, d := range [...]decimal.Decimal{a.Open, a.High, a.Low, a.Close} {
				b = appendDec(b, d)
			}
			b = a.Volume.AppendBinary(b)
			b = a.QuoteVolume.AppendBinary(b)
			b = binary.AppendUvarint(b, uint64(a.Trades))
			if trade {
				b = appendTrade(b, a.Taker, a.TakerBuyVolume, a.TakerBuyQuoteVolume, []byte(a.FirstTradeID), []byte(a.LastTradeID))
			}
		}
		if k.rv != nil {
			b = k.rv.appendKey(b)
		}
		r.vbuf = b
		fn(r.kbuf, r.vbuf)
		r.saveRev(k, fn)
	}
	r.dirty = r.dirty[:0]
}

// Restore loads one entry produced by Changes, in any order, before Process.
func (r *Rollup) Restore(key, val []byte) error {
	if len(key) > 0 && (key[0] == rollWinEntry || key[0] == rollSubEntry) {
		return r.restoreKept(key, val)
	}
	if len(key) == 0 || key[0] != entryKey {
		return errors.New("restore: not a rollup state entry: was it written by another processor?")
	}
	name := string(key[1:])
	if val == nil {
		delete(r.keys, name)
		return nil
	}
	if len(val) < 2 || !knownVersion(val[0]) {
		return fmt.Errorf("restore: rollup key %q: %w", name, errCorrupt)
	}
	ver := val[0]
	k := &rollKey{key: name, open: val[1]&1 != 0, hasNonGap: val[1]&2 != 0, hasLast: val[1]&4 != 0}
	rd := reader{b: val[2:]}
	k.lastSub = rd.varint()
	if k.open {
		a := &k.acc
		a.Symbol, a.Timeframe = name, r.to
		a.OpenTime = rd.varint()
		a.CloseTime = a.OpenTime + rd.varint()
		a.Open, a.High, a.Low, a.Close = rd.dec(), rd.dec(), rd.dec(), rd.dec()
		a.Volume, a.QuoteVolume = rd.sum(ver), rd.sum(ver)
		a.Trades = int64(rd.uvarint())
		if val[1]&rollTrade != 0 {
			var fid, lid []byte
			a.Taker, a.TakerBuyVolume, a.TakerBuyQuoteVolume, fid, lid = rd.trade(nil, nil)
			a.FirstTradeID, a.LastTradeID = string(fid), string(lid)
		}
	}
	var rv *rollKept
	switch {
	case val[1]&rollRev != 0:
		rv = r.readKeyLayout(&rd, name)
	case val[1]&rollRevOwn != 0:
		rv = readKeyOwn(&rd)
		r.stage(name) // resolve checks its open window
	}
	if rd.err == nil && len(rd.b) != 0 {
		rd.err = errCorrupt
	}
	if rd.err != nil {
		return fmt.Errorf("restore: rollup key %q: %w", name, rd.err)
	}
	r.keys[name] = k
	switch {
	case r.h > 0:
		r.restoreRev(k, rv)
	case val[1]&rollRevOwn != 0:
		r.touch(k) // rewritten without its kept windows, whose entries go
	}
	return nil
}
