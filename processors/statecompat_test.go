package processors

import (
	"encoding/binary"
	"testing"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
)

// State written before exact wide sums (version 1: volumes as 16-byte
// decimals) still restores, and is rewritten in the current version.
func TestRestoreStateV1(t *testing.T) {
	r, err := NewRollup(RollupConfig{From: candle.Timeframe{N: 1, Unit: candle.Minute}, To: candle.Timeframe{N: 5, Unit: candle.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	// open, hasNonGap, hasLast; lastSub; window; o h l c v q; trades.
	v1 := []byte{stateV1, 1 | 2 | 4}
	v1 = binary.AppendVarint(v1, 120000)
	v1 = binary.AppendVarint(v1, 0)
	v1 = binary.AppendVarint(v1, 300000)
	for _, s := range []string{"2", "3", "1", "2.5", "1.5", "3.75"} {
		v1 = appendDec(v1, decimal.MustParse(s))
	}
	v1 = binary.AppendUvarint(v1, 3)
	if err := r.Restore(append([]byte{entryKey}, "BTC"...), v1); err != nil {
		t.Fatalf("restore v1: %v", err)
	}
	var out Output
	sub := candle.Candle{Symbol: "BTC", Timeframe: "1m", OpenTime: 240000, CloseTime: 300000,
		Open: decimal.MustParse("2"), High: decimal.MustParse("2"), Low: decimal.MustParse("2"), Close: decimal.MustParse("2"),
		Volume: decimal.MustParseSum("1"), QuoteVolume: decimal.MustParseSum("0.0000000000000000000001"), Trades: 1}
	r.Process(Record{Value: sub.AppendJSON(nil)}, &out)
	if len(out.Candles) != 1 || len(out.Rejected) != 0 {
		t.Fatalf("got %+v", out)
	}
	c := out.Candles[0]
	if c.Volume.String() != "2.5" || c.QuoteVolume.String() != "3.7500000000000000000001" || c.Trades != 4 || c.Open != decimal.MustParse("2") {
		t.Fatalf("rolled up from v1 state: %+v (v %s q %s)", c, c.Volume, c.QuoteVolume)
	}
	r.Changes(func(key, val []byte) {
		if len(val) > 0 && val[0] != stateVersion {
			t.Errorf("entry %q rewritten in version %d, want %d", key, val[0], stateVersion)
		}
	})
}

// State written before taker volumes and trade ids were kept (no flagTrade
// in key entries, no rollTrade in rollup entries) still restores under a
// topology that maps a side and ids. A window restored from it has not
// seen every trade's side, so its candle reports no taker volumes rather
// than a part; its first id is unknown, its last id the latest trade's.
// Windows opened after the restore carry both.
func TestRestoreStateBeforeTakerAndIDs(t *testing.T) {
	dec, err := NewDecoder(DecoderConfig{Fields: Fields{Key: "s", Time: "t", Price: "p", Qty: "q", ID: "i", Side: "side"}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAggregator(CandleConfig{Timeframe: candle.Timeframe{N: 1, Unit: candle.Minute}, GapFill: true, Decoder: dec}, FixedClock{})
	if err != nil {
		t.Fatal(err)
	}
	// The previous version's key entry: started, flagPrevTS; nextOpen,
	// width, lastTS, prevTS; one window (open, width, oTS, cTS, o h l c,
	// v q as sums, trades, id chunks) and nothing after it.
	old := []byte{stateVersion, 1 | flagPrevTS}
	for _, v := range []int64{0, 60000, 10000, 10000} {
		old = binary.AppendVarint(old, v)
	}
	old = binary.AppendUvarint(old, 1)
	old = appendOldWindow(old, []int64{0, 60000, 10000, 10000}, [4]string{"2", "2", "2", "2"}, "1", "2")
	old = binary.AppendUvarint(old, 1)
	old = binary.AppendUvarint(old, 0)
	part := []byte{stateVersion, 1 | partWM}
	for _, v := range []int64{10000, 0, 10000} {
		part = binary.AppendVarint(part, v)
	}
	if err := a.Restore([]byte{entryPartition}, part); err != nil {
		t.Fatal(err)
	}
	if err := a.Restore(append([]byte{entryKey}, "BTC"...), old); err != nil {
		t.Fatalf("restore the previous version's key entry: %v", err)
	}
	var out Output
	for i, rec := range []string{
		`{"s":"BTC","t":20000,"p":"3","q":"1","i":9,"side":"buy"}`,
		`{"s":"BTC","t":60000,"p":"4","q":"1","i":10,"side":"buy"}`,
		`{"s":"BTC","t":120000,"p":"5","q":"1","i":11,"side":"sell"}`,
	} {
		a.Process(Record{Offset: int64(i), Key: []byte("BTC"), Value: []byte(rec)}, &out)
	}
	if len(out.Rejected) != 0 || len(out.Candles) != 2 {
		t.Fatalf("got %+v", out)
	}
	c0, c1 := out.Candles[0], out.Candles[1]
	if c0.Taker || c0.FirstTradeID != "" || c0.LastTradeID != "9" || c0.Volume.String() != "2" || c0.Trades != 2 || c0.Open != decimal.MustParse("2") {
		t.Errorf("window restored from the previous version: %s", c0.AppendJSON(nil))
	}
	if !c1.Taker || c1.TakerBuyVolume.String() != "1" || c1.TakerBuyQuoteVolume.String() != "4" || c1.FirstTradeID != "10" || c1.LastTradeID != "10" {
		t.Errorf("window opened after the restore: %s", c1.AppendJSON(nil))
	}
	// The new entries restore into a fresh aggregator with the same open window.
	st := store{}
	st.apply(a)
	b, err := NewAggregator(CandleConfig{Timeframe: candle.Timeframe{N: 1, Unit: candle.Minute}, GapFill: true, Decoder: dec}, FixedClock{})
	if err != nil {
		t.Fatal(err)
	}
	st.restoreInto(t, b, nil)
	ka, _ := a.keys.getString("BTC")
	kb, _ := b.keys.getString("BTC")
	if ka == nil || kb == nil || len(ka.wins) != 1 || len(kb.wins) != 1 {
		t.Fatalf("open windows after the round trip: %v %v", ka, kb)
	}
	ca, cb := a.candleOf(ka, ka.wins[0]), b.candleOf(kb, kb.wins[0])
	if !ca.Equal(&cb) || !cb.Taker || cb.LastTradeID != "11" {
		t.Errorf("round trip of the new format: %s, want %s", cb.AppendJSON(nil), ca.AppendJSON(nil))
	}

	// A rollup entry of the previous version: open, hasNonGap, hasLast;
	// lastSub; window; o h l c; v q as sums; trades; nothing after.
	r, err := NewRollup(RollupConfig{From: candle.Timeframe{N: 1, Unit: candle.Minute}, To: candle.Timeframe{N: 5, Unit: candle.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	ro := []byte{stateVersion, 1 | 2 | 4}
	ro = appendOldWindow(ro, []int64{60000, 0, 300000}, [4]string{"2", "3", "1", "2.5"}, "1.5", "3.75")
	ro = binary.AppendUvarint(ro, 3)
	if err := r.Restore(append([]byte{entryKey}, "BTC"...), ro); err != nil {
		t.Fatalf("restore the previous version's rollup entry: %v", err)
	}
	out = Output{}
	sub := candle.Candle{Symbol: "BTC", Timeframe: "1m", OpenTime: 240000, CloseTime: 300000,
		Open: decimal.MustParse("2"), High: decimal.MustParse("2"), Low: decimal.MustParse("2"), Close: decimal.MustParse("2"),
		Volume: decimal.MustParseSum("1"), QuoteVolume: decimal.MustParseSum("2"), Trades: 1,
		Taker: true, TakerBuyVolume: decimal.MustParseSum("1"), TakerBuyQuoteVolume: decimal.MustParseSum("2"), FirstTradeID: "7", LastTradeID: "7"}
	r.Process(Record{Value: sub.AppendJSON(nil)}, &out)
	if len(out.Candles) != 1 {
		t.Fatalf("got %+v", out)
	}
	if c := out.Candles[0]; c.Taker || c.Volume.String() != "2.5" || c.Trades != 4 || c.FirstTradeID != "" || c.LastTradeID != "7" {
		t.Errorf("rolled up from the previous version's entry: %s", c.AppendJSON(nil))
	}
}

// appendOldWindow appends a window as the previous version wrote it: the
// varints, then open, high, low, close and the volume and quote volume sums.
func appendOldWindow(b []byte, varints []int64, ohlc [4]string, v, q string) []byte {
	for _, x := range varints {
		b = binary.AppendVarint(b, x)
	}
	for _, p := range ohlc {
		b = appendDec(b, decimal.MustParse(p))
	}
	b = decimal.MustParseSum(v).AppendBinary(b)
	return decimal.MustParseSum(q).AppendBinary(b)
}
