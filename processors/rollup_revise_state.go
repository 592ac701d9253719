package processors

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/kandle/kandle/candle"
)

// With a revision horizon a rollup key's kept windows live in entries of
// their own, so a sub-candle writes a few small entries however long the
// horizon is:
//
//   - the key entry ("k"+key) is flagged rollRevOwn and goes on, after the
//     open candle, with the key's clock, the open time before which its
//     windows are unknown and a quiet byte;
//   - each kept window has an entry rollWinEntry + key + its open time
//     (keyPrefix, then 8 bytes: see rollEntryKey): version, length, rev,
//     flags (1 emitted, 2 base has trades), the close of its last folded
//     sub-candle and its base candle;
//   - each kept sub-candle has an entry rollSubEntry + key + its window's
//     open time + its own open time: version and the sub-candle.
//
// A window's entry is deleted with its sub-candles' when it leaves the
// horizon, a sub-candle's when it is folded into its window's base, and
// all of a key's when the key is freed. A rollup without a horizon deletes
// the window and sub-candle entries it restores and rewrites the key entry
// without its section.
const (
	rollRevOwn   = 32
	rollWinEntry = 'w'
	rollSubEntry = 's'
)

// rollOp is a kept window or sub-candle entry to write or delete.
type rollOp struct {
	del      bool
	isSub    bool
	win, sub int64 // the window's open time; the sub-candle's
}

// saveWin queues the entry of k's kept window w.
func (r *Rollup) saveWin(k *rollKey, w *rollWin) {
	r.touch(k)
	if !w.dirty {
		w.dirty = true
		k.rv.ops = append(k.rv.ops, rollOp{win: w.open})
	}
}

// saveSub queues the entry of the sub-candle opening at open in k's kept
// window w.
func (r *Rollup) saveSub(k *rollKey, w *rollWin, open int64) {
	r.touch(k)
	k.rv.ops = append(k.rv.ops, rollOp{isSub: true, win: w.open, sub: open})
}

// dropSub queues the deletion of a sub-candle's entry of k's window w.
func (r *Rollup) dropSub(k *rollKey, w *rollWin, open int64) {
	r.touch(k)
	k.rv.ops = append(k.rv.ops, rollOp{del: true, isSub: true, win: w.open, sub: open})
}

// dropWin queues the deletion of k's window w's entry and its sub-candles'.
func (r *Rollup) dropWin(k *rollKey, w *rollWin) {
	for i := range w.subs {
		r.dropSub(k, w, w.subs[i].OpenTime)
	}
	w.dirty = false
	k.rv.ops = append(k.rv.ops, rollOp{del: true, win: w.open})
}

// rollEntryKey appends the key of a kept window's entry, or of its
// sub-candle's. Times are big-endian with the sign bit flipped, so a key's
// entries sort in time order.
func rollEntryKey(b []byte, name string, op rollOp) []byte {
	if !op.isSub {
		return binary.BigEndian.AppendUint64(keyPrefix(b, rollWinEntry, name), uint64(op.win)^1<<63)
	}
	b = binary.BigEndian.AppendUint64(keyPrefix(b, rollSubEntry, name), uint64(op.win)^1<<63)
	return binary.BigEndian.AppendUint64(b, uint64(op.sub)^1<<63)
}

// saveRev writes k's queued kept window and sub-candle entries, in order.
func (r *Rollup) saveRev(k *rollKey, fn func(key, val []byte)) {
	kp := k.rv
	if kp == nil {
		return
	}
	for i, op := range kp.ops {
		kp.ops[i] = rollOp{}
		r.kbuf = rollEntryKey(r.kbuf[:0], k.key, op)
		if op.del {
			fn(r.kbuf, nil)
			continue
		}
		w, _ := kp.find(op.win)
		if w == nil {
			continue // it left the horizon: its deletion follows
		}
		b := append(r.vbuf[:0], stateVersion)
		if !op.isSub {
			if !w.dirty {
				continue // written already
			}
			w.dirty = false
			b = binary.AppendVarint(b, w.close-w.open)
			b = binary.AppendUvarint(b, uint64(w.rev))
			b = append(b, boolBits(w.emitted, w.baseNG))
			b = binary.AppendVarint(b, w.folded-w.open)
			b = appendRollCandle(b, &w.base, w.open)
		} else {
			j, ok := findSub(w, op.sub)
			if !ok {
				continue // folded: its deletion follows
			}
			b = appendRollCandle(b, &w.subs[j], w.open)
		}
		r.vbuf = b
		fn(r.kbuf, r.vbuf)
	}
	kp.ops = kp.ops[:0]
}

// appendKey writes the kept windows' section of a key entry flagged
// rollRevOwn.
func (kp *rollKept) appendKey(b []byte) []byte {
	b = binary.AppendVarint(b, kp.clock)
	b = binary.AppendVarint(b, kp.keptFrom)
	return append(b, boolBits(kp.quiet, false))
}

// readKeyOwn reads what appendKey wrote.
func readKeyOwn(rd *reader) *rollKept {
	kp := &rollKept{clock: rd.varint(), keptFrom: rd.varint(), own: true}
	if q := rd.bytes(1); q != nil {
		kp.quiet = q[0]&1 != 0
	}
	return kp
}

// parseRollEntryKey reads the key of a kept window or sub-candle entry.
func parseRollEntryKey(key []byte) (name string, op rollOp, err error) {
	rd := reader{b: key[1:]}
	name = string(rd.bytes(rd.uvarint()))
	n := 8
	if key[0] == rollSubEntry {
		op.isSub, n = true, 16
	}
	t := rd.bytes(uint64(n))
	if rd.err == nil && len(rd.b) != 0 {
		rd.err = errCorrupt
	}
	if rd.err != nil {
		return "", rollOp{}, rd.err
	}
	op.win = int64(binary.BigEndian.Uint64(t) ^ 1<<63)
	if op.isSub {
		op.sub = int64(binary.BigEndian.Uint64(t[8:]) ^ 1<<63)
	}
	return name, op, nil
}

// restoreKept loads a kept window or sub-candle entry; resolve gives it to
// its key.
func (r *Rollup) restoreKept(key, val []byte) error {
	name, op, err := parseRollEntryKey(key)
	if err != nil {
		return fmt.Errorf("restore: rollup kept entry %q: %w", key, err)
	}
	if val == nil {
		return nil
	}
	if r.h == 0 {
		r.orphans = append(r.orphans, slices.Clone(key))
		return nil
	}
	if len(val) < 1 || !knownVersion(val[0]) {
		return fmt.Errorf("restore: rollup key %q: kept entry: %w", name, errCorrupt)
	}
	ws := r.stage(name)
	w := ws[op.win]
	if w == nil {
		w = &rollWin{open: op.win, stub: true}
		ws[op.win] = w
	}
	rd := reader{b: val[1:]}
	if op.isSub {
		c := r.readRollCandle(&rd, name, r.from, op.win)
		if c.OpenTime != op.sub {
			rd.err = errCorrupt
		}
		w.subs = append(w.subs, c)
	} else {
		w.stub = false
		w.close = w.open + rd.varint()
		w.rev = uint32(rd.uvarint())
		if f := rd.bytes(1); f != nil {
			w.emitted, w.baseNG = f[0]&1 != 0, f[0]&2 != 0
		}
		w.folded = w.open + rd.varint()
		w.base = r.readRollCandle(&rd, name, r.to, w.open)
	}
	if rd.err == nil && len(rd.b) != 0 {
		rd.err = errCorrupt
	}
	if rd.err != nil {
		return fmt.Errorf("restore: rollup key %q: kept entry: %w", name, rd.err)
	}
	return nil
}

// stage returns the restored kept windows of key name, by open time.
func (r *Rollup) stage(name string) map[int64]*rollWin {
	if r.staged == nil {
		r.staged = map[string]map[int64]*rollWin{}
	}
	ws := r.staged[name]
	if ws == nil {
		ws = map[int64]*rollWin{}
		r.staged[name] = ws
	}
	return ws
}

// resolve gives the restored kept window and sub-candle entries to their
// keys. Entries no key holds (its entry was deleted or written without a
// horizon), and sub-candles whose window has no entry, are deleted at the
// next Changes. A key with an open candle whose kept window is missing gets
// one, as from state written without a horizon.
func (r *Rollup) resolve() {
	if r.staged == nil {
		return
	}
	for name, ws := range r.staged {
		k := r.keys[name]
		var kp *rollKept
		if k != nil && k.rv != nil && k.rv.own {
			kp = k.rv
		}
		for _, w := range ws {
			if kp != nil && !w.stub {
				slices.SortFunc(w.subs, func(a, b candle.Candle) int { return cmp.Compare(a.OpenTime, b.OpenTime) })
				kp.wins = append(kp.wins, w)
				continue
			}
			for i := range w.subs {
				r.orphans = append(r.orphans, rollEntryKey(nil, name, rollOp{isSub: true, win: w.open, sub: w.subs[i].OpenTime}))
			}
			if !w.stub {
				r.orphans = append(r.orphans, rollEntryKey(nil, name, rollOp{win: w.open}))
			}
		}
		if kp != nil {
			slices.SortFunc(kp.wins, func(a, b *rollWin) int { return cmp.Compare(a.open, b.open) })
		}
	}
	r.staged = nil
	for _, k := range r.keys {
		kp := k.rv
		if kp == nil || !kp.own || !k.open {
			continue
		}
		if n := len(kp.wins); n == 0 || kp.wins[n-1].open != k.acc.OpenTime || kp.wins[n-1].emitted {
			w := &rollWin{open: k.acc.OpenTime, close: k.acc.CloseTime, base: k.acc, baseNG: k.hasNonGap, folded: k.lastSub}
			kp.wins = append(kp.wins, w)
			kp.keptFrom = max(kp.keptFrom, k.acc.OpenTime)
			r.saveWin(k, w)
		}
	}
}

// dropOrphans deletes the entries resolve found no key for.
func (r *Rollup) dropOrphans(fn func(key, val []byte)) {
	for _, k := range r.orphans {
		fn(k, nil)
	}
	r.orphans = nil
}
