package processors_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/topology"
)

// shipped returns the aggregator of processor "c" of a topology that sets
// nothing but the timeframe: every other value is the shipped default, and
// it is built the way the engine builds it.
func shipped(t *testing.T, timeframe string, clock processors.Clock) (*processors.Aggregator, *topology.Processor) {
	t.Helper()
	top, err := topology.Parse("defaults.yaml", fmt.Appendf(nil, `
name: d
sources:
  trades: {topic: trades}
processors:
  c: {kind: candles, from: trades, timeframe: %s}
`, timeframe), topology.Registry{})
	if err != nil {
		t.Fatal(err)
	}
	src, p := top.Sources["trades"], top.Processors["c"]
	f := src.Fields
	dec, err := processors.NewDecoder(processors.DecoderConfig{
		Fields:  processors.Fields{Key: f.Key, Time: f.Time, Price: f.Price, Qty: f.Qty, ID: f.ID},
		Symbols: src.Symbols, MaxRecordBytes: src.MaxRecordBytes, KeyCheck: src.KeyCheck,
	})
	if err != nil {
		t.Fatal(err)
	}
	tf, err := candle.ParseTimeframe(p.Timeframe, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := processors.NewAggregator(processors.CandleConfig{Timeframe: tf, Lateness: p.Lateness,
		IdleTimeout: p.IdleTimeout, MaxFuture: p.MaxFuture, MaxIdle: p.MaxIdle, Dedupe: p.Dedupe,
		GapFill: p.GapFill, Decoder: dec}, clock)
	if err != nil {
		t.Fatal(err)
	}
	return a, p
}

func trade(sym string, ts time.Time, id int) processors.Record {
	return processors.Record{Offset: int64(id), Key: []byte(sym),
		Value: fmt.Appendf(nil, `{"symbol":%q,"ts":%d,"price":"100.5","qty":"0.25","trade_id":%d}`, sym, ts.UnixMilli(), id)}
}

// TestShippedDefaultsTSZero: one record stamped ts 0 (a producer with an
// unset clock) then a normal trade of the same symbol. With the shipped
// max_idle the key gets gap candles for at most max_idle after the 1970
// trade, then a new run starts: a bounded number of candles and of bytes
// allocated, not one gap candle per window of 56 years (half a million
// hourly candles here; 28 million with 1m windows).
func TestShippedDefaultsTSZero(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 30, 0, time.UTC)
	a, p := shipped(t, "1h", processors.FixedClock{T: now.Add(3 * time.Hour)}) // a replay started later
	if p.MaxIdle <= 0 {
		t.Fatalf("max_idle default is %s: the bound needs it on", p.MaxIdle)
	}
	var out processors.Output
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	n := 0
	for i, ts := range []time.Time{time.UnixMilli(0), now, now.Add(time.Hour), now.Add(2 * time.Hour)} {
		out.Reset()
		a.Process(trade("BTC", ts, i+1), &out)
		if len(out.Rejected) > 0 {
			t.Fatalf("record %d rejected: %+v", i, out.Rejected[0])
		}
		n += len(out.Candles)
		for _, c := range out.Candles {
			if c.Gap && c.OpenTime >= p.MaxIdle.Milliseconds() && c.OpenTime < now.Add(-time.Hour).UnixMilli() {
				t.Fatalf("gap candle at %s: the silence after max_idle (%s) was filled", time.UnixMilli(c.OpenTime).UTC(), p.MaxIdle)
			}
		}
	}
	runtime.ReadMemStats(&after)
	// The 1970 window, its gap candles up to max_idle, then the two real
	// windows of the new run.
	if want := int(p.MaxIdle/time.Hour) + 2; n != want {
		t.Fatalf("%d candles, want %d (the 1970 hour, %s of gap candles, two hours of the new run)", n, want, p.MaxIdle)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Fatalf("allocated %d bytes for 4 records: the work is not bounded by max_idle", alloc)
	}
}

// TestShippedMaxFutureKeepsOnTimeTrades: with the shipped defaults, a record
// stamped max_future ahead of the clock is accepted and moves the watermark
// to clock + max_future − lateness, which stays behind the clock; trades
// then arriving at most lateness − max_future after their event time (here
// every millisecond of that span, across a window boundary, with the
// smallest windows) are all counted, none is late.
func TestShippedMaxFutureKeepsOnTimeTrades(t *testing.T) {
	for _, timeframe := range []string{"1s", "1m"} {
		t.Run(timeframe, func(t *testing.T) {
			now := time.Date(2026, 11, 25, 12, 0, 0, 400_000_000, time.UTC) // 1s before it crosses a window boundary
			a, p := shipped(t, timeframe, processors.FixedClock{T: now})
			if p.MaxFuture <= 0 || p.MaxFuture > p.Lateness {
				t.Fatalf("shipped max_future %s, lateness %s: the guard must be on and at most lateness", p.MaxFuture, p.Lateness)
			}
			var out processors.Output
			a.Process(trade("ETH", now.Add(p.MaxFuture), 1), &out)
			if len(out.Rejected) > 0 {
				t.Fatalf("a record exactly max_future ahead was rejected: %+v", out.Rejected[0])
			}
			w, _ := a.Watermark()
			if w > now.UnixMilli() {
				t.Fatalf("watermark %s passed the clock %s", time.UnixMilli(w).UTC(), now)
			}
			slack := p.Lateness - p.MaxFuture
			id := 2
			for d := slack; d >= 0; d -= time.Millisecond {
				out.Reset()
				a.Process(trade("BTC", now.Add(-d), id), &out)
				id++
				for _, r := range out.Rejected {
					t.Fatalf("on-time trade stamped %s before the clock rejected: %s %s", d, r.Reason, r.Detail)
				}
			}
		})
	}
}
