package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/internal/gen"
	"github.com/kandle/kandle/internal/testkit"
)

// The sink topology as shipped, fed in real time: trades stamped with the
// wall clock as they are produced (disorder below the lateness), candles of
// 1s rolled up to 5s and 15s (the processors keep the harness's names),
// live hashes kept 10m (not twice the timeframe), max_idle 3s so that each key's run of candles ends 3 s after the input
// and the candles settle. The lateness, idle_timeout and max_future are the
// shipped ones, so the idle advance by the wall clock runs on every caught-up
// quiet partition. Every sink then holds exactly the candles on the topics,
// their number is what the input makes (every window from a key's first
// trade to max_idle after its last), the ledger holds each valid trade once,
// and no trade was dead-lettered late.
func TestSinksRealTime(t *testing.T) {
	testkit.WallClockTest(t)
	h := newSXHarnessWith(t, func(top string) string {
		for _, r := range [][2]string{
			{"timeframe: 1m, max_idle: 10m,", "timeframe: 1s, max_idle: 3s,"},
			{"timeframe: 5m,", "timeframe: 5s,"},
			{"timeframe: 1h,", "timeframe: 15s,"},
			{"ttl_by_timeframe: {1m: 7d, 5m: 30d}", "ttl_by_timeframe: {1s: 7d, 5s: 30d}"},
			// The live hashes expire after twice the timeframe by
			// default: 2 s here, less than the checks take.
			{"    coalesce: 20ms\n", "    coalesce: 20ms\n    active_ttl: 10m\n"},
		} {
			if !strings.Contains(top, r[0]) {
				t.Fatalf("the sink topology lacks %q", r[0])
			}
			top = strings.Replace(top, r[0], r[1], 1)
		}
		return top
	})
	defer h.shutdown()
	h.startRun()

	cfg := gen.DefaultConfig()
	cfg.Count, cfg.Span, cfg.Seed, cfg.Rate = 0, 0, 11, 200
	cfg.Start = time.Now().Truncate(time.Millisecond)
	cfg.Disorder = 500 * time.Millisecond
	cfg.DupRate, cfg.MalformedRate = 0.03, 0.02
	cfg.Count = h.produceRealTime(cfg, 8*time.Second)
	t.Logf("produced %d records in real time", cfg.Count)

	ledger := wantLedger(t, cfg)
	for k, tr := range ledger {
		if strings.HasPrefix(tr.Symbol, "ZZ-P") {
			delete(ledger, k) // no closers here: the idle advance closes the windows
		}
	}
	want := map[string]int{}
	first, last := map[string]int64{}, map[string]int64{}
	for _, tr := range ledger {
		var ts int64
		fmt.Sscan(tr.TS, &ts)
		if f, ok := first[tr.Symbol]; !ok || ts < f {
			first[tr.Symbol] = ts
		}
		last[tr.Symbol] = max(last[tr.Symbol], ts)
	}
	for sym, f := range first {
		end := last[sym] + 3000 // max_idle: windows open before it
		for tf, ms := range map[string]int64{"1s": 1000, "5s": 5000, "15s": 15000} {
			want[tf] += int((end-1)/ms - f/ms + 1)
		}
	}
	var candles map[string]int
	for deadline := time.Now().Add(60 * time.Second); ; {
		got := map[string]int{}
		for _, c := range h.topicCandles() {
			got[c.Timeframe]++
		}
		if fmt.Sprint(got) == fmt.Sprint(want) {
			candles = got
			break
		}
		h.running()
		if time.Now().After(deadline) {
			t.Fatalf("the topics hold %v candles, want %v", got, want)
		}
		time.Sleep(300 * time.Millisecond)
	}
	truth := h.topicCandles()
	h.waitSinks(truth, ledger, 40*time.Second)
	late := 0
	for _, r := range testkit.ReadTopic(t, []string{h.broker}, "sx.dlq") {
		for _, hd := range r.Headers {
			if hd.Key == "kandle.reason" && string(hd.Value) == "late" {
				late++
			}
		}
	}
	if late > 0 {
		t.Errorf("%d on-time trades were dead-lettered late", late)
	}
	t.Logf("%v candles, %d ledger trades exact in every sink", candles, len(ledger))
}

// produceRealTime sends cfg's records (Rate a second, Count 0) to trades,
// each when the wall clock reaches its event time, for d; it returns how
// many it sent.
func (h *sxHarness) produceRealTime(cfg gen.Config, d time.Duration) int {
	t := h.t
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.broker), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	g, err := gen.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	part := kgo.StickyKeyPartitioner(nil).ForTopic("trades")
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	n := 0
	for range tick.C {
		elapsed := time.Since(cfg.Start)
		if elapsed > d {
			break
		}
		for due := int(elapsed.Seconds() * cfg.Rate); n < due; n++ {
			k, v, _ := g.Next()
			r := &kgo.Record{Topic: "trades", Key: k, Value: v}
			r.Partition = int32(part.Partition(r, 3))
			cl.Produce(h.ctx, r, func(_ *kgo.Record, err error) {
				if err != nil {
					t.Errorf("produce: %v", err)
				}
			})
		}
		if err := cl.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return n
}
