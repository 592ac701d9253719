package processors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/kandle/kandle/decimal"
)

// State entries (Changes / Restore). Keys:
//
//	"p"                          the partition: max event time, last record
//	                             wall time, watermark
//	"k"+key                      one key: open windows, previous close, next
//	                             window to emit, last trade time, last
//	                             emitted trade time
//	"i"+len+key+open+seq         one chunk of dedupe ids of one open window
//	"t"+len+key+open+seq         with a revision horizon: one chunk of the
//	                             trade log of one open or kept window
//	"r"+len+key+open             with a revision horizon: one kept window
//	                             (see revise.go)
//
// Ids go in append-only chunks (one per Changes call that added ids to the
// window), so a checkpoint writes only the ids that are new, not every id of
// a busy window again. Values are a version byte (key and partition entries)
// followed by varints, 16-byte decimals (prices) and sums (volumes, in the
// binary form of decimal.Sum: 17 bytes in the common case, longer when a
// sum is wide). A nil value from Changes means the entry was deleted.
//
// The partition entry's flags byte says which of its values are valid:
// bit 1 max event time, bit 2 wall time, bit 4 the watermark (a varint after
// the wall time). Entries written before the watermark was stored lack bit
// 4 and the value: the watermark restores as max event time − the lateness
// the state was written under (CandleConfig.StateLateness). A reader that
// does not know bit 4 ignores the trailing value.
//
// Version 1 (before exact wide sums) stored volumes as 16-byte decimals;
// Restore still reads it, and every entry is rewritten as version 2 the
// next time it changes.
const (
	entryPartition = 'p'
	entryKey       = 'k'
	entryIDs       = 'i'
	stateVersion   = 2
	stateV1        = 1 // volumes as 16-byte decimals
)

// Key entry flags beyond started and hasPrev. flagPrevTS marks an entry
// that stores prevTS (after lastTS); older entries lack it and restore
// prevTS as lastTS. flagQuiet: the key is quiet, quietAt and quietNext follow.
// flagTrade: each window goes on, after its chunk count, with a byte (1:
// taker volumes follow as two sums), then its first and last trade ids
// (uvarint length + bytes). Entries written before sides and ids were kept
// lack it: their windows restore without taker volumes (their candles
// report none rather than a part) and without ids (a later trade may still
// set them). It is written only when some window has either, so the state
// of a source without sides or ids is what the previous version wrote.
const (
	flagPrevTS = 4
	flagQuiet  = 8
	flagTrade  = 16
)

// The rollup key entry's flags: open, hasNonGap, hasLast, and rollTrade: the
// open candle goes on with a byte (1: taker volumes follow as two sums) and
// its first and last trade ids, as flagTrade does for a window.
const rollTrade = 8

// partWM flags a partition entry that stores the watermark.
const partWM = 4

// knownVersion reports whether v is a state version Restore reads.
func knownVersion(v byte) bool { return v == stateVersion || v == stateV1 }

var errCorrupt = errors.New("truncated or corrupt state entry")

// droppedWin is an emitted window whose id or trade-log chunks are still
// stored.
type droppedWin struct {
	open            int64
	chunks, tchunks uint32
	kept            bool // its kept window entry too
}

// idChunk is an id chunk restored before the window it belongs to.
type idChunk struct {
	open int64
	data []byte
}

// Changes calls fn with every state entry changed since the last call (val
// nil = deleted), then forgets them. key and val are only valid during fn.
func (a *Aggregator) Changes(fn func(key, val []byte)) {
	if a.needResolve {
		a.resolve()
	}
	clear(a.orphans)
	if a.partDirty {
		a.partDirty = false
		a.kbuf = append(a.kbuf[:0], entryPartition)
		bits := boolBits(a.hasMax, a.hasWall)
		if a.hasMax {
			bits |= partWM
		}
		v := append(a.vbuf[:0], stateVersion, bits)
		v = binary.AppendVarint(v, a.maxTS)
		v = binary.AppendVarint(v, a.lastWall)
		if a.hasMax {
			v = binary.AppendVarint(v, a.wm)
			if a.horizon > 0 {
				v[1] |= partRev
				rf := int64(noRevFrom)
				if a.hasRevFrom {
					rf = a.reviseFrom
				}
				v = binary.AppendVarint(v, rf)
			}
		}
		a.vbuf = v
		fn(a.kbuf, a.vbuf)
	}
	for i, k := range a.dirty {
		a.dirty[i] = nil
		k.dirty = false
		// The key's id chunk entries share "i"+len+key, built once per key:
		// a busy window leaves one chunk per Changes call to delete.
		ip := 0 // len of that prefix in a.kbuf, 0 until built
		for _, d := range k.dropped {
			if ip == 0 {
				a.kbuf = keyPrefix(a.kbuf[:0], entryIDs, k.key)
				ip = len(a.kbuf)
			}
			a.kbuf = binary.AppendVarint(a.kbuf[:ip], d.open)
			op := len(a.kbuf)
			for seq := range d.chunks {
				a.kbuf = binary.AppendUvarint(a.kbuf[:op], uint64(seq))
				fn(a.kbuf, nil)
			}
			if d.tchunks > 0 {
				a.kbuf = binary.AppendVarint(keyPrefix(a.kbuf[:0], entryTrades, k.key), d.open)
				op := len(a.kbuf)
				for seq := range d.tchunks {
					a.kbuf = binary.AppendUvarint(a.kbuf[:op], uint64(seq))
					fn(a.kbuf, nil)
				}
				ip = 0 // a.kbuf no longer holds the ids prefix
			}
			if d.kept {
				a.kbuf = binary.AppendVarint(keyPrefix(a.kbuf[:0], entryKept, k.key), d.open)
				fn(a.kbuf, nil)
				ip = 0
			}
		}
		k.dropped = k.dropped[:0]
		if k.deleted {
			if cur, _ := a.keys.getString(k.key); cur == nil || cur == k {
				a.kbuf = append(append(a.kbuf[:0], entryKey), k.key...)
				fn(a.kbuf, nil)
			} // else the key came back: its new state is written instead
			continue
		}
		if len(k.tdirty) > 0 {
			a.saveTrades(k, fn)
			ip = 0
		}
		if len(k.ksave) > 0 {
			a.saveKept(k, fn)
		}
		for _, w := range k.wins {
			if a.horizon > 0 { // the ids are in the trade log
				w.saved()
				continue
			}
			if ids := w.unsavedIDs(); len(ids) > 0 {
				if ip == 0 {
					a.kbuf = keyPrefix(a.kbuf[:0], entryIDs, k.key)
					ip = len(a.kbuf)
				}
				a.kbuf = binary.AppendVarint(a.kbuf[:ip], w.open)
				a.kbuf = binary.AppendUvarint(a.kbuf, uint64(w.chunks))
				fn(a.kbuf, ids)
				w.chunks++
				w.saved()
			}
		}
		a.vbuf = encodeKey(a.vbuf[:0], k)
		a.kbuf = append(append(a.kbuf[:0], entryKey), k.key...)
		fn(a.kbuf, a.vbuf)
	}
	a.dirty = a.dirty[:0]
}

// keyPrefix appends the start of the entries of one key of a kind: the
// kind byte, the key's length (uvarint) and the key. An id chunk ("i") or
// trade-log chunk ("t") entry's key goes on with the window's open time and
// the chunk's number (varint, uvarint), a kept window's ("r") with the
// window's open time.
func keyPrefix(b []byte, kind byte, key string) []byte {
	b = append(b, kind)
	b = binary.AppendUvarint(b, uint64(len(key)))
	return append(b, key...)
}

// Restore loads one entry produced by Changes. Call it for every stored
// entry, in any order, before processing records.
func (a *Aggregator) Restore(key, val []byte) error {
	if len(key) == 0 {
		return errors.New("restore: empty state key")
	}
	switch key[0] {
	case entryPartition:
		if val == nil {
			return nil
		}
		if len(val) < 2 || !knownVersion(val[0]) {
			return fmt.Errorf("restore: partition entry: %w", errCorrupt)
		}
		r := reader{b: val[2:]}
		a.hasMax = val[1]&1 != 0
		a.maxTS, _ = r.varint(), r.varint()
		a.wm = a.maxTS - a.stateLateness
		if val[1]&partWM != 0 {
			a.wm = r.varint()
		}
		a.hasRevFrom = false
		if val[1]&partRev != 0 {
			if rf := r.varint(); rf != noRevFrom {
				a.reviseFrom, a.hasRevFrom = rf, true
			}
		} else if a.horizon > 0 && a.hasMax {
			// State written without a horizon: the windows it emitted are
			// not revisable.
			a.reviseFrom, a.hasRevFrom, a.partDirty = a.wm, true, true
		}
		if r.err != nil {
			return fmt.Errorf("restore: partition entry: %w", r.err)
		}
		// The stored wall time is the previous owner's: it says nothing
		// about how long this process has seen the partition quiet. The
		// idle clock starts now.
		a.hasWall = false
		a.ResetIdle()
		return nil
	case entryKey:
		name := string(key[1:])
		if old, _ := a.keys.getString(name); old != nil {
			a.heap.remove(old)
			a.keys.del(name)
		}
		if val == nil {
			return nil
		}
		k, err := a.decodeKey(name, val)
		if err != nil {
			return fmt.Errorf("restore: key %q: %w", name, err)
		}
		a.keys.put(name, k)
		a.schedule(k)
		for _, c := range a.orphans[name] {
			if err := a.restoreIDs(k, c.open, c.data); err != nil {
				return fmt.Errorf("restore: ids of key %q: %w", name, err)
			}
		}
		delete(a.orphans, name)
		return nil
	case entryTrades:
		return a.restoreTrades(key, val)
	case entryKept:
		if val == nil {
			return fmt.Errorf("restore: kept window entry %q: %w", key, errCorrupt)
		}
		return a.restoreKept(key, val)
	case entryIDs:
		r := reader{b: key[1:]}
		name := string(r.bytes(r.uvarint()))
		open := r.varint()
		r.uvarint()
		if r.err != nil || val == nil {
			return fmt.Errorf("restore: id chunk entry %q: %w", key, errCorrupt)
		}
		if k, _ := a.keys.getString(name); k != nil {
			if err := a.restoreIDs(k, open, val); err != nil {
				return fmt.Errorf("restore: ids of key %q: %w", name, err)
			}
			return nil
		}
		if a.orphans == nil {
			a.orphans = make(map[string][]idChunk)
		}
		a.orphans[name] = append(a.orphans[name], idChunk{open, bytes.Clone(val)})
		return nil
	}
	return fmt.Errorf("restore: unknown state entry kind %q: was it written by another processor?", key[0])
}

func (a *Aggregator) restoreIDs(k *keyState, open int64, data []byte) error {
	w := k.find(open)
	if w == nil {
		return fmt.Errorf("no open window at %s for stored ids: the state is inconsistent", fmtMS(open))
	}
	r := reader{b: data}
	for len(r.b) > 0 && r.err == nil {
		id := string(r.bytes(r.uvarint()))
		n, isNum := numericID(id)
		w.addParsedID(id, n, isNum, false)
		k.noteID(n, isNum)
	}
	return r.err
}

func boolBits(a, b bool) byte {
	var x byte
	if a {
		x |= 1
	}
	if b {
		x |= 2
	}
	return x
}

func appendDec(b []byte, d decimal.Decimal) []byte {
	hi, lo := d.Raw()
	b = binary.BigEndian.AppendUint64(b, hi)
	return binary.BigEndian.AppendUint64(b, lo)
}

func encodeKey(b []byte, k *keyState) []byte {
	flags := boolBits(k.started, k.hasPrev) | flagPrevTS
	rev := k.hasRev()
	if rev {
		flags |= flagRevise
	}
	if k.quiet {
		flags |= flagQuiet
	}
	trade := false
	for _, w := range k.wins {
		trade = trade || w.tk || len(w.fid) > 0 || len(w.lid) > 0
	}
	if trade {
		flags |= flagTrade
	}
	b = append(b, stateVersion, flags)
	b = binary.AppendVarint(b, k.nextOpen)
	b = binary.AppendVarint(b, k.nextClose-k.nextOpen)
	b = binary.AppendVarint(b, k.lastTS)
	b = binary.AppendVarint(b, k.prevTS)
	if k.quiet {
		b = binary.AppendVarint(b, k.quietAt)
		b = binary.AppendVarint(b, k.quietNext)
	}
	if k.hasPrev {
		b = appendDec(b, k.prevClose)
	}
	b = binary.AppendUvarint(b, uint64(len(k.wins)))
	for _, w := range k.wins {
		b = binary.AppendVarint(b, w.open)
		b = binary.AppendVarint(b, w.close-w.open)
		b = binary.AppendVarint(b, w.oTS-w.open)
		b = binary.AppendVarint(b, w.cTS-w.open)
		for _, d := range [...]decimal.Decimal{w.o, w.h, w.l, w.c} {
			b = appendDec(b, d)
		}
		b = w.v.AppendBinary(b)
		b = w.q.AppendBinary(b)
		b = binary.AppendUvarint(b, uint64(w.n))
		b = binary.AppendUvarint(b, uint64(w.chunks))
		if trade {
			b = appendTrade(b, w.tk, w.tbv, w.tbq, w.fid, w.lid)
		}
	}
	if rev {
		b = appendRev(b, k)
	}
	return b
}

// appendTrade writes the taker volumes (when tk) and the first and last
// trade ids of a window or a rollup's open candle.
func appendTrade(b []byte, tk bool, tbv, tbq decimal.Sum, fid, lid []byte) []byte {
	if !tk {
		b = append(b, 0)
	} else {
		b = append(b, 1)
		b = tbv.AppendBinary(b)
		b = tbq.AppendBinary(b)
	}
	b = binary.AppendUvarint(b, uint64(len(fid)))
	b = append(b, fid...)
	b = binary.AppendUvarint(b, uint64(len(lid)))
	return append(b, lid...)
}

// trade reads what appendTrade wrote; fid and lid are copied into the given
// buffers.
func (r *reader) trade(fid, lid []byte) (tk bool, tbv, tbq decimal.Sum, f, l []byte) {
	switch flag := r.bytes(1); {
	case flag == nil:
		return
	case flag[0] == 1:
		tk = true
		tbv, tbq = r.sum(stateVersion), r.sum(stateVersion)
	case flag[0] != 0:
		r.fail()
		return
	}
	f = append(fid[:0], r.bytes(r.uvarint())...)
	l = append(lid[:0], r.bytes(r.uvarint())...)
	return
}

func (a *Aggregator) decodeKey(name string, val []byte) (*keyState, error) {
	if len(val) < 2 || !knownVersion(val[0]) {
		return nil, errCorrupt
	}
	ver := val[0]
	k := &keyState{key: name, hidx: -1, started: val[1]&1 != 0, hasPrev: val[1]&2 != 0}
	r := reader{b: val[2:]}
	k.nextOpen = r.varint()
	k.nextClose = k.nextOpen + r.varint()
	k.lastTS = r.varint()
	k.prevTS = k.lastTS // entries written before prevTS was stored
	if val[1]&flagPrevTS != 0 {
		k.prevTS = r.varint()
	}
	if k.quiet = val[1]&flagQuiet != 0; k.quiet {
		k.quietAt, k.quietNext = r.varint(), r.varint()
	}
	if k.hasPrev {
		k.prevClose = r.dec()
	}
	n := r.uvarint()
	for i := uint64(0); i < n && r.err == nil; i++ {
		w := a.newWindow(0, 0)
		w.open = r.varint()
		w.close = w.open + r.varint()
		w.oTS = w.open + r.varint()
		w.cTS = w.open + r.varint()
		w.o, w.h, w.l, w.c = r.dec(), r.dec(), r.dec(), r.dec()
		w.v, w.q = r.sum(ver), r.sum(ver)
		w.n = int64(r.uvarint())
		w.chunks = uint32(r.uvarint())
		if val[1]&flagTrade != 0 {
			w.tk, w.tbv, w.tbq, w.fid, w.lid = r.trade(w.fid, w.lid)
			w.fidNew, w.lidNew = true, true
		}
		k.wins = append(k.wins, w)
	}
	if val[1]&flagRevise != 0 {
		a.readRev(&r, k)
	} else if a.horizon > 0 && len(k.wins) > 0 {
		// Written without a horizon: its open windows hold trades not in
		// a trade log, so they and the windows before them stay final.
		k.revFloor = k.wins[len(k.wins)-1].close
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = errCorrupt
	}
	return k, r.err
}

// reader decodes state values; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes(n uint64) []byte {
	if uint64(len(r.b)) < n {
		r.fail()
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) dec() decimal.Decimal {
	b := r.bytes(16)
	if b == nil {
		return decimal.Zero
	}
	return decimal.FromRaw(binary.BigEndian.Uint64(b), binary.BigEndian.Uint64(b[8:]))
}

// sum reads a volume written by state version ver.
func (r *reader) sum(ver byte) decimal.Sum {
	if ver == stateV1 {
		return decimal.SumOf(r.dec())
	}
	if r.err != nil {
		return decimal.Sum{}
	}
	s, rest, err := decimal.ReadBinary(r.b)
	if err != nil {
		r.fail()
		return decimal.Sum{}
	}
	r.b = rest
	return s
}

func (r *reader) fail() {
	if r.err == nil {
		r.err = errCorrupt
	}
	r.b = nil
}
