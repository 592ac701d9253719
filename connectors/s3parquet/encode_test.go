package s3parquet

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
)

// TestEncodeReadBack writes files that need several pages per column, many
// row groups and dictionaries larger than one value (a file of the lake
// holds one series; encode must still be right for any candles), and reads
// them back with parquet-go: every value exactly, each row group's
// statistics, and the same bytes for the same candles.
func TestEncodeReadBack(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	const n = 20_000 // > 64 KiB of every fixed-width column: several pages
	cs := make([]candle.Candle, n)
	for i := range cs {
		o := start + int64(i)*1000
		px := decimal.FromRaw(0, r.Uint64()>>r.IntN(64))
		if r.IntN(5) == 0 {
			px = px.Neg()
		}
		vol := decimal.SumOf(decimal.FromRaw(0, r.Uint64()>>r.IntN(64)))
		if r.IntN(50) == 0 { // wider than any DECIMAL(38)
			vol = decimal.MustParseSum("57896044618658097711551615169109354219337.741413091334446874")
		}
		cs[i] = candle.Candle{Symbol: fmt.Sprintf("S%02d", r.IntN(40)), Timeframe: []string{"1s", "1m"}[r.IntN(2)],
			OpenTime: o, CloseTime: o + 1000, Open: px, High: px, Low: px, Close: px,
			Volume: vol, QuoteVolume: decimal.SumOf(px), Trades: r.Int64N(1 << 40), Gap: r.IntN(3) == 0}
	}
	for _, tc := range []struct{ rows, groupRows int }{{n, 100_000}, {n, 7_001}, {1, 100}, {9, 4}} {
		cs := cs[:tc.rows]
		data, err := encode(cs, tc.groupRows)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := encode(cs, tc.groupRows)
		if !bytes.Equal(data, again) {
			t.Fatalf("%d rows: two encodes of the same candles differ", tc.rows)
		}
		back, err := Decode(data)
		if err != nil || len(back) != len(cs) {
			t.Fatalf("%d rows: decoded %d, %v", tc.rows, len(back), err)
		}
		for i := range cs {
			if !back[i].Equal(&cs[i]) {
				t.Fatalf("%d rows: row %d: got %+v, want %+v", tc.rows, i, back[i], cs[i])
			}
		}
		f, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatal(err)
		}
		groups := f.Metadata().RowGroups
		if want := (tc.rows + tc.groupRows - 1) / tc.groupRows; len(groups) != want {
			t.Fatalf("%d rows in groups of %d: %d row groups, want %d", tc.rows, tc.groupRows, len(groups), want)
		}
		for g, rg := range groups {
			first := g * tc.groupRows
			last := min(first+tc.groupRows, tc.rows) - 1
			st := rg.Columns[colOpenTime].MetaData.Statistics
			if lo, hi := int64(binary.LittleEndian.Uint64(st.MinValue)), int64(binary.LittleEndian.Uint64(st.MaxValue)); lo != cs[first].OpenTime || hi != cs[last].OpenTime {
				t.Errorf("row group %d: open_time statistics %d..%d, want %d..%d", g, lo, hi, cs[first].OpenTime, cs[last].OpenTime)
			}
			lo, hi := cs[first].Close, cs[first].Close
			for _, c := range cs[first : last+1] {
				lo, hi = minDec(lo, c.Close), maxDec(hi, c.Close)
			}
			st = rg.Columns[colClose].MetaData.Statistics
			if l, h := enc128(lo), enc128(hi); !bytes.Equal(st.MinValue, l[:]) || !bytes.Equal(st.MaxValue, h[:]) {
				t.Errorf("row group %d: close statistics wrong: %x..%x, want %x..%x", g, st.MinValue, st.MaxValue, l, h)
			}
		}
		if tc.rows == n && tc.groupRows == 100_000 {
			if pages := countPages(t, f, colClose); pages < 4 {
				t.Errorf("close column of %d rows in %d pages, want several (pages of at most %d bytes)", n, pages, pageBytes)
			}
		}
	}
}

func minDec(a, b decimal.Decimal) decimal.Decimal {
	if b.Cmp(a) < 0 {
		return b
	}
	return a
}

func maxDec(a, b decimal.Decimal) decimal.Decimal {
	if b.Cmp(a) > 0 {
		return b
	}
	return a
}

func countPages(t *testing.T, f *parquet.File, col int) int {
	pages := f.RowGroups()[0].ColumnChunks()[col].Pages()
	defer pages.Close()
	n := 0
	for {
		p, err := pages.ReadPage()
		if err != nil {
			return n
		}
		parquet.Release(p)
		n++
	}
}

// BenchmarkEncode: one lake object of rows 1m candles (48: the objects of
// BenchmarkSinkVsIdeal; 1440: a whole day), by the package's column writer
// and, for comparison, by parquet-go's generic row writer with the options
// the package used before it.
func BenchmarkEncode(b *testing.B) {
	for _, rows := range []int{48, 1440} {
		cs := benchCandles(rows)
		b.Run(fmt.Sprintf("kandle/%d", rows), func(b *testing.B) {
			e, err := newEncoder(1)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				if _, err := e.encode(cs, 100_000); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
		b.Run(fmt.Sprintf("parquet-go/%d", rows), func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				var buf bytes.Buffer
				w := parquet.NewGenericWriter[row](&buf, parquet.Compression(&parquet.Zstd),
					parquet.MaxRowsPerRowGroup(100_000), parquet.PageBufferSize(pageBytes), parquet.CreatedBy("kandle", "", ""))
				rs := make([]row, len(cs))
				for i := range cs {
					c := &cs[i]
					rs[i] = row{rowV3: rowV3{rowV2: rowV2{Symbol: c.Symbol, Timeframe: c.Timeframe, OpenTime: c.OpenTime, CloseTime: c.CloseTime,
						Open: enc128(c.Open), High: enc128(c.High), Low: enc128(c.Low), Close: enc128(c.Close),
						Volume: c.Volume.String(), QuoteVolume: c.QuoteVolume.String(), Trades: c.Trades, Gap: c.Gap}}}
				}
				if _, err := w.Write(rs); err != nil {
					b.Fatal(err)
				}
				if err := w.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// benchCandles: rows 1m candles of one series, as in BenchmarkSinkVsIdeal.
func benchCandles(rows int) []candle.Candle {
	day := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	px := decimal.MustParse("65000.123456789")
	cs := make([]candle.Candle, rows)
	for m := range cs {
		o := day + int64(m)*60_000
		cs[m] = candle.Candle{Symbol: "SYM001/USDT", Timeframe: "1m", OpenTime: o, CloseTime: o + 60_000,
			Open: px, High: px, Low: px, Close: px, Volume: decimal.SumOf(decimal.FromInt(int64(m))), QuoteVolume: decimal.SumOf(px), Trades: int64(m + 1)}
	}
	return cs
}
