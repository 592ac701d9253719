package dynamodb

import (
	"context"
	"math/big"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
	"github.com/kandle/kandle/internal/testkit"
)

// exactCandles are the cases as the pipeline makes them: a 1m
// candle of 8356.7124 × 61.674945886431317500 and 10⁻¹⁸ × 10⁻¹⁸, a 1m
// candle at the top of the accepted price range, and their 5m rollup.
func exactCandles() []candle.Candle {
	p := decimal.MustParse
	top := p("99999999999999999999.999999999999999999")
	a := candle.Candle{Symbol: "TOK", Timeframe: "1m", OpenTime: 1_800_000_000_000, CloseTime: 1_800_000_060_000,
		Open: p("8356.7124"), High: p("8356.7124"), Low: p("0.000000000000000001"), Close: p("0.000000000000000001"),
		Volume:      decimal.SumOf(p("61.674945886431317500")).AddDecimal(p("0.000000000000000001")),
		QuoteVolume: decimal.Product(p("8356.7124"), p("61.674945886431317500")).Add(decimal.Product(p("0.000000000000000001"), p("0.000000000000000001"))),
		Trades:      2}
	b := candle.Candle{Symbol: "TOK", Timeframe: "1m", OpenTime: 1_800_000_060_000, CloseTime: 1_800_000_120_000,
		Open: top, High: top, Low: top, Close: top, Volume: decimal.SumOf(top).AddDecimal(top),
		QuoteVolume: decimal.Product(top, top).Add(decimal.Product(top, top)), Trades: 2}
	// Taker buy volumes (the second trade of a, both of b) and trade ids.
	a.Taker, a.TakerBuyVolume = true, decimal.SumOf(p("0.000000000000000001"))
	a.TakerBuyQuoteVolume = decimal.Product(p("0.000000000000000001"), p("0.000000000000000001"))
	a.FirstTradeID, a.LastTradeID = "100", "101"
	b.Taker, b.TakerBuyVolume, b.TakerBuyQuoteVolume = true, b.Volume, b.QuoteVolume
	b.FirstTradeID, b.LastTradeID = "x-1", "x-2"
	r := candle.Candle{Symbol: "TOK", Timeframe: "5m", OpenTime: 1_800_000_000_000, CloseTime: 1_800_000_300_000,
		Open: a.Open, High: top, Low: a.Low, Close: top, Volume: a.Volume.Add(b.Volume), QuoteVolume: a.QuoteVolume.Add(b.QuoteVolume), Trades: 4,
		Taker: true, TakerBuyVolume: a.TakerBuyVolume.Add(b.TakerBuyVolume), TakerBuyQuoteVolume: a.TakerBuyQuoteVolume.Add(b.TakerBuyQuoteVolume),
		FirstTradeID: "100", LastTradeID: "x-2"}
	// A gap candle of a source without a side: no taker volumes, no ids.
	g := candle.Candle{Symbol: "TOK", Timeframe: "1m", OpenTime: 1_800_000_120_000, CloseTime: 1_800_000_180_000,
		Open: top, High: top, Low: top, Close: top, Gap: true}
	return []candle.Candle{a, b, r, g}
}

// The stored values read back with the AWS SDK (and math/big, not kandle's
// decimal parser) equal the candles' exact values, and so does kandle's own
// reader (kandle query).
func TestExactDecimalsReadBack(t *testing.T) {
	ctx := context.Background()
	dyn := testkit.Dynalite(t)
	h := newSink(t, historyConfig("exact", dyn.URL()), nil)
	want := exactCandles()
	if !want[2].QuoteVolume.IsWide() || !want[1].Volume.IsWide() {
		t.Fatal("the test needs wide sums")
	}
	if err := h.sink.Write(ctx, want); err != nil {
		t.Fatal(err)
	}
	if err := h.sink.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		items := partitionItems(t, h.raw, "exact", "pk", w.Symbol+"#"+w.Timeframe)
		var it map[string]types.AttributeValue
		for _, x := range items {
			if x["sk"].(*types.AttributeValueMemberN).Value == big.NewInt(w.OpenTime).String() {
				it = x
			}
		}
		if it == nil {
			t.Fatalf("%s %s %d: no item", w.Symbol, w.Timeframe, w.OpenTime)
		}
		want := map[string]*big.Rat{"o": decimal.SumOf(w.Open).Rat(), "h": decimal.SumOf(w.High).Rat(),
			"l": decimal.SumOf(w.Low).Rat(), "c": decimal.SumOf(w.Close).Rat(), "v": w.Volume.Rat(), "q": w.QuoteVolume.Rat()}
		if w.Taker {
			want["tbv"], want["tbq"] = w.TakerBuyVolume.Rat(), w.TakerBuyQuoteVolume.Rat()
		} else if it["tbv"] != nil || it["tbq"] != nil {
			t.Fatalf("%s %d: taker volumes stored for a candle without them", w.Timeframe, w.OpenTime)
		}
		for attr, id := range map[string]string{"first_trade_id": w.FirstTradeID, "last_trade_id": w.LastTradeID} {
			if s, _ := it[attr].(*types.AttributeValueMemberS); (id == "") != (s == nil) || (s != nil && s.Value != id) {
				t.Fatalf("%s %d: %s stored as %v, want %q", w.Timeframe, w.OpenTime, attr, it[attr], id)
			}
		}
		for attr, v := range want {
			s, ok := it[attr].(*types.AttributeValueMemberS)
			if !ok {
				t.Fatalf("%s: attribute %s is %T, want an exact string", w.Timeframe, attr, it[attr])
			}
			got, ok := new(big.Rat).SetString(s.Value)
			if !ok || got.Cmp(v) != 0 {
				t.Fatalf("%s %s: stored %q, want %s", w.Timeframe, attr, s.Value, v.FloatString(36))
			}
		}
		got, err := h.sink.Reader().Range(ctx, w.Symbol, w.Timeframe, w.OpenTime, w.CloseTime)
		if err != nil || len(got) != 1 || !got[0].Equal(&w) {
			t.Fatalf("Range (kandle query) = %+v, %v; want %+v", got, err, w)
		}
	}
}
