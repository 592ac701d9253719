package engine

import (
	"bytes"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/candle"
)

// outSlab hands out the records a live stage produces, and their key and
// value bytes, from chunks shared by many records: one allocation per
// slabRecords records and per slabBytes bytes instead of three or four per
// candle (the record, its key, its JSON, and before that a promise).
//
// Ownership: the client keeps a produced record, and reads its Key and
// Value, until the record's promise has run, so nothing handed out is
// ever written again or handed out twice. A chunk is never reused: when it
// is full the next one is allocated, and the old one is freed by the
// garbage collector once the client (and the stage's pending changelog
// entries) let go of the last record or bytes in it. At most one chunk of
// each kind is partly used at a time.
type outSlab struct {
	recs []kgo.Record
	buf  []byte
}

const (
	slabRecords = 256
	slabBytes   = 64 << 10
	// candleReserve is the room kept for one candle's JSON beyond its
	// names: AppendJSON's own estimate with decimals of up to 20 digits is
	// ~330 bytes, ~430 with taker volumes and ~470 with trade ids too; a
	// longer candle still fits, it just grows on its own.
	candleReserve = 640
)

// record returns a zero record that no one else holds.
func (o *outSlab) record() *kgo.Record {
	if len(o.recs) == cap(o.recs) {
		o.recs = make([]kgo.Record, 0, slabRecords)
	}
	o.recs = o.recs[:len(o.recs)+1]
	return &o.recs[len(o.recs)-1]
}

// reserve makes sure the current byte chunk has n bytes free.
func (o *outSlab) reserve(n int) {
	if cap(o.buf)-len(o.buf) < n {
		o.buf = make([]byte, 0, max(slabBytes, n))
	}
}

// bytes returns a copy of b with prefix in front, capped so that no append
// to it can reach the bytes handed out after it.
func (o *outSlab) bytes(prefix []byte, b []byte) []byte {
	n := len(prefix) + len(b)
	o.reserve(n)
	start := len(o.buf)
	o.buf = append(append(o.buf, prefix...), b...)
	return o.buf[start:len(o.buf):len(o.buf)]
}

// candle returns the record of c on topic: value c's JSON
// (candle.AppendJSON), key c.Symbol, or with byWindow (a stage with a
// revision horizon) the window key symbol@open_time (windowKey), both in
// the current chunk.
func (o *outSlab) candle(topic string, c *candle.Candle, byWindow bool) *kgo.Record {
	o.reserve(len(c.Symbol)*2 + len(c.Timeframe)*2 + candleReserve)
	var key []byte
	if byWindow {
		start := len(o.buf)
		o.buf = appendWindowKey(o.buf, c)
		key = o.buf[start:len(o.buf):len(o.buf)]
	} else {
		key = o.bytes(nil, []byte(c.Symbol))
	}
	tail := o.buf[len(o.buf):cap(o.buf)]
	v := c.AppendJSON(tail[:0])
	if &v[0] == &tail[0] { // written in place: the chunk moves past it
		o.buf = o.buf[:len(o.buf)+len(v)]
	} // else AppendJSON outgrew the room and allocated v on its own
	r := o.record()
	r.Topic, r.Key, r.Value = topic, key, v[:len(v):len(v)]
	return r
}

// appendWindowKey appends the record key of c on the output topic of a
// stage with a revision horizon: symbol@open_time, the open time in Unix
// milliseconds. Every revision of a window has the same key, so a compacted
// topic keeps the newest; the open time is only digits, so the last '@'
// splits the key even when the symbol holds one (windowKeySymbol).
func appendWindowKey(b []byte, c *candle.Candle) []byte {
	b = append(append(b, c.Symbol...), '@')
	return strconv.AppendInt(b, c.OpenTime, 10)
}

// windowKeySymbol returns the symbol part of a window key (appendWindowKey),
// or key itself when it is not one (no '@' followed by digits only, with
// an optional minus sign).
func windowKeySymbol(key []byte) []byte {
	i := bytes.LastIndexByte(key, '@')
	digits := key[i+1:]
	if len(digits) > 1 && digits[0] == '-' { // an open time before 1970
		digits = digits[1:]
	}
	if i < 0 || len(digits) == 0 {
		return key
	}
	for _, d := range digits {
		if d < '0' || d > '9' {
			return key
		}
	}
	return key[:i]
}
