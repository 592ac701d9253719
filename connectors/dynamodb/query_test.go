package dynamodb

import (
	"context"
	"testing"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/internal/testkit"
)

// TestQueries covers Latest, Range (across forced small pages) and
// LatestMany against data written by the sink.
func TestQueries(t *testing.T) {
	ctx := context.Background()
	dyn := testkit.Dynalite(t)
	var f *faultAPI
	h := newSink(t, historyConfig("quotes", dyn.URL()), func(a API) API {
		f = newFaultAPI(a)
		f.forceLim = 7 // pages of 7 items: Range must follow LastEvaluatedKey
		return f
	})
	symbols := []string{"BTC", "ETH", "SOL", "ADA"}
	cs := genCandles(symbols, []string{"1m", "1h"}, 30, 1)
	if err := h.sink.Write(ctx, cs); err != nil {
		t.Fatal(err)
	}
	if err := h.sink.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	series := func(sym, tf string) []candle.Candle {
		var out []candle.Candle
		for _, c := range cs {
			if c.Symbol == sym && c.Timeframe == tf {
				out = append(out, c)
			}
		}
		return out
	}
	btc := series("BTC", "1m")

	c, ok, err := h.sink.Reader().Latest(ctx, "BTC", "1m")
	if err != nil || !ok || c != btc[len(btc)-1] {
		t.Fatalf("Latest = %+v %v %v, want %+v", c, ok, err, btc[len(btc)-1])
	}
	if _, ok, err := h.sink.Reader().Latest(ctx, "NOPE", "1m"); ok || err != nil {
		t.Fatalf("Latest of an unknown symbol = %v %v", ok, err)
	}

	before := f.Calls("Query")
	got, err := h.sink.Reader().Range(ctx, "BTC", "1m", btc[3].OpenTime, btc[25].OpenTime)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 22 || got[0] != btc[3] || got[21] != btc[24] {
		t.Fatalf("Range returned %d candles (first %v), want btc[3:25]", len(got), got)
	}
	if pages := f.Calls("Query") - before; pages < 4 {
		t.Fatalf("Range used %d Query pages for 22 items with pages of 7", pages)
	}
	if got, err := h.sink.Reader().Range(ctx, "BTC", "1m", btc[5].OpenTime, btc[5].OpenTime); err != nil || len(got) != 0 {
		t.Fatalf("empty Range = %v %v", got, err)
	}

	many, err := h.sink.Reader().LatestMany(ctx, append(symbols, "NOPE"), "1h")
	if err != nil {
		t.Fatal(err)
	}
	if len(many) != len(symbols) {
		t.Fatalf("LatestMany returned %d symbols, want %d", len(many), len(symbols))
	}
	for _, sym := range symbols {
		s := series(sym, "1h")
		if many[sym] != s[len(s)-1] {
			t.Fatalf("LatestMany[%s] = %+v, want %+v", sym, many[sym], s[len(s)-1])
		}
	}
}

// TestQueriesNeedQueryableKeys: reads refuse templates they cannot serve,
// saying why.
func TestQueriesNeedQueryableKeys(t *testing.T) {
	cfg := historyConfig("ledger", "http://127.0.0.1:1")
	cfg.Table.SKType = "S"
	cfg.PK, cfg.SK = "{symbol}#{yyyy}{mm}", "{ts}#{trade_id}"
	h := newSink(t, cfg, nil)
	if _, err := h.sink.Reader().ReadSharded(context.Background(), "BTC", 0, 10); err == nil {
		t.Fatal("ReadSharded on a time-partitioned pk should fail")
	}
}
