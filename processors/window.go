package processors

import (
	"encoding/binary"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
)

// window is one open (not yet emitted) window of one key, with the trade
// ids it counted when dedupe is on.
type window struct {
	open, close int64
	o, h, l, c  decimal.Decimal
	oTS, cTS    int64 // event times of the open and close trades
	v, q        decimal.Decimal
	n           int64
	ids         map[idKey]struct{} // short ids, stored inline (no allocation)
	longIDs     map[string]struct{}
	unsaved     []byte // ids added since the last Changes, each uvarint length + bytes
	chunks      uint32 // id chunk entries written for this window
}

// idKey holds a trade id of up to 31 bytes without a heap allocation.
type idKey struct {
	n uint8
	b [31]byte
}

func makeIDKey(id string) (idKey, bool) {
	var k idKey
	if len(id) > len(k.b) {
		return k, false
	}
	k.n = uint8(len(id))
	copy(k.b[:], id)
	return k, true
}

func (w *window) hasID(id string) bool {
	if k, ok := makeIDKey(id); ok {
		_, seen := w.ids[k]
		return seen
	}
	_, seen := w.longIDs[id]
	return seen
}

// addID remembers id; save also queues it for the next Changes call.
func (w *window) addID(id string, save bool) {
	if save {
		w.unsaved = binary.AppendUvarint(w.unsaved, uint64(len(id)))
		w.unsaved = append(w.unsaved, id...)
	}
	if k, ok := makeIDKey(id); ok {
		if w.ids == nil {
			w.ids = make(map[idKey]struct{})
		}
		w.ids[k] = struct{}{}
		return
	}
	if w.longIDs == nil {
		w.longIDs = make(map[string]struct{})
	}
	w.longIDs[string([]byte(id))] = struct{}{} // copy: id may alias the record
}

// add counts one trade; v and q are the new volume sums, already checked.
func (w *window) add(t *candle.Trade, v, q decimal.Decimal) {
	if w.n == 0 {
		w.o, w.h, w.l, w.c = t.Price, t.Price, t.Price, t.Price
		w.oTS, w.cTS = t.TS, t.TS
	} else {
		if t.TS < w.oTS { // ties: the earlier arrival keeps open
			w.o, w.oTS = t.Price, t.TS
		}
		if t.TS >= w.cTS { // ties: the later arrival takes close
			w.c, w.cTS = t.Price, t.TS
		}
		if t.Price.Cmp(w.h) > 0 {
			w.h = t.Price
		}
		if t.Price.Cmp(w.l) < 0 {
			w.l = t.Price
		}
	}
	w.v, w.q = v, q
	w.n++
}

// reset clears w for reuse, keeping its id maps' memory.
func (w *window) reset() {
	ids, long, unsaved := w.ids, w.longIDs, w.unsaved[:0]
	clear(ids)
	clear(long)
	*w = window{ids: ids, longIDs: long, unsaved: unsaved}
}
