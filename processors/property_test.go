package processors

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
)

// stream describes a random trade stream with no late trades: event times
// run forward by up to 2×step per trade (sometimes jumping idle stretches)
// and go backwards by less than jitter, which is below the lateness used.
type stream struct {
	keys   int
	n      int
	start  time.Time
	step   time.Duration
	jump   time.Duration // an occasional quiet stretch of up to this long
	jitter time.Duration
	fade   bool // key Kj stops trading after (j+1)/keys of the stream: keys go quiet for good
}

func (s stream) gen(rng *rand.Rand) [][]byte {
	out := make([][]byte, 0, s.n)
	cur := s.start
	for i := range s.n {
		cur = cur.Add(time.Duration(rng.Int64N(int64(2*s.step) + 1)))
		if s.jump > 0 && rng.IntN(50) == 0 {
			cur = cur.Add(time.Duration(rng.Int64N(int64(s.jump))))
		}
		ts := cur.Add(-time.Duration(rng.Int64N(int64(s.jitter))))
		key := rng.IntN(s.keys)
		if s.fade {
			key = s.keys - 1 - rng.IntN(max(1, s.keys*(s.n-i)/s.n))
		}
		// The side is a hash of i, not drawn from rng: the streams stay
		// those the seeds always gave.
		out = append(out, fmt.Appendf(nil, `{"s":"K%d","t":%d,"p":"%d.%02d","q":"0.%03d","i":%d,"side":"%s"}`,
			key, ts.UnixMilli(), 1+rng.IntN(200), rng.IntN(100), 1+rng.IntN(999), i, [2]string{"buy", "sell"}[(uint32(i)*2654435761)>>31]))
	}
	return out
}

func newAgg(t testing.TB, tf candle.Timeframe, mod func(*CandleConfig)) *Aggregator {
	t.Helper()
	dec, err := NewDecoder(DecoderConfig{Fields: Fields{Key: "s", Time: "t", Price: "p", Qty: "q", ID: "i"}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := CandleConfig{Timeframe: tf, Decoder: dec, GapFill: true, Dedupe: true}
	if mod != nil {
		mod(&cfg)
	}
	a, err := NewAggregator(cfg, FixedClock{T: baseDay})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func tfOf(t testing.TB, s string, loc *time.Location) candle.Timeframe {
	t.Helper()
	tf, err := candle.ParseTimeframe(s, loc)
	if err != nil {
		t.Fatal(err)
	}
	return tf
}

// runAll feeds records to p and returns every candle it emits; it fails on
// any rejection.
func runAll(t testing.TB, p processor, recs [][]byte) []candle.Candle {
	t.Helper()
	var all []candle.Candle
	var out Output
	for i, v := range recs {
		out.Reset()
		p.Process(Record{Offset: int64(i), Value: v}, &out)
		if len(out.Rejected) > 0 {
			t.Fatalf("record %d rejected: %s", i, fmtRejection(&out.Rejected[0]))
		}
		all = append(all, out.Candles...)
	}
	return all
}

func candleRecords(cs []candle.Candle) [][]byte {
	recs := make([][]byte, len(cs))
	for i := range cs {
		recs[i] = cs[i].AppendJSON(nil)
	}
	return recs
}

func rollupOf(t testing.TB, from, to candle.Timeframe, subs []candle.Candle) []candle.Candle {
	t.Helper()
	r, err := NewRollup(RollupConfig{From: from, To: to})
	if err != nil {
		t.Fatal(err)
	}
	return runAll(t, r, candleRecords(subs))
}

func sameCandles(t *testing.T, what string, got, want []candle.Candle) {
	t.Helper()
	if len(want) == 0 {
		t.Fatalf("%s: the direct aggregator emitted nothing: the stream is too short", what)
	}
	if slices.Equal(got, want) {
		return
	}
	var g, w strings.Builder
	for i := range got {
		fmt.Fprintln(&g, fmtCandle(&got[i]))
	}
	for i := range want {
		fmt.Fprintln(&w, fmtCandle(&want[i]))
	}
	t.Fatalf("%s: rollup differs from direct aggregation\nrollup (%d):\n%s\ndirect (%d):\n%s",
		what, len(got), g.String(), len(want), w.String())
}

// TestRollupEqualsDirect checks the rollup property of docs/contract.md on many random
// streams: when no trade is late, rolling up closed lower candles gives
// exactly the candles of aggregating the same trades directly, taker buy
// volumes and first/last trade ids included.
func TestRollupEqualsDirect(t *testing.T) {
	seoul, err := time.LoadLocation("Asia/Seoul")
	if err != nil {
		t.Fatal(err)
	}
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		chain    []string // lower to higher; each is rolled up from the previous
		loc      *time.Location
		s        stream
		lateness time.Duration
	}{
		{"1m→5m", []string{"1m", "5m"}, nil,
			stream{keys: 4, n: 3000, start: baseDay, step: 2 * time.Second, jump: 20 * time.Minute, jitter: 20 * time.Second}, 30 * time.Second},
		{"1m→5m→1h", []string{"1m", "5m", "1h"}, nil,
			stream{keys: 3, n: 3000, start: baseDay, step: 5 * time.Second, jump: 80 * time.Minute, jitter: 50 * time.Second}, time.Minute},
		{"1m→1h", []string{"1m", "1h"}, nil,
			stream{keys: 5, n: 3000, start: baseDay, step: 5 * time.Second, jump: time.Hour, jitter: 30 * time.Second}, 40 * time.Second},
		{"1d→1w Seoul", []string{"1d", "1w"}, seoul,
			stream{keys: 3, n: 1500, start: baseDay, step: 2 * time.Hour, jump: 10 * 24 * time.Hour, jitter: 3 * time.Hour}, 4 * time.Hour},
		{"1d→1M New York", []string{"1d", "1M"}, ny,
			stream{keys: 3, n: 1500, start: time.Date(2024, 1, 20, 0, 0, 0, 0, time.UTC), step: 6 * time.Hour, jump: 40 * 24 * time.Hour, jitter: 5 * time.Hour}, 6 * time.Hour},
		{"4h→1d Seoul", []string{"1h", "1d"}, seoul,
			stream{keys: 2, n: 2000, start: baseDay, step: 30 * time.Minute, jump: 3 * 24 * time.Hour, jitter: 20 * time.Minute}, 30 * time.Minute},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for seed := range uint64(8) {
				rng := rand.New(rand.NewPCG(seed, 42))
				recs := c.s.gen(rng)
				tfs := make([]candle.Timeframe, len(c.chain))
				for i, s := range c.chain {
					tfs[i] = tfOf(t, s, c.loc)
				}
				// With the side mapped, so taker volumes and trade ids are
				// compared too.
				late := func(cfg *CandleConfig) {
					cfg.Lateness = c.lateness
					dec, err := NewDecoder(DecoderConfig{Fields: Fields{Key: "s", Time: "t", Price: "p", Qty: "q", ID: "i", Side: "side"}})
					if err != nil {
						t.Fatal(err)
					}
					cfg.Decoder = dec
				}
				level := runAll(t, newAgg(t, tfs[0], late), recs)
				for i := 1; i < len(tfs); i++ {
					direct := runAll(t, newAgg(t, tfs[i], late), recs)
					level = rollupOf(t, tfs[i-1], tfs[i], level)
					sameCandles(t, fmt.Sprintf("seed %d, %s", seed, strings.Join(c.chain[:i+1], "→")), level, direct)
				}
			}
		})
	}
}

// item is one record of an output topic: a candle, or a quiet mark.
type item struct {
	c    candle.Candle
	mark *QuietMark
}

// levelOut appends out to items the way the engine writes it: candles, then
// quiet marks.
func levelOut(items []item, out *Output) []item {
	for _, c := range out.Candles {
		items = append(items, item{c: c})
	}
	for _, m := range out.Quiet {
		items = append(items, item{mark: &m})
	}
	return items
}

func candlesOf(items []item) []candle.Candle {
	var cs []candle.Candle
	for _, it := range items {
		if it.mark == nil {
			cs = append(cs, it.c)
		}
	}
	return cs
}

// rollupItems feeds items (candles and marks) to r and returns its output.
func rollupItems(t testing.TB, r *Rollup, in []item) []item {
	t.Helper()
	var items []item
	var out Output
	for i, it := range in {
		out.Reset()
		if it.mark != nil {
			r.Quiet(*it.mark, &out)
		} else {
			r.Process(Record{Offset: int64(i), Value: it.c.AppendJSON(nil)}, &out)
		}
		if len(out.Rejected) > 0 {
			t.Fatalf("item %d rejected: %s", i, fmtRejection(&out.Rejected[0]))
		}
		items = levelOut(items, &out)
	}
	return items
}

// aggItems feeds trades to a and returns its output (candles and marks).
func aggItems(t testing.TB, a *Aggregator, recs [][]byte) []item {
	t.Helper()
	var items []item
	var out Output
	for i, v := range recs {
		out.Reset()
		a.Process(Record{Offset: int64(i), Value: v}, &out)
		if len(out.Rejected) > 0 {
			t.Fatalf("record %d rejected: %s", i, fmtRejection(&out.Rejected[0]))
		}
		items = levelOut(items, &out)
	}
	return items
}

// byKey orders candles by key, keeping each key's order: rollups emit each
// key's candles in order, but across keys in the order their sub-candles
// (or quiet marks) arrive, which differs from a direct aggregator's.
func byKey(cs []candle.Candle) []candle.Candle {
	cs = slices.Clone(cs)
	slices.SortStableFunc(cs, func(a, b candle.Candle) int { return strings.Compare(a.Symbol, b.Symbol) })
	return cs
}

// TestRollupEqualsDirectQuiet: the rollup property also holds for keys that
// go quiet (max_idle shorter than the higher windows, keys that stop for
// good, long silences): each quiet key's open rollup windows close exactly
// as direct aggregation at the higher timeframe with the same max_idle
// closes them, driven by the base aggregator's quiet marks.
func TestRollupEqualsDirectQuiet(t *testing.T) {
	seoul, err := time.LoadLocation("Asia/Seoul")
	if err != nil {
		t.Fatal(err)
	}
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name              string
		chain             []string
		loc               *time.Location
		s                 stream
		lateness, maxIdle time.Duration
		noGap             bool // gap_fill off: a run ends whenever a key has no open window
	}{
		{"1m→5m", []string{"1m", "5m"}, nil,
			stream{keys: 5, n: 3000, start: baseDay, step: 2 * time.Second, jump: 20 * time.Minute, jitter: 20 * time.Second, fade: true},
			30 * time.Second, 3 * time.Minute, false},
		{"1m→5m→1h", []string{"1m", "5m", "1h"}, nil,
			stream{keys: 4, n: 3000, start: baseDay, step: 5 * time.Second, jump: 80 * time.Minute, jitter: 50 * time.Second, fade: true},
			time.Minute, 7 * time.Minute, false},
		{"1m→1h", []string{"1m", "1h"}, nil,
			stream{keys: 5, n: 3000, start: baseDay, step: 5 * time.Second, jump: time.Hour, jitter: 30 * time.Second},
			40 * time.Second, 90 * time.Second, false},
		{"1d→1w Seoul", []string{"1d", "1w"}, seoul,
			stream{keys: 3, n: 1500, start: baseDay, step: 2 * time.Hour, jump: 10 * 24 * time.Hour, jitter: 3 * time.Hour, fade: true},
			4 * time.Hour, 50 * time.Hour, false},
		{"1d→1M New York", []string{"1d", "1M"}, ny,
			stream{keys: 3, n: 1500, start: time.Date(2024, 1, 20, 0, 0, 0, 0, time.UTC), step: 6 * time.Hour, jump: 40 * 24 * time.Hour, jitter: 5 * time.Hour, fade: true},
			6 * time.Hour, 5 * 24 * time.Hour, false},
		{"1h→1d Seoul", []string{"1h", "1d"}, seoul,
			stream{keys: 3, n: 2000, start: baseDay, step: 30 * time.Minute, jump: 3 * 24 * time.Hour, jitter: 20 * time.Minute, fade: true},
			30 * time.Minute, 5 * time.Hour, false},
		{"1m→5m→1h without gap fill", []string{"1m", "5m", "1h"}, nil,
			stream{keys: 6, n: 3000, start: baseDay, step: 10 * time.Second, jump: 80 * time.Minute, jitter: 20 * time.Second, fade: true},
			30 * time.Second, 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			quiet := 0
			// Many streams: a key's quiet stretches line up with the rollup
			// boundaries only in some of them (one in six or so, for the
			// silences between two trading windows without gap fill).
			for seed := range uint64(32) {
				rng := rand.New(rand.NewPCG(seed, 7))
				recs := c.s.gen(rng)
				tfs := make([]candle.Timeframe, len(c.chain))
				for i, s := range c.chain {
					tfs[i] = tfOf(t, s, c.loc)
				}
				cfg := func(rollups []candle.Timeframe) func(*CandleConfig) {
					return func(cfg *CandleConfig) {
						cfg.Lateness, cfg.MaxIdle, cfg.Rollups, cfg.GapFill = c.lateness, c.maxIdle, rollups, !c.noGap
					}
				}
				level := aggItems(t, newAgg(t, tfs[0], cfg(tfs[1:])), recs)
				for _, it := range level {
					if it.mark != nil {
						quiet++
					}
				}
				for i := 1; i < len(tfs); i++ {
					direct := runAll(t, newAgg(t, tfs[i], cfg(nil)), recs)
					r, err := NewRollup(RollupConfig{From: tfs[i-1], To: tfs[i]})
					if err != nil {
						t.Fatal(err)
					}
					level = rollupItems(t, r, level)
					sameCandles(t, fmt.Sprintf("seed %d, %s", seed, strings.Join(c.chain[:i+1], "→")),
						byKey(candlesOf(level)), byKey(direct))
				}
			}
			if quiet == 0 {
				t.Fatal("no key went quiet: the streams do not exercise max_idle")
			}
		})
	}
}
