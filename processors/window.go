package processors

import (
	"encoding/binary"
	"slices"
	"strconv"
	"unsafe"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
)

// window is one open (not yet emitted) window of one key, with the trade
// ids it counted when dedupe is on.
type window struct {
	// The fields a trade touches come first, on as few cache lines as
	// they fit: a trade of a key not seen for a while misses each.
	open, close int64
	o, h, l, c  decimal.Decimal
	oTS, cTS    int64 // event times of the open and close trades
	v, q        decimal.Sum
	n           int64
	// Taker buy volumes, counted when tk: the decoder maps a side and the
	// window saw every trade's (a window restored from state written
	// before sides were kept has not, and reports none).
	tk bool
	// fidNew and lidNew say fid or lid changed since fidS or lidS was
	// made: every write of fid or lid sets them, so a candle of an
	// unchanged window reads neither the bytes nor the strings.
	fidNew, lidNew bool
	tchunks        uint32   // with a revision horizon: the trade-log chunk entries written (revise.go)
	lid            []byte   // id of the close trade (empty: none); reused, in lidBuf while it fits
	lidBuf         [16]byte // lid's bytes on the window's own cache lines
	nums           []uint64 // canonical decimal ids ("123") while they arrive ascending

	tbv, tbq decimal.Sum
	fid      []byte // id of the open trade (empty: none); reused
	// fidS and lidS are fid and lid as the strings last handed out in a
	// candle: the live path (Active) asks again and again, mostly for an
	// unchanged first id.
	fidS, lidS string
	other      *otherIDs // the ids not in nums; nil until the first
	// unsaved and nums[numsSaved:] are the ids added since the last
	// Changes, in arrival order: first unsaved's, each a uvarint length and
	// the id's bytes, then those of nums[numsSaved:], which appendNum adds
	// without writing them out; unsavedIDs writes them in unsaved's form
	// (a canonical decimal id is its number's decimal text).
	unsaved   []byte
	chunks    uint32 // id chunk entries written for this window
	numsSaved uint32

	// With a revision horizon: the window's trades in arrival order, the
	// ids of trades cancelled from it and the trade-log records added
	// since the last Changes (revise.go).
	trades []keptTrade
	gone   []string
	tlog   []byte
}

// otherIDs are a window's ids that are not in its nums: rare when an
// exchange numbers its trades, so they are kept off the window.
type otherIDs struct {
	nums  map[uint64]struct{} // canonical decimal ids that arrived out of order
	short map[idKey]struct{}  // other short ids, stored inline (no allocation)
	long  map[string]struct{}
}

// len is how many ids o holds.
func (o *otherIDs) len() int {
	if o == nil {
		return 0
	}
	return len(o.nums) + len(o.short) + len(o.long)
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

// numericID parses a canonical decimal id (no sign, no leading zero, at most
// 19 digits). Such ids map one-to-one onto uint64, so "7" and 7 match while
// "07" stays a different (string) id.
func numericID(id string) (uint64, bool) {
	if len(id) == 0 || len(id) > 19 || (id[0] == '0' && len(id) > 1) {
		return 0, false
	}
	if len(id) >= 8 && len(id) <= 16 { // ids of today's exchanges: two eight-digit steps
		n, ok := candle.ParseEpochMillis(unsafe.Slice(unsafe.StringData(id), len(id)))
		return uint64(n), ok
	}
	var n uint64
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, true
}

func (w *window) hasID(id string) bool {
	n, isNum := numericID(id)
	return w.hasParsedID(id, n, isNum)
}

// hasParsedID is hasID with numericID(id) already computed.
func (w *window) hasParsedID(id string, n uint64, isNum bool) bool {
	if isNum {
		if l := len(w.nums); l > 0 && n <= w.nums[l-1] {
			if _, found := slices.BinarySearch(w.nums, n); found {
				return true
			}
		}
		if w.other == nil {
			return false
		}
		_, seen := w.other.nums[n] // nil map: false
		return seen
	}
	if w.other == nil {
		return false
	}
	if k, ok := makeIDKey(id); ok {
		_, seen := w.other.short[k]
		return seen
	}
	_, seen := w.other.long[id]
	return seen
}

// addID remembers id; save also queues it for the next Changes call.
func (w *window) addID(id string, save bool) {
	n, isNum := numericID(id)
	w.addParsedID(id, n, isNum, save)
}

// addParsedID is addID with numericID(id) already computed.
func (w *window) addParsedID(id string, n uint64, isNum, save bool) {
	w.unsavedIDs() // the ids appendNum added come first
	if save {
		w.unsaved = binary.AppendUvarint(w.unsaved, uint64(len(id)))
		w.unsaved = append(w.unsaved, id...)
	}
	if isNum {
		// Exchanges number trades in order: the common case is an append to
		// a sorted slice, no hashing. Out-of-order ids go to a map.
		if l := len(w.nums); l == 0 || n > w.nums[l-1] {
			w.nums = append(w.nums, n)
			w.numsSaved = uint32(len(w.nums)) // in unsaved, or restored
			return
		}
	}
	if w.other == nil {
		w.other = new(otherIDs)
	}
	o := w.other
	if isNum {
		if o.nums == nil {
			o.nums = make(map[uint64]struct{})
		}
		o.nums[n] = struct{}{}
		return
	}
	if k, ok := makeIDKey(id); ok {
		if o.short == nil {
			o.short = make(map[idKey]struct{})
		}
		o.short[k] = struct{}{}
		return
	}
	if o.long == nil {
		o.long = make(map[string]struct{})
	}
	o.long[string([]byte(id))] = struct{}{} // copy: id may alias the record
}

// appendNum is addParsedID(id, n, true, true) for a canonical decimal id n
// known to be above every id w holds (above its key's maxNum): the id's
// bytes are written out by the next unsavedIDs call, from n.
func (w *window) appendNum(n uint64) {
	if l := len(w.nums); l == cap(w.nums) && l < 64 {
		// A list with no size hint (a new key) grows fourfold while it is
		// short: 3 allocations to reach a busy window's size, not 7.
		w.nums = slices.Grow(w.nums, 3*l+4)
	}
	w.nums = append(w.nums, n)
}

// unsavedIDs returns the ids added since the last Changes, each a uvarint
// length and the id's bytes, in arrival order.
func (w *window) unsavedIDs() []byte {
	pend := w.nums[w.numsSaved:]
	if len(pend) == 0 {
		return w.unsaved
	}
	var last [20]byte // the largest id's text bounds each id's
	w.unsaved = slices.Grow(w.unsaved, len(pend)*(1+len(strconv.AppendUint(last[:0], pend[len(pend)-1], 10))))
	for _, n := range pend {
		l := len(w.unsaved)
		w.unsaved = strconv.AppendUint(append(w.unsaved, 0), n, 10) // its text: at most 20 bytes, a 1-byte length
		w.unsaved[l] = byte(len(w.unsaved) - l - 1)
	}
	w.numsSaved = uint32(len(w.nums))
	return w.unsaved
}

// saved forgets the ids added since the last Changes: they are stored.
func (w *window) saved() {
	w.unsaved, w.numsSaved = w.unsaved[:0], uint32(len(w.nums))
}

// add counts one trade; v and q are the new volume sums, already checked,
// quote the trade's price × qty.
func (w *window) add(t *candle.Trade, v, q, quote decimal.Sum) {
	if w.n == 0 {
		w.o, w.h, w.l, w.c = t.Price, t.Price, t.Price, t.Price
		w.oTS, w.cTS = t.TS, t.TS
		w.fid = append(w.fid[:0], t.ID...)
		w.lid = append(w.lid[:0], t.ID...)
		w.fidNew, w.lidNew = true, true
	} else {
		if t.TS < w.oTS { // ties: the earlier arrival keeps open
			w.o, w.oTS = t.Price, t.TS
			w.fid = append(w.fid[:0], t.ID...)
			w.fidNew = true
		}
		if t.TS >= w.cTS { // ties: the later arrival takes close
			w.c, w.cTS = t.Price, t.TS
			w.lid = append(w.lid[:0], t.ID...)
			w.lidNew = true
		}
		if t.Price.Cmp(w.h) > 0 {
			w.h = t.Price
		}
		if t.Price.Cmp(w.l) < 0 {
			w.l = t.Price
		}
	}
	if t.Side == candle.SideBuy {
		w.tbv, w.tbq = w.tbv.AddDecimal(t.Qty), w.tbq.Add(quote)
	}
	w.v, w.q = v, q
	w.n++
}

// reset clears w for reuse, keeping its id lists' and maps' memory (and
// lid in lidBuf when it is there: w never moves).
func (w *window) reset() {
	nums, other, unsaved := w.nums[:0], w.other, w.unsaved[:0]
	fid, lid := w.fid[:0], w.lid[:0]
	if other != nil {
		clear(other.nums)
		clear(other.short)
		clear(other.long)
	}
	clear(w.trades) // drop the id strings
	trades, tlog := w.trades[:0], w.tlog[:0]
	*w = window{nums: nums, other: other, unsaved: unsaved, fid: fid, lid: lid,
		trades: trades, tlog: tlog}
}
