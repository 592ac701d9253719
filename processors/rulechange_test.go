package processors

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"
)

// rulesAgg builds a 1m aggregator with dedupe and gap fill under the given
// lateness and max_idle (state: the lateness of a stored partition entry
// without a watermark; nil: lateness).
func rulesAgg(t *testing.T, lateness, maxIdle time.Duration, state *time.Duration) *Aggregator {
	t.Helper()
	dec, err := NewDecoder(DecoderConfig{Fields: Fields{Key: "s", Time: "t", Price: "p", Qty: "q", ID: "i"}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAggregator(CandleConfig{Timeframe: tfOf(t, "1m", nil), Lateness: lateness, MaxIdle: maxIdle,
		StateLateness: state, Dedupe: true, GapFill: true, Decoder: dec}, FixedClock{T: baseDay})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// trade processes one BTC trade at baseDay+at and returns the output.
func trade(a *Aggregator, at time.Duration, id int) Output {
	var out Output
	a.Process(Record{Key: []byte("BTC"), Value: fmt.Appendf(nil, `{"s":"BTC","t":%d,"p":"%d","q":"1","i":%d}`,
		baseDay.Add(at).UnixMilli(), 1+id%7, id)}, &out)
	return out
}

// withoutWatermark rewrites st's partition entry as a kandle from before
// the watermark was stored wrote it.
func withoutWatermark(t *testing.T, st store) {
	t.Helper()
	v := st[string([]byte{entryPartition})]
	if len(v) < 2 || v[1]&partWM == 0 {
		t.Fatalf("partition entry %x stores no watermark", v)
	}
	r := reader{b: v[2:]}
	m, w := r.varint(), r.varint()
	old := []byte{v[0], v[1] &^ partWM}
	old = binary.AppendVarint(old, m)
	st[string([]byte{entryPartition})] = binary.AppendVarint(old, w)
}

// A lateness raised on existing state (2s → 5s) never reopens a window that
// was emitted: the watermark restores as stored and holds still until the
// max event time less the new lateness passes it. A trade for the emitted
// window is late, not a second final candle; the new lateness then applies
// as event time moves on. State from before the watermark was stored
// restores it from the lateness it was written under (StateLateness), which
// the engine takes from the recorded fingerprint; restored with the new
// lateness instead, the emitted window would open again (what StateLateness
// is for).
func TestLatenessRaisedNeverReopensAWindow(t *testing.T) {
	two, five := 2*time.Second, 5*time.Second
	for _, tc := range []struct {
		name   string
		legacy bool           // the partition entry has no watermark
		state  *time.Duration // CandleConfig.StateLateness of the restored aggregator
		reopen bool
	}{
		{"watermark stored", false, nil, false},
		{"older state, its lateness known", true, &two, false},
		{"older state read under the new lateness", true, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := rulesAgg(t, two, 24*time.Hour, nil)
			trade(a, 10*time.Hour+30*time.Second, 1)
			out := trade(a, 10*time.Hour+time.Minute+3*time.Second, 2) // W = 10:01:01: 10:00 closes
			if len(out.Candles) != 1 || out.Candles[0].OpenTime != baseDay.Add(10*time.Hour).UnixMilli() {
				t.Fatalf("setup: want the 10:00 candle, got %+v", out.Candles)
			}
			st := store{}
			st.apply(a)
			if tc.legacy {
				withoutWatermark(t, st)
			}
			b := rulesAgg(t, five, 24*time.Hour, tc.state)
			st.restoreInto(t, b, nil)
			if w, _ := b.Watermark(); w != baseDay.Add(10*time.Hour+time.Minute+time.Second).UnixMilli() && !tc.reopen {
				t.Fatalf("restored watermark %s, want 10:01:01 (it never goes back)", fmtMS(w))
			}
			// 10:00:59 is within 5s of the max event time, but its window was emitted.
			out = trade(b, 10*time.Hour+59*time.Second, 3)
			late := len(out.Rejected) == 1 && out.Rejected[0].Reason == ReasonLate
			if late == tc.reopen {
				t.Fatalf("a trade for the emitted 10:00 window: rejected %+v (reopen %v)", out.Rejected, tc.reopen)
			}
			// The new lateness applies as event time moves on: 10:01:05 does
			// not close 10:01 under 5s (it would under 2s), 10:01:06 does.
			if out = trade(b, 10*time.Hour+time.Minute+5*time.Second, 4); len(out.Candles) != 0 && !tc.reopen {
				t.Fatalf("10:01:05 closed %+v under lateness 5s", out.Candles)
			}
			trade(b, 10*time.Hour+time.Minute+59*time.Second, 5)
			out = trade(b, 10*time.Hour+2*time.Minute+5*time.Second, 6)
			if len(out.Candles) != 1 || out.Candles[0].OpenTime != baseDay.Add(10*time.Hour+time.Minute).UnixMilli() || out.Candles[0].Trades != 3 {
				t.Fatalf("10:02:05 under lateness 5s: want the 10:01 candle of 3 trades, got %+v", out.Candles)
			}
		})
	}
}

// A lateness lowered on existing state (5s → 2s) closes windows sooner from
// the next record on; the watermark only moves forward.
func TestLatenessLoweredClosesSooner(t *testing.T) {
	a := rulesAgg(t, 5*time.Second, 24*time.Hour, nil)
	trade(a, 10*time.Hour+30*time.Second, 1)
	if out := trade(a, 10*time.Hour+time.Minute+3*time.Second, 2); len(out.Candles) != 0 {
		t.Fatalf("10:01:03 closed %+v under lateness 5s", out.Candles)
	}
	st := store{}
	st.apply(a)
	b := rulesAgg(t, 2*time.Second, 24*time.Hour, nil)
	st.restoreInto(t, b, nil)
	out := trade(b, 10*time.Hour+time.Minute+4*time.Second, 3) // W = 10:01:02
	if len(out.Candles) != 1 || out.Candles[0].OpenTime != baseDay.Add(10*time.Hour).UnixMilli() {
		t.Fatalf("10:01:04 under lateness 2s: want the 10:00 candle, got %+v", out.Candles)
	}
	if out = trade(b, 10*time.Hour+59*time.Second, 4); len(out.Rejected) != 1 || out.Rejected[0].Reason != ReasonLate {
		t.Fatalf("a trade for the emitted 10:00 window after the lower lateness: %+v", out)
	}
}

// max_idle changed on existing state decides where a run of gap candles
// ends from then on: shortened, a key silent for longer than the new bound
// ends its run at its next window; lengthened, a run that ended stays
// ended (a later trade starts a new run without filling the silence).
func TestMaxIdleChangedOnExistingState(t *testing.T) {
	eth := func(a *Aggregator, at time.Duration, id int) Output {
		var out Output
		a.Process(Record{Key: []byte("ETH"), Value: fmt.Appendf(nil, `{"s":"ETH","t":%d,"p":"1","q":"1","i":%d}`,
			baseDay.Add(at).UnixMilli(), id)}, &out)
		return out
	}
	btc := func(out Output) string {
		var opens []string
		for _, c := range out.Candles {
			if c.Symbol == "BTC" {
				opens = append(opens, fmtTime(c.OpenTime))
			}
		}
		return fmt.Sprint(opens)
	}
	t.Run("shortened", func(t *testing.T) {
		for _, tc := range []struct {
			maxIdle time.Duration
			want    string
		}{
			// BTC traded at 10:00 and has gap candles up to 10:09: past a
			// 2m bound its run ends at its next window.
			{2 * time.Minute, "[]"},
			{time.Hour, "[10:10:00 10:11:00 10:12:00 10:13:00 10:14:00]"},
		} {
			a := rulesAgg(t, 2*time.Second, time.Hour, nil)
			trade(a, 10*time.Hour, 1)
			if got := btc(eth(a, 10*time.Hour+10*time.Minute+3*time.Second, 2)); got != "[10:00:00 10:01:00 10:02:00 10:03:00 10:04:00 10:05:00 10:06:00 10:07:00 10:08:00 10:09:00]" {
				t.Fatalf("setup: BTC candles %s", got)
			}
			st := store{}
			st.apply(a)
			b := rulesAgg(t, 2*time.Second, tc.maxIdle, nil)
			st.restoreInto(t, b, nil)
			if got := btc(eth(b, 10*time.Hour+15*time.Minute+3*time.Second, 3)); got != tc.want {
				t.Errorf("BTC candles after max_idle 1h → %s: %s, want %s", tc.maxIdle, got, tc.want)
			}
		}
	})
	t.Run("lengthened", func(t *testing.T) {
		a := rulesAgg(t, 2*time.Second, 2*time.Minute, nil)
		trade(a, 10*time.Hour, 1)
		trade(a, 10*time.Hour+10*time.Minute, 2) // 10:00, gaps 10:01, 10:02 (before 10:02:00), run ends
		st := store{}
		st.apply(a)
		b := rulesAgg(t, 2*time.Second, time.Hour, nil)
		st.restoreInto(t, b, nil)
		out := trade(b, 10*time.Hour+11*time.Minute+5*time.Second, 3)
		var opens []string
		for _, c := range out.Candles {
			opens = append(opens, fmtTime(c.OpenTime))
		}
		if got := fmt.Sprint(opens); got != "[10:10:00]" {
			t.Fatalf("after max_idle 2m → 1h: %s, want [10:10:00] (the silence before stays unfilled)", got)
		}
	})
}
