package s3parquet

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
	"github.com/kandle/kandle/internal/testkit"
)

// TestRevisionsKeepHighestRev writes revisions of windows in every order a
// late or repeated delivery brings them, through each way the sink merges
// (its buffer, its own last write, a read of the object by a sink that
// did not write it): the object holds one row per window, the highest rev;
// older revs are counted, not errors. Decode, the ranged Reader and DuckDB
// read the rev column; an object written before it reads as rev 0.
func TestRevisionsKeepHighestRev(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	open := func(reg prometheus.Registerer) *Sink {
		s, err := New(ctx, Config{URL: "file://" + dir}, WithLogger(quietLogger()), WithRegisterer(reg))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open(reg)
	var base []candle.Candle
	for _, c := range gen("REV") {
		if c.Timeframe == "1m" && len(base) < 5 {
			base = append(base, c)
		}
	}
	rev := func(i int, r uint32) candle.Candle {
		c := base[i]
		c.Rev, c.Trades = r, c.Trades+100*int64(r) // each revision differs
		c.Close, _ = c.Close.Add(decimal.FromInt(int64(r)))
		return c
	}
	write := func(s *Sink, cs ...candle.Candle) {
		t.Helper()
		if err := s.Write(ctx, cs); err != nil {
			t.Fatal(err)
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatalf("Flush: %v (an older revision is not an error)", err)
		}
	}
	write(s, base...)              // create
	write(s, rev(1, 2))            // over the sink's own last write
	write(s, rev(1, 1))            // older: kept out
	write(s, rev(2, 3), rev(2, 1)) // in one buffer
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	other := open(prometheus.NewRegistry()) // reads the object to merge
	write(other, base[1], rev(3, 1))
	if err := other.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := counter(t, reg, "kandle_s3parquet_stale_revisions_total"); got != 2 {
		t.Fatalf("stale_revisions_total = %v, want 2", got)
	}

	want := []candle.Candle{base[0], rev(1, 2), rev(2, 3), rev(3, 1), base[4]}
	path := filepath.Join(dir, filepath.FromSlash(PartitionPath("1m", "REV", base[0].OpenTime)))
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	same(t, "Decode", got, want)
	r, err := NewReader(ctx, Config{URL: "file://" + dir})
	if err != nil {
		t.Fatal(err)
	}
	tf, _ := candle.ParseTimeframe("1m", nil)
	got, err = r.Candles(ctx, "REV", tf, want[0].OpenTime, want[len(want)-1].CloseTime, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	same(t, "Reader", got, want)

	// DuckDB sees the column, as a BIGINT, with the same revs.
	lines := testkit.DuckDB(t, path, `SELECT epoch_ms(open_time) AS o, rev, typeof(rev) AS ty FROM t ORDER BY open_time`)
	if len(lines) != len(want) {
		t.Fatalf("duckdb: %d rows, want %d: %q", len(lines), len(want), lines)
	}
	for i, l := range lines {
		var row struct {
			O   int64 `json:",string"`
			Rev int64 `json:",string"`
			Ty  string
		}
		if err := json.Unmarshal([]byte(l), &row); err != nil {
			t.Fatalf("duckdb row %s: %v", l, err)
		}
		if row.O != want[i].OpenTime || row.Rev != int64(want[i].Rev) || row.Ty != "BIGINT" {
			t.Fatalf("duckdb row %d = %s, want open_time %d rev %d BIGINT", i, l, want[i].OpenTime, want[i].Rev)
		}
	}

	// An object written before the rev column: its candles are rev 0, and a
	// revision merged into it adds the column.
	var old []rowV3
	for _, c := range base {
		old = append(old, rowV3{rowV2: rowV2{Symbol: c.Symbol, Timeframe: c.Timeframe, OpenTime: c.OpenTime, CloseTime: c.CloseTime,
			Open: enc128(c.Open), High: enc128(c.High), Low: enc128(c.Low), Close: enc128(c.Close),
			Volume: c.Volume.String(), QuoteVolume: c.QuoteVolume.String(), Trades: c.Trades, Gap: c.Gap},
			TakerBuyBase: takerText(c.Taker, c.TakerBuyVolume), TakerBuyQuote: takerText(c.Taker, c.TakerBuyQuoteVolume),
			FirstTradeID: c.FirstTradeID, LastTradeID: c.LastTradeID})
	}
	var buf bytes.Buffer
	if err := parquet.Write(&buf, old); err != nil {
		t.Fatal(err)
	}
	if got, err := Decode(buf.Bytes()); err != nil {
		t.Fatal(err)
	} else {
		same(t, "Decode of a file without rev", got, base)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err = r.Candles(ctx, "REV", tf, base[0].OpenTime, base[len(base)-1].CloseTime, 0, false); err != nil {
		t.Fatal(err)
	}
	same(t, "Reader of a file without rev", got, base)
	third := open(prometheus.NewRegistry())
	write(third, rev(4, 1))
	if err := third.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if data, err = os.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	if got, err = Decode(data); err != nil {
		t.Fatal(err)
	}
	same(t, "a revision merged into a file without rev", got, append(base[:4:4], rev(4, 1)))
}

func takerText(ok bool, s decimal.Sum) string {
	if !ok {
		return ""
	}
	return s.String()
}

func same(t *testing.T, what string, got, want []candle.Candle) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d candles, want %d", what, len(got), len(want))
	}
	for i := range want {
		if !got[i].Equal(&want[i]) {
			t.Fatalf("%s: window %d:\n got %+v\nwant %+v", what, i, got[i], want[i])
		}
	}
}
