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

// messy returns a random stream with everything a real one has: out-of-order
// trades, late ones, repeated ids (as numbers and strings), records without
// ids, bad records and quiet stretches.
func messy(rng *rand.Rand, n, keys int) [][]byte {
	out := make([][]byte, 0, n)
	cur := baseDay
	for i := range n {
		cur = cur.Add(time.Duration(rng.Int64N(int64(4 * time.Second))))
		if rng.IntN(100) == 0 {
			cur = cur.Add(time.Duration(rng.Int64N(int64(10 * time.Minute))))
		}
		ts := cur.Add(-time.Duration(rng.Int64N(int64(40 * time.Second))))
		if rng.IntN(30) == 0 {
			ts = cur.Add(-3 * time.Minute) // late
		}
		key := fmt.Sprintf("K%d", rng.IntN(keys))
		id := fmt.Sprintf(`,"i":%d`, i)
		switch rng.IntN(10) {
		case 0:
			id = fmt.Sprintf(`,"i":"%d"`, max(0, i-rng.IntN(20))) // often a repeat
		case 1:
			id = ""
		}
		rec := fmt.Appendf(nil, `{"s":%q,"t":%d,"p":"%d.%d","q":"%d.%03d"%s}`,
			key, ts.UnixMilli(), 1+rng.IntN(100), rng.IntN(10), rng.IntN(3), 1+rng.IntN(999), id)
		if rng.IntN(50) == 0 {
			rec = rec[:rng.IntN(len(rec))] // truncated: malformed
		}
		out = append(out, rec)
	}
	return out
}

// runWithRestarts processes recs, persisting Changes into a store at random
// batch ends; at each cut it moves the state to a fresh processor restored
// in a shuffled order. It returns every output line.
func runWithRestarts(t *testing.T, build func() processor, recs [][]byte, cuts []int, rng *rand.Rand) string {
	t.Helper()
	var b strings.Builder
	st := store{}
	p := build()
	var out Output
	for i, v := range recs {
		if len(cuts) > 0 && i == cuts[0] {
			cuts = cuts[1:]
			st.apply(p) // the checkpoint: state and offset together
			p = build()
			st.restoreInto(t, p, rng)
			fmt.Fprintf(&b, "-- cut\n")
		}
		out.Reset()
		p.Process(Record{Offset: int64(i), Value: v}, &out)
		fmtOutput(&b, &out)
		if rng != nil && rng.IntN(7) == 0 {
			st.apply(p) // an engine batch boundary
		}
	}
	return b.String()
}

func withoutCuts(s string) string { return strings.ReplaceAll(s, "-- cut\n", "") }

// TestRestartEqualsUninterrupted: cutting a stream anywhere and moving the
// state through Changes → Restore (in any order) gives exactly the outputs
// of an uninterrupted run: candles, gap candles, rejections, dedupe.
func TestRestartEqualsUninterrupted(t *testing.T) {
	configs := map[string]func(*CandleConfig){
		"gapfill+dedupe":         func(c *CandleConfig) { c.Lateness = 30 * time.Second },
		"gapfill+max_idle":       func(c *CandleConfig) { c.Lateness = 30 * time.Second; c.MaxIdle = 3 * time.Minute },
		"no gapfill":             func(c *CandleConfig) { c.Lateness = 45 * time.Second; c.GapFill = false },
		"no dedupe, no lateness": func(c *CandleConfig) { c.Dedupe = false },
		"max_idle+rollups (quiet marks)": func(c *CandleConfig) {
			c.Lateness, c.MaxIdle = 30*time.Second, 2*time.Minute
			c.Rollups = []candle.Timeframe{tfOf(t, "5m", nil), tfOf(t, "15m", nil)}
		},
		"no gapfill+rollups (quiet marks)": func(c *CandleConfig) {
			c.Lateness, c.GapFill = 45*time.Second, false
			c.Rollups = []candle.Timeframe{tfOf(t, "5m", nil), tfOf(t, "1h", nil)}
		},
	}
	tf := tfOf(t, "1m", nil)
	for name, mod := range configs {
		t.Run(name, func(t *testing.T) {
			for seed := range uint64(10) {
				rng := rand.New(rand.NewPCG(seed, 7))
				recs := messy(rng, 1500, 1+rng.IntN(6))
				build := func() processor { return newAgg(t, tf, mod) }
				want := runWithRestarts(t, build, recs, nil, nil)
				if !strings.Contains(want, " 1m ") || !strings.Contains(want, "reject") {
					t.Fatalf("seed %d: the stream produced no candles or no rejections", seed)
				}
				var cfg CandleConfig
				if mod(&cfg); len(cfg.Rollups) > 0 && !strings.Contains(want, "quiet ") {
					t.Fatalf("seed %d: no key went quiet", seed)
				}
				var cuts []int
				for c := rng.IntN(200); c < len(recs); c += 1 + rng.IntN(300) {
					cuts = append(cuts, c)
				}
				got := runWithRestarts(t, build, recs, cuts, rng)
				if withoutCuts(got) != want {
					t.Fatalf("seed %d, cuts %v: outputs differ after restarts\n%s", seed, cuts, firstDiff(got, want))
				}
			}
		})
	}
}

// TestLiveRestartEqualsUninterrupted: the same with the live idle advance
// and the future guard, driven by a clock that is a function of the record
// index (so both runs see the same wall time).
// Odd seeds run with a revision horizon: the late trades become revisions,
// some pending across the idle advance and the restarts.
func TestLiveRestartEqualsUninterrupted(t *testing.T) {
	tf := tfOf(t, "1m", nil)
	for seed := range uint64(6) {
		rng := rand.New(rand.NewPCG(seed, 11))
		recs := messy(rng, 1500, 3)
		clock := &testClock{}
		build := func() processor {
			a := newAgg(t, tf, func(c *CandleConfig) {
				c.Lateness, c.Live, c.IdleTimeout, c.MaxFuture = 20*time.Second, true, 30*time.Second, time.Minute
				c.ReviseWithin = time.Duration(seed%2) * 10 * time.Minute
			})
			a.clock = clock
			return a
		}
		run := func(cuts []int, rng *rand.Rand) string {
			var b strings.Builder
			st := store{}
			p := build()
			var out Output
			for i, v := range recs {
				if len(cuts) > 0 && i == cuts[0] {
					cuts = cuts[1:]
					st.apply(p)
					p = build()
					st.restoreInto(t, p, rng)
				}
				// Wall time runs a little ahead of event time, with idle pauses.
				clock.t = baseDay.Add(time.Duration(i)*2*time.Second + time.Duration(i/100)*6*time.Minute)
				out.Reset()
				if i%5 == 0 {
					w0, _ := p.(*Aggregator).Watermark()
					p.Tick(&out)
					if w1, _ := p.(*Aggregator).Watermark(); w1 != w0 {
						b.WriteString("-- idle advance\n")
					}
				}
				p.Process(Record{Offset: int64(i), Value: v}, &out)
				fmtOutput(&b, &out)
				if rng != nil && rng.IntN(5) == 0 {
					st.apply(p)
				}
			}
			return b.String()
		}
		want := run(nil, nil)
		if !strings.Contains(want, "reject future") || !strings.Contains(want, "-- idle advance") ||
			strings.Contains(want, " rev=") != (seed%2 == 1) {
			t.Fatalf("seed %d: the clock does not exercise the future guard and the idle advance, or revisions", seed)
		}
		var cuts []int
		for c := rng.IntN(100); c < len(recs); c += 1 + rng.IntN(200) {
			cuts = append(cuts, c)
		}
		if got := run(cuts, rng); got != want {
			t.Fatalf("seed %d: outputs differ after restarts\n%s", seed, firstDiff(got, want))
		}
	}
}

// TestRollupRestartEqualsUninterrupted is the same property for Rollup.
func TestRollupRestartEqualsUninterrupted(t *testing.T) {
	from, to := tfOf(t, "1m", nil), tfOf(t, "5m", nil)
	for seed := range uint64(10) {
		rng := rand.New(rand.NewPCG(seed, 9))
		trades := stream{keys: 4, n: 2000, start: baseDay, step: 3 * time.Second, jump: 15 * time.Minute, jitter: 10 * time.Second}.gen(rng)
		gap := rng.IntN(2) == 0
		subs := runAll(t, newAgg(t, from, func(c *CandleConfig) { c.Lateness = 20 * time.Second; c.GapFill = gap }), trades)
		recs := candleRecords(subs)
		recs = append(recs, recs[len(recs)/2]) // a replayed one: duplicate
		build := func() processor {
			r, err := NewRollup(RollupConfig{From: from, To: to})
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		want := runWithRestarts(t, build, recs, nil, nil)
		var cuts []int
		for c := rng.IntN(50); c < len(recs); c += 1 + rng.IntN(100) {
			cuts = append(cuts, c)
		}
		got := runWithRestarts(t, build, recs, cuts, rng)
		if withoutCuts(got) != want {
			t.Fatalf("seed %d: outputs differ after restarts\n%s", seed, firstDiff(got, want))
		}
	}
}

func firstDiff(got, want string) string {
	g, w := strings.Split(withoutCuts(got), "\n"), strings.Split(want, "\n")
	for i := range min(len(g), len(w)) {
		if g[i] != w[i] {
			return fmt.Sprintf("line %d:\n got: %s\nwant: %s", i+1, g[i], w[i])
		}
	}
	return fmt.Sprintf("lengths differ: %d vs %d lines", len(g), len(w))
}

// TestBoundedState: after a long stream the persisted state tracks open
// windows and active keys, not history.
func TestBoundedState(t *testing.T) {
	tf := tfOf(t, "1m", nil)
	t.Run("gap fill with max_idle forgets idle keys", func(t *testing.T) {
		a := newAgg(t, tf, func(c *CandleConfig) { c.Lateness = 10 * time.Second; c.MaxIdle = 5 * time.Minute })
		st := store{}
		var out Output
		// 5000 keys, each trading for about 2 minutes, one after another over ~8 hours.
		cur := baseDay
		for i := range 20000 {
			cur = cur.Add(1500 * time.Millisecond)
			key := i / 4
			rec := fmt.Appendf(nil, `{"s":"K%d","t":%d,"p":"1","q":"1","i":%d}`, key, cur.UnixMilli(), i)
			out.Reset()
			a.Process(Record{Offset: int64(i), Value: rec}, &out)
			if len(out.Rejected) > 0 {
				t.Fatal(fmtRejection(&out.Rejected[0]))
			}
			st.apply(a)
		}
		// Keys that traded within max_idle (+ a window) are alive: ~6 min / 6 s per key.
		if n := st.count(entryKey); n > 80 {
			t.Fatalf("%d key entries after 5000 short-lived keys; want ≤ 80 (keys idle > max_idle must be deleted)", n)
		}
		if n := a.keys.len(); n > 80 {
			t.Fatalf("%d keys in memory; want ≤ 80", n)
		}
		checkIDEntries(t, a, st)
	})
	t.Run("dedupe ids and windows are dropped when windows close", func(t *testing.T) {
		a := newAgg(t, tf, func(c *CandleConfig) { c.Lateness = 30 * time.Second; c.GapFill = false })
		st := store{}
		var out Output
		size := func() (n int) {
			for k, v := range st {
				n += len(k) + len(v)
			}
			return n
		}
		cur := baseDay
		var mid int
		const total = 60000
		for i := range total {
			cur = cur.Add(500 * time.Millisecond) // 120 trades per minute over 8 hours
			rec := fmt.Appendf(nil, `{"s":"K%d","t":%d,"p":"1","q":"1","i":%d}`, i%10, cur.UnixMilli(), i)
			out.Reset()
			a.Process(Record{Offset: int64(i), Value: rec}, &out)
			st.apply(a)
			if i == total/2 {
				mid = size()
			}
		}
		end := size()
		// Two open windows per key at most (lateness 30 s), 12 ids each per minute.
		if st.count(entryKey) > 10 || st.count(entryPartition) != 1 || end > 2*mid+1024 || end > 32<<10 {
			t.Fatalf("state grew with history: %d entries, %d bytes at the end vs %d in the middle", len(st), end, mid)
		}
		checkIDEntries(t, a, st)
		for k := range a.keys.all() {
			if len(k.wins) > 2 {
				t.Fatalf("key %s holds %d open windows; want ≤ 2", k.key, len(k.wins))
			}
		}
	})
}

func (s store) count(kind byte) (n int) {
	for k := range s {
		if k[0] == kind {
			n++
		}
	}
	return n
}

// checkIDEntries: with Changes applied after every record each id chunk holds
// one id, so stored chunks must equal the ids held by open windows exactly:
// ids of emitted windows are deleted.
func checkIDEntries(t *testing.T, a *Aggregator, st store) {
	t.Helper()
	held := 0
	for k := range a.keys.all() {
		for _, w := range k.wins {
			held += len(w.nums) + w.other.len()
		}
	}
	if n := st.count(entryIDs); n != held || held == 0 {
		t.Fatalf("%d id chunk entries stored, open windows hold %d ids", n, held)
	}
}

// TestRestoreCorruptState: damaged entries give errors, never panics, and
// entries of another processor kind are refused.
func TestRestoreCorruptState(t *testing.T) {
	tf := tfOf(t, "1m", nil)
	rng := rand.New(rand.NewPCG(5, 6))
	a := newAgg(t, tf, func(c *CandleConfig) { c.Lateness = time.Minute })
	var out Output
	for i, v := range messy(rng, 300, 3) {
		a.Process(Record{Offset: int64(i), Value: v}, &out)
	}
	st := store{}
	st.apply(a)
	if st.count(entryIDs) == 0 || st.count(entryKey) == 0 {
		t.Fatal("the stream left no key or id entries to damage")
	}
	errs := 0
	for k, v := range st {
		for cut := range len(v) {
			if err := newAgg(t, tf, nil).Restore([]byte(k), v[:cut]); err != nil {
				errs++
			}
		}
		bad := slices.Clone(v)
		bad[0] ^= 0xff
		newAgg(t, tf, nil).Restore([]byte(k), bad) // must not panic
	}
	if errs == 0 {
		t.Fatal("no truncated entry was reported as corrupt")
	}
	if err := newAgg(t, tf, nil).Restore([]byte("zzz"), []byte{1}); err == nil {
		t.Fatal("an unknown entry kind was accepted")
	}
	r, err := NewRollup(RollupConfig{From: tf, To: tfOf(t, "5m", nil)})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Restore([]byte("p"), []byte{1, 0, 0, 0}); err == nil {
		t.Fatal("a rollup accepted an aggregator's partition entry")
	}
	if err := r.Restore([]byte("kBTC"), []byte{1, 1}); err == nil {
		t.Fatal("a rollup accepted a truncated entry")
	}
}
