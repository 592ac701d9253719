package engine

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
)

func slabCandle(i int, wide bool) candle.Candle {
	c := candle.Candle{Symbol: fmt.Sprintf("SYM%04d", i), Timeframe: "1m", OpenTime: int64(i) * 60000, CloseTime: int64(i+1) * 60000,
		Open: decimal.MustParse("65000.12345678"), High: decimal.MustParse("65010.5"), Low: decimal.MustParse("64990.00000001"),
		Close: decimal.MustParse("65001.25"), Volume: decimal.MustParseSum("1234.56789012"), QuoteVolume: decimal.MustParseSum("80246812.12345678"),
		Trades: int64(i)}
	if wide { // longer than the room kept for one candle (each 0xff is written as \u00ff): AppendJSON allocates it on its own
		c.Symbol = strings.Repeat("\xff", 300) + c.Symbol
		c.QuoteVolume = decimal.MustParseSum("9" + strings.Repeat("8", 60) + ".123456789012345678901234567890123456")
	}
	return c
}

// Every record and every byte the slab hands out is its own: after many
// candles and changelog entries (wide ones among them, across chunk
// boundaries), each record still holds exactly the key and JSON it was
// given, and appending to a key or value cannot reach the next one.
func TestOutSlabRecordsAreDistinct(t *testing.T) {
	var o outSlab
	type want struct{ key, val []byte }
	var recs []*struct{ key, val []byte }
	var wants []want
	seen := map[any]bool{}
	for i := range 3000 {
		c := slabCandle(i, i%97 == 0)
		r := o.candle("c.1m", &c, false)
		if seen[r] {
			t.Fatalf("record %d handed out twice", i)
		}
		seen[r] = true
		if r.Topic != "c.1m" || cap(r.Key) != len(r.Key) || cap(r.Value) != len(r.Value) {
			t.Fatalf("record %d: topic %q, key cap %d/%d, value cap %d/%d", i, r.Topic, len(r.Key), cap(r.Key), len(r.Value), cap(r.Value))
		}
		recs = append(recs, &struct{ key, val []byte }{r.Key, r.Value})
		wants = append(wants, want{[]byte(c.Symbol), c.AppendJSON(nil)})
		k := o.bytes(keyPrefix, []byte(c.Symbol))
		v := o.bytes(nil, bytes.Repeat([]byte{byte(i)}, i%200))
		recs = append(recs, &struct{ key, val []byte }{k, v})
		wants = append(wants, want{append([]byte("p"), c.Symbol...), bytes.Repeat([]byte{byte(i)}, i%200)})
		_ = append(r.Key, "overwrite"...) // must not reach anything handed out later
		_ = append(k, "overwrite"...)
	}
	for i, r := range recs {
		if !bytes.Equal(r.key, wants[i].key) || !bytes.Equal(r.val, wants[i].val) {
			t.Fatalf("entry %d changed after it was handed out:\nkey %q\nval %q\nwant %q\n     %q", i, r.key, r.val, wants[i].key, wants[i].val)
		}
	}
}

// Producing a candle costs no allocation of its own: the slab's chunks are
// shared by hundreds of records (before, the record, its key and its JSON
// were three allocations per candle).
func TestOutSlabAllocations(t *testing.T) {
	var o outSlab
	c := slabCandle(42, false)
	n := testing.AllocsPerRun(10000, func() { _ = o.candle("c.1m", &c, false) })
	if n > 0.05 {
		t.Errorf("%.3f allocations per candle, want at most 0.05 (one chunk per ~%d candles)", n, slabRecords)
	}
}
