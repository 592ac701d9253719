package s3parquet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
)

// colInputs are the property inputs of the column reader's tests, each
// one lake object's candles in open_time order: the fixtures' series (odd
// symbols, taker volumes and trade ids on every other one, gap candles),
// revisions up to the largest rev, calendar timeframes, a one-candle file,
// random wide decimals over many row groups and pages, and a file not
// sorted by open_time.
func colInputs(t testing.TB) map[string][]candle.Candle {
	in := map[string][]candle.Candle{}
	for _, c := range gen("BTC/USDT", "sol usdt+perp", "ü/€ %2F", "") {
		k := PartitionPath(c.Timeframe, c.Symbol, c.OpenTime)
		in[k] = append(in[k], c)
	}
	for k := range in {
		slices.SortFunc(in[k], func(a, b candle.Candle) int { return int(a.OpenTime - b.OpenTime) })
	}
	revs := slices.Clone(in[PartitionPath("1m", "BTC/USDT", dayCandles()[0].OpenTime)])
	for i := range revs {
		revs[i].Rev = uint32(i % 4)
	}
	revs[len(revs)-1].Rev = math.MaxUint32
	in["revisions"] = revs
	for _, tf := range []string{"1w", "1M"} {
		t1, err := candle.ParseTimeframe(tf, nil)
		if err != nil {
			t.Fatal(err)
		}
		var cs []candle.Candle
		o := t1.Start(time.Date(2024, 1, 15, 0, 0, 0, 0, time.UTC).UnixMilli())
		for i := range 30 {
			px := decimal.FromInt(int64(100 + i))
			cs = append(cs, candle.Candle{Symbol: "CAL", Timeframe: tf, OpenTime: o, CloseTime: t1.End(o),
				Open: px, High: px, Low: px, Close: px, Volume: decimal.SumOf(px), QuoteVolume: decimal.SumOf(px), Trades: int64(i), Gap: i%3 == 0})
			o = t1.End(o)
		}
		in["calendar "+tf] = cs
	}
	in["one"] = revs[:1]
	r := rand.New(rand.NewPCG(3, 4))
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	wide := make([]candle.Candle, 20_000) // several pages of every column
	for i := range wide {
		o := start + int64(i)*1000
		px := decimal.FromRaw(0, r.Uint64()>>r.IntN(64))
		if r.IntN(5) == 0 {
			px = px.Neg()
		}
		vol := decimal.SumOf(decimal.FromRaw(0, r.Uint64()>>r.IntN(64)))
		if r.IntN(50) == 0 {
			vol = decimal.MustParseSum("57896044618658097711551615169109354219337.741413091334446874")
		}
		c := candle.Candle{Symbol: "RND", Timeframe: "1s", OpenTime: o, CloseTime: o + 1000,
			Open: px, High: px, Low: px, Close: px, Volume: vol, QuoteVolume: decimal.SumOf(px), Trades: r.Int64N(1 << 40), Gap: r.IntN(3) == 0,
			Rev: r.Uint32N(3)}
		if r.IntN(2) == 0 {
			c.Taker, c.TakerBuyVolume, c.TakerBuyQuoteVolume = true, vol, decimal.SumOf(px)
			c.FirstTradeID, c.LastTradeID = fmt.Sprint(r.Uint64()), fmt.Sprintf("id-%d", r.Uint32())
		}
		wide[i] = c
	}
	in["random"] = wide
	// Not sorted by open_time (kandle's files are; another writer's need
	// not be): ranges are filtered row by row.
	unsorted := slices.Clone(wide[:3000])
	r.Shuffle(len(unsorted), func(i, j int) { unsorted[i], unsorted[j] = unsorted[j], unsorted[i] })
	in["unsorted"] = unsorted
	return in
}

// TestColumnReaderRoundTrip writes every input with the column writer (in
// one row group, and in row groups of 7 and of 1,000 rows) and reads it
// back with the column reader (never parquet-go's: a fallback fails the
// test): every candle exactly, the same as parquet-go's row reader, and
// every range of open times the same as filtering the candles.
func TestColumnReaderRoundTrip(t *testing.T) {
	d, err := newColDecoder(1)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	r := rand.New(rand.NewPCG(5, 6))
	for name, cs := range colInputs(t) {
		for _, groupRows := range []int{100_000, 1000, 7} {
			if groupRows == 7 && len(cs) > 2000 {
				continue
			}
			data, err := encode(cs, groupRows)
			if err != nil {
				t.Fatal(err)
			}
			what := fmt.Sprintf("%s (%d rows, groups of %d)", name, len(cs), groupRows)
			got, err := d.decodeBytes(data)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			same(t, what, got, cs)
			generic, err := decodeGeneric(data)
			if err != nil {
				t.Fatalf("%s: parquet-go: %v", what, err)
			}
			same(t, what+" against parquet-go", got, generic)
			for range 20 {
				a, b := cs[r.IntN(len(cs))].OpenTime, cs[r.IntN(len(cs))].OpenTime+int64(r.IntN(3))-1
				if r.IntN(4) == 0 {
					a = math.MinInt64
				}
				var want []candle.Candle
				for _, c := range cs {
					if c.OpenTime >= a && c.OpenTime < b {
						c.Symbol, c.Timeframe = "", ""
						want = append(want, c)
					}
				}
				got, err := d.read(memSource(data), int64(len(data)), readRange{from: a, to: b})
				if err != nil {
					t.Fatalf("%s [%d, %d): %v", what, a, b, err)
				}
				same(t, fmt.Sprintf("%s [%d, %d)", what, a, b), got, want)
			}
		}
	}
}

// fileLake stores data as the 1m object of symbol's day of openTime in a
// file lake at dir, and returns a Reader of the lake and the partition.
func fileLake(t testing.TB, dir, symbol string, openTime int64, data []byte) (*Reader, partition) {
	t.Helper()
	p := partition{key: PartitionPath("1m", symbol, openTime), size: int64(len(data))}
	path := filepath.Join(dir, filepath.FromSlash(p.key))
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(context.Background(), Config{URL: "file://" + dir})
	if err != nil {
		t.Fatal(err)
	}
	return r, p
}

func memSource(data []byte) source {
	return func(off, n int64) ([]byte, error) {
		if off < 0 || n < 0 || off+n > int64(len(data)) {
			return nil, fmt.Errorf("bytes %d+%d of %d", off, n, len(data))
		}
		return data[off : off+n], nil
	}
}

// TestColumnReaderOlderLayouts: the files parquet-go's generic writer made
// for the sink before the column writer (its options then: zstd; also
// snappy, uncompressed, data pages v1; strings DELTA_LENGTH_BYTE_ARRAY),
// in each layout the package has
// had, are read by the column reader, not by the fallback, and agree with
// parquet-go's row reader.
func TestColumnReaderOlderLayouts(t *testing.T) {
	d, err := newColDecoder(1)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var cs []candle.Candle
	for _, c := range gen("OLD", "OLDER") {
		if c.Timeframe == "1m" {
			cs = append(cs, c)
		}
	}
	cs = cs[:3000] // both symbols, two days
	slices.SortStableFunc(cs, func(a, b candle.Candle) int { return int(a.OpenTime - b.OpenTime) })
	v3 := func(c *candle.Candle) rowV3 {
		return rowV3{rowV2: v2(c), TakerBuyBase: takerText(c.Taker, c.TakerBuyVolume), TakerBuyQuote: takerText(c.Taker, c.TakerBuyQuoteVolume),
			FirstTradeID: c.FirstTradeID, LastTradeID: c.LastTradeID}
	}
	layouts := map[string]func(opts ...parquet.WriterOption) []byte{
		"rev": func(opts ...parquet.WriterOption) []byte {
			return writeRows(t, cs, func(c *candle.Candle) row { return row{rowV3: v3(c), Rev: int64(c.Rev)} }, opts)
		},
		"v3": func(opts ...parquet.WriterOption) []byte { return writeRows(t, cs, v3, opts) },
		"v2": func(opts ...parquet.WriterOption) []byte { return writeRows(t, cs, v2, opts) },
		"v1": func(opts ...parquet.WriterOption) []byte {
			return writeRows(t, cs, func(c *candle.Candle) rowV1 {
				v, _ := c.Volume.Decimal()
				q, _ := c.QuoteVolume.Decimal()
				return rowV1{Symbol: c.Symbol, Timeframe: c.Timeframe, OpenTime: c.OpenTime, CloseTime: c.CloseTime,
					Open: enc128(c.Open), High: enc128(c.High), Low: enc128(c.Low), Close: enc128(c.Close),
					Volume: enc128(v), QuoteVolume: enc128(q), Trades: c.Trades, Gap: c.Gap}
			}, opts)
		},
	}
	for name, write := range layouts {
		for oname, opts := range map[string][]parquet.WriterOption{
			"zstd (the old sink)": {parquet.Compression(&parquet.Zstd), parquet.MaxRowsPerRowGroup(1000), parquet.PageBufferSize(pageBytes), parquet.CreatedBy("kandle", "", "")},
			"snappy":              {parquet.Compression(&parquet.Snappy)},
			"uncompressed":        {parquet.PageBufferSize(4096)},
			"data pages v1":       {parquet.DataPageVersion(1), parquet.Compression(&parquet.Zstd)},
		} {
			data := write(opts...)
			got, err := d.decodeBytes(data)
			if err != nil {
				t.Fatalf("%s, %s: %v", name, oname, err)
			}
			want, err := decodeGeneric(data)
			if err != nil {
				t.Fatal(err)
			}
			same(t, name+", "+oname, got, want)
			if len(got) != len(cs) {
				t.Fatalf("%s: %d candles, want %d", name, len(got), len(cs))
			}
		}
	}
}

func v2(c *candle.Candle) rowV2 {
	return rowV2{Symbol: c.Symbol, Timeframe: c.Timeframe, OpenTime: c.OpenTime, CloseTime: c.CloseTime,
		Open: enc128(c.Open), High: enc128(c.High), Low: enc128(c.Low), Close: enc128(c.Close),
		Volume: c.Volume.String(), QuoteVolume: c.QuoteVolume.String(), Trades: c.Trades, Gap: c.Gap}
}

func writeRows[R any](t *testing.T, cs []candle.Candle, conv func(*candle.Candle) R, opts []parquet.WriterOption) []byte {
	t.Helper()
	rows := make([]R, len(cs))
	for i := range cs {
		rows[i] = conv(&cs[i])
	}
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[R](&buf, opts...)
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// optionalRow is a file kandle never wrote: OPTIONAL columns.
type optionalRow struct {
	Symbol      string   `parquet:"symbol,optional"`
	Timeframe   string   `parquet:"timeframe,optional"`
	OpenTime    int64    `parquet:"open_time,optional"`
	CloseTime   int64    `parquet:"close_time"`
	Open        [16]byte `parquet:"open"`
	High        [16]byte `parquet:"high"`
	Low         [16]byte `parquet:"low"`
	Close       [16]byte `parquet:"close"`
	Volume      string   `parquet:"volume"`
	QuoteVolume string   `parquet:"quote_volume"`
	Trades      int64    `parquet:"trades"`
	Gap         bool     `parquet:"gap"`
}

// TestColumnReaderOtherLayouts: a file of another layout (OPTIONAL columns,
// another codec) is not the column reader's: it says so (errLayout), and
// Decode and the Reader read it with parquet-go's reader instead.
func TestColumnReaderOtherLayouts(t *testing.T) {
	d, err := newColDecoder(1)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var cs []candle.Candle
	for _, c := range gen("OTHER") {
		if c.Timeframe == "1m" && len(cs) < 50 {
			c.Taker, c.TakerBuyVolume, c.TakerBuyQuoteVolume, c.FirstTradeID, c.LastTradeID = false, decimal.Sum{}, decimal.Sum{}, "", ""
			cs = append(cs, c)
		}
	}
	files := map[string][]byte{
		"optional columns": writeRows(t, cs, func(c *candle.Candle) optionalRow {
			r := v2(c)
			return optionalRow{r.Symbol, r.Timeframe, r.OpenTime, r.CloseTime, r.Open, r.High, r.Low, r.Close, r.Volume, r.QuoteVolume, r.Trades, r.Gap}
		}, nil),
		"gzip": writeRows(t, cs, v2, []parquet.WriterOption{parquet.Compression(&parquet.Gzip)}),
	}
	ctx := context.Background()
	tf, _ := candle.ParseTimeframe("1m", nil)
	for name, data := range files {
		if _, err := d.decodeBytes(data); !errors.Is(err, errLayout) {
			t.Fatalf("%s: column reader says %v, want errLayout", name, err)
		}
		got, err := Decode(data)
		if err != nil {
			t.Fatalf("%s: Decode: %v", name, err)
		}
		same(t, name+": Decode", got, cs)
		r, _ := fileLake(t, t.TempDir(), "OTHER", cs[0].OpenTime, data)
		if got, err = r.Candles(ctx, "OTHER", tf, cs[0].OpenTime, cs[len(cs)-1].CloseTime, 0, false); err != nil {
			t.Fatalf("%s: Reader: %v", name, err)
		}
		same(t, name+": Reader", got, cs)
	}
}

// TestColumnReaderReads: the Reader reads a small object (a day of 1m
// candles) in one request, and a larger one in two for a whole day (its
// tail, then the chunks before it), fewer bytes than the object for a
// short range.
func TestColumnReaderReads(t *testing.T) {
	ctx := context.Background()
	tf, _ := candle.ParseTimeframe("1m", nil)
	for _, tc := range []struct {
		name  string
		cs    []candle.Candle
		reads int64
	}{{"benchmark day", benchCandles(1440), 1}, {"fixture day", dayCandles(), 2}} {
		data, err := encode(tc.cs, 100_000)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := fileLake(t, t.TempDir(), tc.cs[0].Symbol, tc.cs[0].OpenTime, data)
		got, err := r.Candles(ctx, tc.cs[0].Symbol, tf, tc.cs[0].OpenTime, tc.cs[len(tc.cs)-1].CloseTime, 0, false)
		if err != nil {
			t.Fatal(err)
		}
		same(t, tc.name, got, tc.cs)
		reads, n := r.ReadStats()
		if reads != tc.reads || n > int64(len(data)) {
			t.Errorf("%s: %d reads of %d bytes for a %d-byte object; want %d reads", tc.name, reads, n, len(data), tc.reads)
		}
		t.Logf("%s: %d reads, %d of %d bytes", tc.name, reads, n, len(data))
	}
}

// colSeeds are small objects for the malformed-input tests: the writer's,
// with dictionaries, several row groups and pages, and parquet-go's.
func colSeeds(t testing.TB) [][]byte {
	var cs []candle.Candle
	for _, c := range gen("SEED", "S2") {
		if c.Timeframe == "1m" && len(cs) < 40 {
			cs = append(cs, c)
		}
	}
	slices.SortStableFunc(cs, func(a, b candle.Candle) int { return int(a.OpenTime - b.OpenTime) })
	a, err := encode(cs, 16)
	if err != nil {
		t.Fatal(err)
	}
	rows := make([]rowV2, len(cs[:20]))
	for i := range rows {
		rows[i] = v2(&cs[i])
	}
	var buf bytes.Buffer
	if err := parquet.Write(&buf, rows, parquet.Compression(&parquet.Zstd)); err != nil {
		t.Fatal(err)
	}
	return [][]byte{a, buf.Bytes()}
}

// TestColumnReaderMalformed reads every truncation of the seed objects and
// each with a byte changed (every byte of the last 2 KiB, the footer and
// the last pages; every 5th before): errors (errCorrupt or errLayout),
// never a panic, and a truncated object never reads.
func TestColumnReaderMalformed(t *testing.T) {
	d, err := newColDecoder(1)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, seed := range colSeeds(t) {
		for n := range len(seed) {
			if _, err := d.decodeBytes(seed[:n]); err == nil {
				t.Fatalf("a %d-byte prefix of a %d-byte object read without an error", n, len(seed))
			} else if !errors.Is(err, errCorrupt) && !errors.Is(err, errLayout) {
				t.Fatalf("a %d-byte prefix: %v, want errCorrupt or errLayout", n, err)
			}
		}
		b := slices.Clone(seed)
		for i := range b {
			if i%5 != 0 && i < len(b)-2048 {
				continue
			}
			for _, x := range []byte{0x01, 0xff} {
				b[i] ^= x
				if _, err := d.decodeBytes(b); err != nil && !errors.Is(err, errCorrupt) && !errors.Is(err, errLayout) {
					t.Fatalf("byte %d ^ %#x: %v, want errCorrupt or errLayout", i, x, err)
				}
				b[i] ^= x
			}
		}
	}
}

// FuzzColumnReader: any bytes give candles or an error, never a panic.
func FuzzColumnReader(f *testing.F) {
	for _, s := range colSeeds(f) {
		f.Add(s)
	}
	d, err := newColDecoder(1)
	if err != nil {
		f.Fatal(err)
	}
	defer d.Close()
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := d.decodeBytes(data); err != nil && !errors.Is(err, errCorrupt) && !errors.Is(err, errLayout) {
			t.Fatalf("%v, want errCorrupt or errLayout", err)
		}
	})
}

// BenchmarkColdRead: the Reader reading a whole day's object of 1m candles
// from a file lake, with the column reader (kandle) and with parquet-go's
// reader as before it (parquet-go), interleaved under -count; CPU per read,
// bytes and reads per object. Objects: the fixture day (taker volumes and
// trade ids in every row) and the day of BenchmarkAPIColdMonth's shape.
func BenchmarkColdRead(b *testing.B) {
	ctx := context.Background()
	for _, obj := range []struct {
		name string
		cs   []candle.Candle
	}{{"fixture-day", dayCandles()}, {"bench-day", benchCandles(1440)}} {
		data, err := encode(obj.cs, 100_000)
		if err != nil {
			b.Fatal(err)
		}
		r, p := fileLake(b, b.TempDir(), obj.cs[0].Symbol, obj.cs[0].OpenTime, data)
		from, to := obj.cs[0].OpenTime, obj.cs[len(obj.cs)-1].CloseTime
		for _, c := range []struct {
			name string
			read func(ctx context.Context, symbol, tf string, p partition, from, to int64) ([]candle.Candle, error)
		}{{"kandle", r.readPartition}, {"parquet-go", r.readPartitionGeneric}} {
			b.Run(obj.name+"/"+c.name, func(b *testing.B) {
				b.ReportAllocs()
				reads0, bytes0 := r.ReadStats()
				cpu0 := cpuTime()
				for b.Loop() {
					cs, err := c.read(ctx, obj.cs[0].Symbol, "1m", p, from, to)
					if err != nil || len(cs) != len(obj.cs) {
						b.Fatalf("%d candles, %v", len(cs), err)
					}
				}
				reads1, bytes1 := r.ReadStats()
				b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
				b.ReportMetric(float64(bytes1-bytes0)/float64(b.N), "bytes-read/op")
				b.ReportMetric(float64(reads1-reads0)/float64(b.N), "reads/op")
				b.ReportMetric(float64(len(data)), "object-bytes")
			})
		}
	}
}

// BenchmarkDecode: Decode (the sink's read of an object it merges into;
// the column reader, a zstd decoder of its own per call included) against
// parquet-go's row reader, on the fixture day's object.
func BenchmarkDecode(b *testing.B) {
	cs := dayCandles()
	data, err := encode(cs, 100_000)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		decode func([]byte) ([]candle.Candle, error)
	}{{"kandle", Decode}, {"parquet-go", decodeGeneric}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				if got, err := c.decode(data); err != nil || len(got) != len(cs) {
					b.Fatalf("%d candles, %v", len(got), err)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
