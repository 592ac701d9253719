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
