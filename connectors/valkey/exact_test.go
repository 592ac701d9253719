package valkey

import (
	"math/big"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
)

// The exact values (36-place and over-10^20 quote volumes) are
// stored in the hash and published as text that reads back exactly: the
// hash fields compared with math/big, the message decoded by encoding/json
// (subscribe) and compared as decimals.
func TestExactDecimalsReadBack(t *testing.T) {
	srv := startRedis(t)
	r := reader(t, srv.Addr)
	s := newSink(t, srv.Addr, func(c *Config) { c.Coalesce = 0; c.KeyPrefix = "x:" })
	sub := subscribe(t, r, "x:pub:candle:5m:TOK")
	p := decimal.MustParse
	top := p("99999999999999999999.999999999999999999")
	c := candle.Candle{Symbol: "TOK", Timeframe: "5m", OpenTime: 300_000, CloseTime: 600_000,
		Open: p("8356.7124"), High: top, Low: p("0.000000000000000001"), Close: top,
		Volume: decimal.SumOf(p("61.674945886431317500")).AddDecimal(top).AddDecimal(top),
		QuoteVolume: decimal.Product(p("8356.7124"), p("61.674945886431317500")).
			Add(decimal.Product(p("0.000000000000000001"), p("0.000000000000000001"))).Add(decimal.Product(top, top)),
		Trades: 3, Taker: true, TakerBuyVolume: decimal.SumOf(top).AddDecimal(top),
		TakerBuyQuoteVolume: decimal.Product(top, top).Add(decimal.Product(p("0.000000000000000001"), p("0.000000000000000001"))),
		FirstTradeID:        "1", LastTradeID: "3"}
	if !c.QuoteVolume.IsWide() || !c.Volume.IsWide() || !c.TakerBuyQuoteVolume.IsWide() {
		t.Fatal("the test needs wide sums")
	}
	s.Active(c)
	m := recv(t, sub)
	if m.Final || !m.Candle.Equal(&c) {
		t.Fatalf("published %+v, want %+v", m, c)
	}
	key := "x:candle:active:5m:TOK"
	waitFor(t, 5*time.Second, func() bool { return len(hgetall(t, r, key)) > 0 }, "hash")
	h := hgetall(t, r, key)
	for f, want := range map[string]*big.Rat{"o": decimal.SumOf(c.Open).Rat(), "h": decimal.SumOf(c.High).Rat(),
		"l": decimal.SumOf(c.Low).Rat(), "c": decimal.SumOf(c.Close).Rat(), "v": c.Volume.Rat(), "q": c.QuoteVolume.Rat(),
		"tb": c.TakerBuyVolume.Rat(), "tq": c.TakerBuyQuoteVolume.Rat()} {
		got, ok := new(big.Rat).SetString(h[f])
		if !ok || got.Cmp(want) != 0 {
			t.Fatalf("hash field %s = %q, want %s", f, h[f], want.FloatString(36))
		}
	}
}
