package processors

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
)

// TestRejectedRecordsNeverMoveWatermark: docs/contract.md → "Watermarks and
// closing": rejected records (late, duplicate, future, invalid,
// key_mismatch) never move a watermark. Each record below is stamped a day ahead of the partition
// and rejected for its reason; none may change the watermark, emit a candle
// or change state.
func TestRejectedRecordsNeverMoveWatermark(t *testing.T) {
	tf := tfOf(t, "1m", nil)
	ahead := baseDay.Add(34 * time.Hour).UnixMilli() // later than anything accepted
	cases := []struct {
		reason Reason
		key    string // record key; "" = the symbol
		value  string
	}{
		{ReasonLate, "", `{"s":"BTC","t":"2024-01-01T09:00:00Z","p":"1","q":"1","i":100}`},
		{ReasonDuplicate, "", fmt.Sprintf(`{"s":"BTC","t":%d,"p":"1","q":"1","i":1}`, baseDay.Add(10*time.Hour+30*time.Second).UnixMilli())},
		{ReasonFuture, "", fmt.Sprintf(`{"s":"BTC","t":%d,"p":"1","q":"1","i":101}`, ahead)},
		{ReasonKeyMismatch, "ETH", fmt.Sprintf(`{"s":"BTC","t":%d,"p":"1","q":"1","i":102}`, ahead-1)},
		{ReasonKeyMismatch, "-", fmt.Sprintf(`{"s":"BTC","t":%d,"p":"1","q":"1","i":103}`, ahead-1)},
		{ReasonInvalidPrice, "", fmt.Sprintf(`{"s":"BTC","t":%d,"p":"-1","q":"1","i":104}`, ahead-1)},
		{ReasonInvalidQty, "", fmt.Sprintf(`{"s":"BTC","t":%d,"p":"1","q":"0","i":105}`, ahead-1)},
		{ReasonUnknownKey, "", fmt.Sprintf(`{"s":"XRP","t":%d,"p":"1","q":"1","i":106}`, ahead-1)},
		{ReasonMissingField, "", fmt.Sprintf(`{"s":"BTC","t":%d,"q":"1","i":107}`, ahead-1)},
		{ReasonInvalidTS, "", `{"s":"BTC","t":"tomorrow","p":"1","q":"1","i":108}`},
		{ReasonOversized, "", fmt.Sprintf(`{"s":"BTC","t":%d,"p":"1","q":"1","i":109,"pad":"%0300d"}`, ahead-1, 0)},
	}
	dec, err := NewDecoder(DecoderConfig{Fields: Fields{Key: "s", Time: "t", Price: "p", Qty: "q", ID: "i"},
		Symbols: []string{"BTC", "ETH"}, MaxRecordBytes: 200, KeyCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	clock := FixedClock{T: baseDay.Add(11 * time.Hour)}
	a, err := NewAggregator(CandleConfig{Timeframe: tf, Lateness: 2 * time.Second, MaxFuture: time.Second,
		MaxIdle: 24 * time.Hour, Dedupe: true, GapFill: true, Decoder: dec}, clock)
	if err != nil {
		t.Fatal(err)
	}
	var out Output
	for i, ts := range []time.Duration{10 * time.Hour, 10*time.Hour + 30*time.Second} {
		a.Process(Record{Offset: int64(i), Key: []byte("BTC"),
			Value: fmt.Appendf(nil, `{"s":"BTC","t":%d,"p":"2","q":"1","i":%d}`, baseDay.Add(ts).UnixMilli(), i+1)}, &out)
	}
	if len(out.Rejected) > 0 {
		t.Fatalf("setup rejected: %s", fmtRejection(&out.Rejected[0]))
	}
	st := store{}
	st.apply(a)
	w0, ok := a.Watermark()
	if !ok {
		t.Fatal("no watermark after two trades")
	}
	for i, c := range cases {
		key := []byte(c.key)
		switch c.key {
		case "":
			key = []byte("BTC")
			if c.reason == ReasonUnknownKey {
				key = []byte("XRP")
			}
		case "-":
			key = nil
		}
		out.Reset()
		a.Process(Record{Offset: int64(10 + i), Key: key, Value: []byte(c.value)}, &out)
		if len(out.Rejected) != 1 || out.Rejected[0].Reason != c.reason {
			t.Fatalf("case %d: want one %s rejection, got %+v", i, c.reason, out.Rejected)
		}
		if len(out.Candles) > 0 {
			t.Fatalf("case %d (%s) emitted %s", i, c.reason, fmtCandle(&out.Candles[0]))
		}
		if w, _ := a.Watermark(); w != w0 {
			t.Fatalf("case %d (%s) moved the watermark from %s to %s", i, c.reason, fmtMS(w0), fmtMS(w))
		}
		n := 0
		a.Changes(func(key, val []byte) { n++ })
		if n > 0 {
			t.Fatalf("case %d (%s) changed %d state entries", i, c.reason, n)
		}
	}
}

// TestOneKeyOnePartition: a producer that sends some of a symbol's trades
// without a key, or keyed by something else, spreads the symbol over
// partitions. With key_check no (key, timeframe, open_time) ever gets two
// final candles, every such record is dead-lettered key_mismatch, and the
// keyed records alone make the candles; without the check the same input
// does yield two finals for one window (what the check is for).
func TestOneKeyOnePartition(t *testing.T) {
	tf := tfOf(t, "1m", nil)
	rng := rand.New(rand.NewPCG(9, 9))
	type rec struct {
		part int32
		key  []byte
		val  []byte
	}
	var recs []rec
	home := map[string]int32{"BTC": 0, "ETH": 1, "SOL": 1}
	syms := []string{"BTC", "ETH", "SOL"}
	wrong := 0
	for i := range 3000 {
		sym := syms[rng.IntN(len(syms))]
		ts := baseDay.Add(time.Duration(i) * 500 * time.Millisecond)
		r := rec{part: home[sym], key: []byte(sym),
			val: fmt.Appendf(nil, `{"s":%q,"t":%d,"p":"%d","q":"1","i":%d}`, sym, ts.UnixMilli(), 1+rng.IntN(9), i)}
		switch rng.IntN(10) {
		case 0: // keyless producer: round robin
			r.key, r.part = nil, int32(i%2)
			wrong++
		case 1: // keyed by trade id
			r.key, r.part = fmt.Appendf(nil, "%d", i), int32(rng.IntN(2))
			wrong++
		}
		recs = append(recs, r)
	}
	run := func(check bool) (finals map[string]int, mismatches int) {
		aggs := make([]*Aggregator, 2)
		for p := range aggs {
			dec, err := NewDecoder(DecoderConfig{Fields: Fields{Key: "s", Time: "t", Price: "p", Qty: "q", ID: "i"}, KeyCheck: check})
			if err != nil {
				t.Fatal(err)
			}
			if aggs[p], err = NewAggregator(CandleConfig{Timeframe: tf, Lateness: 2 * time.Second, MaxIdle: time.Hour,
				Dedupe: true, GapFill: true, Decoder: dec}, FixedClock{T: baseDay}); err != nil {
				t.Fatal(err)
			}
		}
		finals = map[string]int{}
		var out Output
		for i, r := range recs {
			out.Reset()
			aggs[r.part].Process(Record{Partition: r.part, Offset: int64(i), Key: r.key, Value: r.val}, &out)
			for _, rj := range out.Rejected {
				if rj.Reason != ReasonKeyMismatch {
					t.Fatalf("record %d: unexpected %s", i, fmtRejection(&rj))
				}
				mismatches++
			}
			for _, c := range out.Candles {
				finals[fmt.Sprintf("%s %s %d", c.Symbol, c.Timeframe, c.OpenTime)]++
			}
		}
		return finals, mismatches
	}
	finals, mismatches := run(true)
	if mismatches != wrong {
		t.Fatalf("%d key_mismatch rejections, want %d", mismatches, wrong)
	}
	if len(finals) < 30 {
		t.Fatalf("only %d finals: the stream is too short", len(finals))
	}
	for k, n := range finals {
		if n != 1 {
			t.Fatalf("%d finals for %s", n, k)
		}
	}
	finals, _ = run(false)
	twice := 0
	for _, n := range finals {
		if n > 1 {
			twice++
		}
	}
	if twice == 0 {
		t.Fatal("without key_check no window got two finals: the input does not exercise the check")
	}
}

// TestQuietKeyFreed: a key that stops trading gets gap candles for
// max_idle, its last rollup window closes (as direct aggregation closes it,
// not when the key trades again, which here it never does), and then the
// key holds no memory and no state entry in the aggregator nor the rollup:
// both reported the deletion through Changes.
func TestQuietKeyFreed(t *testing.T) {
	tf1, tf5 := tfOf(t, "1m", nil), tfOf(t, "5m", nil)
	a := newAgg(t, tf1, func(c *CandleConfig) {
		c.Lateness, c.MaxIdle, c.Rollups = 2*time.Second, 3*time.Minute, []candle.Timeframe{tf5}
	})
	direct := newAgg(t, tf5, func(c *CandleConfig) { c.Lateness, c.MaxIdle = 2*time.Second, 3*time.Minute })
	r, err := NewRollup(RollupConfig{From: tf1, To: tf5})
	if err != nil {
		t.Fatal(err)
	}
	aggSt, rollSt := store{}, store{}
	var rolled, want []candle.Candle
	sawBTC := map[string]bool{}
	feed := func(sym string, at time.Duration, id int) {
		t.Helper()
		rec := Record{Offset: int64(id), Value: fmt.Appendf(nil, `{"s":%q,"t":%d,"p":"%d","q":"1","i":%d}`,
			sym, baseDay.Add(at).UnixMilli(), 10+id%7, id)}
		var out, dout Output
		a.Process(rec, &out)
		direct.Process(rec, &dout)
		want = append(want, dout.Candles...)
		items := rollupItems(t, r, levelOut(nil, &out))
		rolled = append(rolled, candlesOf(items)...)
		aggSt.apply(a)
		rollSt.apply(r)
		if _, ok := rollSt["kBTC"]; ok {
			sawBTC["rollup"] = true
		}
	}
	id := 0
	// BTC trades from 10:00 to 10:06:10, then never again; ETH goes on.
	for s := time.Duration(0); s <= 370*time.Second; s += 10 * time.Second {
		id++
		feed("BTC", 10*time.Hour+s, id)
		id++
		feed("ETH", 10*time.Hour+s+time.Second, id)
	}
	if !sawBTC["rollup"] {
		t.Fatal("the rollup never stored BTC: nothing to free")
	}
	for s := 380 * time.Second; s <= 30*time.Minute; s += 10 * time.Second {
		id++
		feed("ETH", 10*time.Hour+s, id)
	}
	if _, ok := aggSt["kBTC"]; ok {
		t.Error("the aggregator still stores BTC after its run ended")
	}
	if _, ok := rollSt["kBTC"]; ok {
		t.Error("the rollup still stores BTC after its last window closed")
	}
	if k, _ := a.keys.getString("BTC"); k != nil {
		t.Errorf("the aggregator still holds BTC in memory: %+v", k)
	}
	if r.keys["BTC"] != nil {
		t.Errorf("the rollup still holds BTC in memory: %+v", r.keys["BTC"])
	}
	var last candle.Candle
	for _, c := range rolled {
		if c.Symbol == "BTC" {
			last = c
		}
	}
	// Last trade 10:06:10, max_idle 3m: 1m gap candles up to 10:09; the 5m
	// window 10:05 is the last, closed by the quiet mark at 10:10.
	if last.OpenTime != baseDay.Add(10*time.Hour+5*time.Minute).UnixMilli() {
		t.Errorf("last BTC rollup candle %s, want the 10:05 window", fmtCandle(&last))
	}
	sameCandles(t, "rollup with a quiet key", byKey(rolled), byKey(want))
}
