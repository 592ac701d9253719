package processors

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
)

// TestRestoredKeyStillChecked: the aggregator resolves known keys in its own
// table without asking the decoder, but a key that only came back from
// restored state has not passed the symbols whitelist, so its trades are
// still rejected as unknown_key (as they were before the key table).
func TestRestoredKeyStillChecked(t *testing.T) {
	tf, err := candle.ParseTimeframe("1m", nil)
	if err != nil {
		t.Fatal(err)
	}
	trade := func(sym string, i int) Record {
		return Record{Offset: int64(i), Value: fmt.Appendf(nil, `{"s":%q,"t":%d,"p":"2","q":"1","i":%d}`,
			sym, baseDay.Add(time.Duration(i)*time.Second).UnixMilli(), i)}
	}
	old := newAgg(t, tf, nil) // no whitelist: A and B both traded
	var out Output
	old.Process(trade("A", 1), &out)
	old.Process(trade("B", 2), &out)
	st := store{}
	st.apply(old)

	dec, err := NewDecoder(DecoderConfig{Fields: Fields{Key: "s", Time: "t", Price: "p", Qty: "q", ID: "i"}, Symbols: []string{"A"}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAggregator(CandleConfig{Timeframe: tf, Decoder: dec, GapFill: true, Dedupe: true}, FixedClock{T: baseDay})
	if err != nil {
		t.Fatal(err)
	}
	st.restoreInto(t, a, rand.New(rand.NewPCG(1, 1)))
	for i, sym := range []string{"B", "A", "B"} {
		out.Reset()
		a.Process(trade(sym, 3+i), &out)
		rejected := len(out.Rejected) == 1 && out.Rejected[0].Reason == ReasonUnknownKey
		if rejected != (sym == "B") {
			t.Fatalf("trade %d of %s: rejections %+v", i, sym, out.Rejected)
		}
	}
}
