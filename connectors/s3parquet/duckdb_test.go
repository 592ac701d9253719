package s3parquet

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
	"github.com/kandle/kandle/internal/testkit"
)

// duckQuery asks DuckDB, in one run (each run starts Node), for: every row
// as text (r), the DuckDB type of every column plus an exact sum (t), and
// the Parquet schema of every leaf column with its chunks' codecs (s), and
// counts per series over the whole lake read as a Hive-partitioned dataset (h).
const duckQuery = `
SELECT 'r' AS k, epoch_ms(open_time) AS ord, to_json(x)::VARCHAR AS j FROM (
	SELECT symbol, timeframe, epoch_ms(open_time)::VARCHAR AS o, epoch_ms(close_time)::VARCHAR AS c,
		open::VARCHAR AS op, high::VARCHAR AS hi, low::VARCHAR AS lo, close::VARCHAR AS cl,
		volume::VARCHAR AS v, quote_volume::VARCHAR AS q, trades::VARCHAR AS n, gap,
		taker_buy_base_volume AS tb, taker_buy_quote_volume AS tq, first_trade_id AS fid, last_trade_id AS lid, open_time FROM t) x
UNION ALL
SELECT 't', 0, to_json(y)::VARCHAR FROM (
	SELECT typeof(symbol) AS symbol, typeof(timeframe) AS timeframe, typeof(open_time) AS open_time,
		typeof(close_time) AS close_time, typeof(open) AS open, typeof(high) AS high, typeof(low) AS low,
		typeof(close) AS close, typeof(volume) AS volume, typeof(quote_volume) AS quote_volume,
		typeof(trades) AS trades, typeof(gap) AS gap, (SELECT sum(close)::VARCHAR FROM t) AS sum FROM t LIMIT 1) y
UNION ALL
SELECT 's', 0, to_json(z)::VARCHAR FROM (
	SELECT s.name, s.type, s.type_length::VARCHAR AS len, s.logical_type::VARCHAR AS logical,
		s.scale::VARCHAR AS scale, s.precision::VARCHAR AS precision, string_agg(DISTINCT m.compression) AS codecs
	FROM parquet_schema('FILE') s LEFT JOIN parquet_metadata('FILE') m ON m.path_in_schema = s.name
	WHERE s.num_children IS NULL OR s.num_children = 0 GROUP BY ALL) z
UNION ALL
SELECT 'h', 0, to_json(w)::VARCHAR FROM (
	SELECT symbol, timeframe, count(*)::VARCHAR AS n, count(DISTINCT open_time)::VARCHAR AS d
	FROM read_parquet('LAKE/**/*.parquet', hive_partitioning = true) GROUP BY ALL) w
ORDER BY k, ord`

// TestDuckDB reads a lake object with an independent Parquet reader
// (DuckDB, offline) and checks every value, the logical types and that
// every column chunk is ZSTD-compressed; kandle's column reader must read
// the same values.
func TestDuckDB(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s, err := New(ctx, Config{URL: "file://" + dir}, WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	all := gen("BTC/USDT")
	var want []candle.Candle // the 1m candles of the middle day
	for _, c := range all {
		if c.Timeframe == "1m" && dayOf(c.OpenTime) == dayOf(all[0].OpenTime)+1 {
			want = append(want, c)
		}
	}
	// Prices at the edges of DECIMAL(38,18) and one negative; the issue's
	// exact quote volumes: 36 places, and more digits than any DECIMAL(38).
	want[7].High = decimal.MustParse("99999999999999999999.999999999999999999")
	want[8].Low = decimal.MustParse("-0.000000000000000001")
	want[9].Low = decimal.MustParse("0.000000000000000001")
	want[5].QuoteVolume = decimal.MustParseSum("515399.785058469582700587000000000000000001")
	want[6].Volume = decimal.MustParseSum("340282366920938463463.374607431768211454")
	want[6].QuoteVolume = decimal.MustParseSum("57896044618658097711551615169109354219337.741413091334446874")
	want[10].QuoteVolume = decimal.MustParseSum("0.000000000000000000000000000000000001")
	if err := s.Write(ctx, want); err != nil {
		t.Fatal(err)
	}
	// More series, so the Hive-partitioned query over the lake has work.
	others := gen("sol usdt+perp")[:700]
	if err := s.Write(ctx, others); err != nil {
		t.Fatal(err)
	}
	lakeCounts := map[[2]string]int{}
	for _, c := range append(others, want...) {
		lakeCounts[[2]string{c.Symbol, c.Timeframe}]++
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Copy the object out of its Hive folders so the view t has only the
	// file's own columns.
	data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(PartitionPath("1m", "BTC/USDT", want[0].OpenTime))))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "day.parquet")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}

	byKind := map[string][]string{}
	for _, line := range testkit.DuckDB(t, file, strings.NewReplacer("FILE", file, "LAKE", dir).Replace(duckQuery)) {
		var out struct{ K, J string }
		if err := json.Unmarshal([]byte(line), &out); err != nil {
			t.Fatalf("duckdb line %s: %v", line, err)
		}
		byKind[out.K] = append(byKind[out.K], out.J)
	}

	// Every value, exactly.
	rows := byKind["r"]
	if len(rows) != len(want) {
		t.Fatalf("duckdb read %d rows, want %d", len(rows), len(want))
	}
	for i, line := range rows {
		var r struct {
			Symbol, Timeframe, O, C, Op, Hi, Lo, Cl, V, Q, N string
			TB, TQ, FID, LID                                 string
			Gap                                              bool
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("row %d %s: %v", i, line, err)
		}
		dec := func(s string) decimal.Decimal {
			d, err := decimal.Parse([]byte(s))
			if err != nil {
				t.Fatalf("row %d: decimal %q: %v", i, s, err)
			}
			return d
		}
		num := func(s string) int64 {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				t.Fatalf("row %d: int %q: %v", i, s, err)
			}
			return n
		}
		sum := func(s string) decimal.Sum {
			d, err := decimal.ParseSum([]byte(s))
			if err != nil {
				t.Fatalf("row %d: decimal %q: %v", i, s, err)
			}
			return d
		}
		got := candle.Candle{Symbol: r.Symbol, Timeframe: r.Timeframe, OpenTime: num(r.O), CloseTime: num(r.C),
			Open: dec(r.Op), High: dec(r.Hi), Low: dec(r.Lo), Close: dec(r.Cl), Volume: sum(r.V), QuoteVolume: sum(r.Q),
			Trades: num(r.N), Gap: r.Gap, FirstTradeID: r.FID, LastTradeID: r.LID}
		if r.TB != "" { // "": the candle has no taker volumes
			got.Taker, got.TakerBuyVolume, got.TakerBuyQuoteVolume = true, sum(r.TB), sum(r.TQ)
		}
		if !got.Equal(&want[i]) {
			t.Fatalf("row %d: duckdb says\n %+v\nwant\n %+v\n(%s)", i, got, want[i], line)
		}
	}

	// kandle's column reader reads the same object to the same candles.
	d, err := newColDecoder(1)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	cols, err := d.decodeBytes(data)
	if err != nil {
		t.Fatal(err)
	}
	same(t, "the column reader, against DuckDB", cols, want)

	// DuckDB's types, and an exact sum in DuckDB's own DECIMAL arithmetic.
	var types map[string]string
	if len(byKind["t"]) != 1 || json.Unmarshal([]byte(byKind["t"][0]), &types) != nil {
		t.Fatalf("typeof: %q", byKind["t"])
	}
	for col, w := range map[string]string{"symbol": "VARCHAR", "timeframe": "VARCHAR",
		"open_time": "TIMESTAMP WITH TIME ZONE", "close_time": "TIMESTAMP WITH TIME ZONE",
		"open": "DECIMAL(38,18)", "high": "DECIMAL(38,18)", "low": "DECIMAL(38,18)", "close": "DECIMAL(38,18)",
		"volume": "VARCHAR", "quote_volume": "VARCHAR", "trades": "BIGINT", "gap": "BOOLEAN"} {
		if types[col] != w {
			t.Errorf("column %s: duckdb type %q, want %q", col, types[col], w)
		}
	}
	var sum decimal.Decimal
	for _, c := range want {
		sum, _ = sum.Add(c.Close)
	}
	if d, err := decimal.Parse([]byte(types["sum"])); err != nil || d != sum {
		t.Errorf("duckdb sum(close) = %s, want %s", types["sum"], sum)
	}

	// The Parquet schema (physical and logical types) and codecs.
	schema := map[string]map[string]string{}
	for _, l := range byKind["s"] {
		var m map[string]string
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("parquet_schema row %s: %v", l, err)
		}
		schema[m["name"]] = m
		if m["codecs"] != "ZSTD" {
			t.Errorf("column %s compressed with %q, want ZSTD", m["name"], m["codecs"])
		}
	}
	for _, col := range []string{"volume", "quote_volume", "taker_buy_base_volume", "taker_buy_quote_volume", "first_trade_id", "last_trade_id"} {
		if m := schema[col]; m["type"] != "BYTE_ARRAY" || !strings.Contains(m["logical"], "StringType") {
			t.Errorf("parquet_schema %s = %v, want BYTE_ARRAY STRING (exact decimal text)", col, m)
		}
	}
	for _, col := range []string{"open", "high", "low", "close"} {
		m := schema[col]
		if m["type"] != "FIXED_LEN_BYTE_ARRAY" || m["len"] != "16" || m["scale"] != "18" || m["precision"] != "38" ||
			!strings.Contains(m["logical"], "DecimalType") {
			t.Errorf("parquet_schema %s = %v, want FIXED_LEN_BYTE_ARRAY(16) DECIMAL(38,18)", col, m)
		}
	}
	for _, col := range []string{"open_time", "close_time"} {
		m := schema[col]
		if m["type"] != "INT64" || !contains(m["logical"], "TimestampType", "isAdjustedToUTC=1", "MILLIS") {
			t.Errorf("parquet_schema %s = %v, want INT64 TIMESTAMP(MILLIS, UTC)", col, m)
		}
	}
	if len(schema) != 17 {
		t.Errorf("parquet_schema has %d leaf columns, want 17: %v", len(schema), byKind["s"])
	}

	// The whole lake as a Hive dataset: symbols come back unescaped
	// ("sol usdt+perp" from folder symbol=sol%20usdt%2Bperp), each candle once.
	got := map[[2]string]int{}
	for _, l := range byKind["h"] {
		var h struct{ Symbol, Timeframe, N, D string }
		if err := json.Unmarshal([]byte(l), &h); err != nil {
			t.Fatal(err)
		}
		if h.N != h.D {
			t.Errorf("%s %s: %s rows but %s distinct open times", h.Symbol, h.Timeframe, h.N, h.D)
		}
		got[[2]string{h.Symbol, h.Timeframe}], _ = strconv.Atoi(h.N)
	}
	if len(got) != len(lakeCounts) {
		t.Errorf("lake series %v, want %v", got, lakeCounts)
	}
	for k, n := range lakeCounts {
		if got[k] != n {
			t.Errorf("lake %v: %d candles, want %d", k, got[k], n)
		}
	}
}

func contains(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// Files written before volumes became exact text (every decimal a
// DECIMAL(38,18)) still decode, so merging into an older day keeps it.
func TestDecodeV1Layout(t *testing.T) {
	want := gen("OLD")[:3]
	old := make([]rowV1, len(want))
	for i, c := range want {
		want[i].Taker, want[i].TakerBuyVolume, want[i].TakerBuyQuoteVolume = false, decimal.Sum{}, decimal.Sum{}
		want[i].FirstTradeID, want[i].LastTradeID = "", ""
		v, _ := c.Volume.Decimal()
		q, _ := c.QuoteVolume.Decimal()
		old[i] = rowV1{Symbol: c.Symbol, Timeframe: c.Timeframe, OpenTime: c.OpenTime, CloseTime: c.CloseTime,
			Open: enc128(c.Open), High: enc128(c.High), Low: enc128(c.Low), Close: enc128(c.Close),
			Volume: enc128(v), QuoteVolume: enc128(q), Trades: c.Trades, Gap: c.Gap}
	}
	var buf bytes.Buffer
	if err := parquet.Write(&buf, old); err != nil {
		t.Fatal(err)
	}
	got, err := Decode(buf.Bytes())
	if err != nil || len(got) != len(want) {
		t.Fatalf("Decode(v1) = %d candles, %v", len(got), err)
	}
	for i := range got {
		if !got[i].Equal(&want[i]) {
			t.Fatalf("row %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

// Files written before taker volumes and trade ids (the first twelve
// columns only) still decode and read (Decode, and the ranged reader of
// kandle serve), as candles with neither.
func TestV2Layout(t *testing.T) {
	ctx := context.Background()
	var want []candle.Candle
	var old []rowV2
	for _, c := range gen("OLD") {
		if c.Timeframe != "1m" || len(want) == 5 {
			continue
		}
		c.Taker, c.TakerBuyVolume, c.TakerBuyQuoteVolume, c.FirstTradeID, c.LastTradeID = false, decimal.Sum{}, decimal.Sum{}, "", ""
		want = append(want, c)
		old = append(old, rowV2{Symbol: c.Symbol, Timeframe: c.Timeframe, OpenTime: c.OpenTime, CloseTime: c.CloseTime,
			Open: enc128(c.Open), High: enc128(c.High), Low: enc128(c.Low), Close: enc128(c.Close),
			Volume: c.Volume.String(), QuoteVolume: c.QuoteVolume.String(), Trades: c.Trades, Gap: c.Gap})
	}
	var buf bytes.Buffer
	if err := parquet.Write(&buf, old); err != nil {
		t.Fatal(err)
	}
	same := func(a, b candle.Candle) bool { return a.Equal(&b) }
	if got, err := Decode(buf.Bytes()); err != nil || !slices.EqualFunc(got, want, same) {
		t.Fatalf("Decode(v2) = %+v, %v; want %+v", got, err, want)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, filepath.FromSlash(PartitionPath("1m", "OLD", want[0].OpenTime)))
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(ctx, Config{URL: "file://" + dir})
	if err != nil {
		t.Fatal(err)
	}
	tf, _ := candle.ParseTimeframe("1m", nil)
	got, err := r.Candles(ctx, "OLD", tf, want[0].OpenTime, want[len(want)-1].CloseTime, 0, false)
	if err != nil || !slices.EqualFunc(got, want, same) {
		t.Fatalf("Reader on the v2 layout = %+v, %v; want %+v", got, err, want)
	}
}
