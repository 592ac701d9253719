package processors

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
)

// lateStream returns n trades of keys K0..K(keys-1) in arrival order: event
// times run forward with quiet stretches (so max_idle runs end and come
// back) and key S trades rarely (its runs end); most trades arrive within
// jitter of their event time, one in 8 up to maxDelay after it (or an
// eighth of that), and one in 40 is sent twice in a row (a duplicate id).
func lateStream(rng *rand.Rand, n, keys int, jitter, maxDelay time.Duration) [][]byte {
	type rec struct {
		arrive int64
		v      []byte
	}
	recs := make([]rec, 0, n+n/40)
	cur := baseDay.Add(10 * time.Hour)
	for i := range n {
		cur = cur.Add(time.Duration(rng.Int64N(int64(6 * time.Second))))
		if rng.IntN(60) == 0 {
			cur = cur.Add(time.Duration(rng.Int64N(int64(8 * time.Minute))))
		}
		delay := time.Duration(rng.Int64N(int64(jitter)))
		if rng.IntN(8) == 0 {
			delay = time.Duration(rng.Int64N(int64(maxDelay >> (rng.IntN(2) * 3)))) // often not long after
		}
		key := fmt.Sprintf("K%d", rng.IntN(keys))
		if rng.IntN(40) == 0 {
			key = "S" // a sparse key: its runs end (max_idle) and late trades bring them back
		}
		v := fmt.Appendf(nil, `{"s":%q,"t":%d,"p":"%d.%d","q":"0.%03d","i":%d}`,
			key, cur.UnixMilli(), 1+rng.IntN(50), rng.IntN(10), 1+rng.IntN(999), i)
		r := rec{cur.Add(delay).UnixMilli(), v}
		recs = append(recs, r)
		if rng.IntN(40) == 0 {
			r.arrive++
			recs = append(recs, r)
		}
	}
	slices.SortStableFunc(recs, func(a, b rec) int { return cmp.Compare(a.arrive, b.arrive) })
	out := make([][]byte, len(recs))
	for i := range recs {
		out[i] = recs[i].v
	}
	return out
}

// latest returns, per (key, open time), the last candle emitted for the
// window with its revision cleared, in (key, open time) order.
func latest(cs []candle.Candle) []candle.Candle {
	type win struct {
		key  string
		open int64
	}
	m := map[win]candle.Candle{}
	for _, c := range cs {
		m[win{c.Symbol, c.OpenTime}] = c
	}
	out := make([]candle.Candle, 0, len(m))
	for _, c := range m {
		c.Rev = 0
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b candle.Candle) int {
		return cmp.Or(strings.Compare(a.Symbol, b.Symbol), cmp.Compare(a.OpenTime, b.OpenTime))
	})
	return out
}

// collect feeds recs to p and returns its candles and rejections, and
// checks that revisions of a window go up by one (the first is rev 0) and
// that each Output holds a key's candles in window order... for the
// revisions among themselves.
func collect(t *testing.T, p processor, recs [][]byte) (cs []candle.Candle, rejected map[Reason]int) {
	t.Helper()
	rejected = map[Reason]int{}
	revs := map[string]uint32{}
	var out Output
	for i, v := range recs {
		out.Reset()
		p.Process(Record{Offset: int64(i), Value: v}, &out)
		for _, r := range out.Rejected {
			rejected[r.Reason]++
		}
		lastRev := map[string]int64{}
		for _, c := range out.Candles {
			w := fmt.Sprintf("%s@%d", c.Symbol, c.OpenTime)
			prev, seen := revs[w]
			if (!seen && c.Rev != 0) || (seen && c.Rev != prev+1) {
				t.Fatalf("record %d: %s: rev %d after rev %d (seen %v)", i, fmtCandle(&c), c.Rev, prev, seen)
			}
			revs[w] = c.Rev
			if c.Rev > 0 {
				if l, ok := lastRev[c.Symbol]; ok && c.OpenTime <= l {
					t.Fatalf("record %d: revisions of %s out of window order: %s", i, c.Symbol, fmtCandle(&c))
				}
				lastRev[c.Symbol] = c.OpenTime
			}
		}
		cs = append(cs, out.Candles...)
	}
	return cs, rejected
}

// TestReviseEqualsOnTime is the oracle of revisions: on random streams
// whose trades arrive out of order, some long after the watermark passed
// their window but inside the horizon, the latest revision of every window
// equals the candle of aggregating the same records with a lateness so
// large that none is late; with gap fill on and off, max_idle and rollup
// quiet marks.
func TestReviseEqualsOnTime(t *testing.T) {
	const (
		horizon  = 30 * time.Minute
		maxDelay = 20 * time.Minute
	)
	configs := map[string]func(*CandleConfig){
		"gapfill":                 func(c *CandleConfig) {},
		"no gapfill":              func(c *CandleConfig) { c.GapFill = false },
		"gapfill+max_idle":        func(c *CandleConfig) { c.MaxIdle = 3 * time.Minute },
		"max_idle+rollups":        func(c *CandleConfig) { c.MaxIdle = 2 * time.Minute; c.Rollups = []candle.Timeframe{tfOf(t, "5m", nil)} },
		"no gapfill+rollups":      func(c *CandleConfig) { c.GapFill = false; c.Rollups = []candle.Timeframe{tfOf(t, "15m", nil)} },
		"gapfill+max_idle, 5m tf": func(c *CandleConfig) { c.MaxIdle = 12 * time.Minute; c.Timeframe = tfOf(t, "5m", nil) },
	}
	for name, mod := range configs {
		t.Run(name, func(t *testing.T) {
			for seed := range uint64(8) {
				rng := rand.New(rand.NewPCG(seed, 20))
				recs := lateStream(rng, 1500, 1+rng.IntN(5), 4*time.Second, maxDelay)
				// A last trade far ahead closes every window in both runs.
				recs = append(recs, []byte(fmt.Sprintf(`{"s":"ZZ","t":%d,"p":"1","q":"1","i":"end"}`,
					baseDay.Add(48*time.Hour).UnixMilli())))
				tf := tfOf(t, "1m", nil)
				revised := newAgg(t, tf, func(c *CandleConfig) {
					mod(c)
					c.Lateness, c.ReviseWithin = 5*time.Second, horizon
				})
				onTime := newAgg(t, tf, func(c *CandleConfig) { mod(c); c.Lateness = 2 * maxDelay })
				got, rej := collect(t, revised, recs)
				want, wantRej := collect(t, onTime, recs)
				if rej[ReasonLate] > 0 || rej[ReasonDuplicate] != wantRej[ReasonDuplicate] || wantRej[ReasonDuplicate] == 0 {
					t.Fatalf("seed %d: rejections %v, on time %v", seed, rej, wantRej)
				}
				revs := 0
				for _, c := range got {
					if c.Rev > 0 {
						revs++
					}
				}
				if revs == 0 {
					t.Fatalf("seed %d: no revision", seed)
				}
				// The on-time run's watermark stops 2×maxDelay short of the end.
				cut := baseDay.Add(47 * time.Hour).UnixMilli()
				early := func(c candle.Candle) bool { return c.CloseTime > cut }
				g, w := slices.DeleteFunc(latest(got), early), slices.DeleteFunc(latest(want), early)
				if !slices.Equal(g, w) {
					gs, ws := fmtAll(g), fmtAll(w)
					t.Fatalf("seed %d: latest revisions differ from on-time aggregation\n%s", seed, firstDiff(gs, ws))
				}
			}
		})
	}
}

func fmtAll(cs []candle.Candle) string {
	var b strings.Builder
	for i := range cs {
		fmt.Fprintln(&b, fmtCandle(&cs[i]))
	}
	return b.String()
}

// stampLater gives a take-back of the trade old, sent after the record
// now, either the trade's own event time or, half the time, a later one:
// the time of the cancel message, up to 90s after the later of the two
// (feeds stamp take-backs so). moved says the time is in another minute
// than the trade's.
func stampLater(rng *rand.Rand, old, now []byte) (v []byte, moved bool) {
	if rng.IntN(2) == 0 {
		return old, false
	}
	ts := func(v []byte) int64 {
		_, rest, _ := strings.Cut(string(v), `"t":`)
		n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
		return n
	}
	t0 := ts(old)
	t := max(t0, ts(now)) + rng.Int64N(90_000)
	v = []byte(strings.Replace(string(old), fmt.Sprintf(`"t":%d,`, t0), fmt.Sprintf(`"t":%d,`, t), 1))
	return v, t/60_000 != t0/60_000
}

// withTakeBacks adds cancels and corrections of earlier records of recs
// (sometimes repeated, sometimes of an unknown id) at random later places,
// stamped with the trade's time or a later one; acts says which records
// take back a trade.
func withTakeBacks(rng *rand.Rand, recs [][]byte) ([][]byte, []candle.Action) {
	out := make([][]byte, 0, len(recs)+len(recs)/10)
	acts := make([]candle.Action, 0, cap(out))
	for i, v := range recs {
		out, acts = append(out, v), append(acts, candle.ActionTrade)
		if i < 20 || rng.IntN(12) != 0 {
			continue
		}
		old, _ := stampLater(rng, out[len(out)-1-rng.IntN(min(len(out), 300))], v)
		act := candle.ActionCancel
		switch rng.IntN(4) {
		case 0:
			act = candle.ActionCorrect
			old = []byte(strings.Replace(string(old), `"p":"`, fmt.Sprintf(`"p":"%d`, 1+rng.IntN(9)), 1))
		case 1:
			old = []byte(strings.Replace(string(old), `"i":`, `"i":9`, 1)) // no such id
		}
		for range 1 + rng.IntN(2) { // sometimes twice: a duplicate
			out, acts = append(out, old), append(acts, act)
		}
	}
	return out, acts
}

// withActs is an aggregator whose record at offset i takes back a trade
// as acts[i] says.
type withActs struct {
	*Aggregator
	acts []candle.Action
}

func (p withActs) Process(rec Record, out *Output) { p.processAs(rec, p.acts[rec.Offset], out) }

// TestReviseRestartEqualsUninterrupted: with a revision horizon, cutting a
// stream anywhere (pending revisions, kept windows, trade logs, cancels)
// and restoring the state in any order gives exactly the outputs of an
// uninterrupted run.
func TestReviseRestartEqualsUninterrupted(t *testing.T) {
	configs := map[string]func(*CandleConfig){
		"gapfill+dedupe":   func(c *CandleConfig) {},
		"max_idle+rollups": func(c *CandleConfig) { c.MaxIdle = 2 * time.Minute; c.Rollups = []candle.Timeframe{tfOf(t, "5m", nil)} },
		"no gapfill":       func(c *CandleConfig) { c.GapFill = false },
		"no dedupe":        func(c *CandleConfig) { c.Dedupe = false; c.MaxIdle = 5 * time.Minute },
	}
	tf := tfOf(t, "1m", nil)
	for name, mod := range configs {
		t.Run(name, func(t *testing.T) {
			for seed := range uint64(6) {
				rng := rand.New(rand.NewPCG(seed, 21))
				// Delays up to 40m against a horizon of 15m: some late trades
				// revise, some are beyond the horizon.
				recs, acts := withTakeBacks(rng, lateStream(rng, 1500, 1+rng.IntN(4), 4*time.Second, 40*time.Minute))
				build := func() processor {
					return withActs{newAgg(t, tf, func(c *CandleConfig) { mod(c); c.Lateness, c.ReviseWithin = 5*time.Second, 15*time.Minute }), acts}
				}
				run := func(cuts []int, rng *rand.Rand) string {
					return withoutCuts(runWithRestarts(t, build, recs, cuts, rng))
				}
				want := run(nil, nil)
				for _, s := range []string{" rev=", "reject late", "reject unknown_trade", "reject duplicate", "reject beyond_horizon"} {
					if !strings.Contains(want, s) {
						t.Fatalf("seed %d: the stream gives no %q", seed, s)
					}
				}
				var cuts []int
				for c := rng.IntN(100); c < len(recs); c += 1 + rng.IntN(250) {
					cuts = append(cuts, c)
				}
				if got := run(cuts, rng); got != want {
					t.Fatalf("seed %d, cuts %v: outputs differ after restarts\n%s", seed, cuts, firstDiff(got, want))
				}
			}
		})
	}
}

// TestReviseTurnedOnAndOff: state written without a horizon restores under
// one: the windows emitted before are final (a trade for them is late), later
// ones are revised; turned off again, the kept windows and trade logs leave
// the state and late trades are late.
func TestReviseTurnedOnAndOff(t *testing.T) {
	tf := tfOf(t, "1m", nil)
	build := func(h time.Duration) *Aggregator {
		return newAgg(t, tf, func(c *CandleConfig) { c.Lateness, c.ReviseWithin = 5*time.Second, h })
	}
	rng := rand.New(rand.NewPCG(3, 22))
	recs := lateStream(rng, 3000, 3, 4*time.Second, 10*time.Minute)
	third := len(recs) / 3
	st := store{}
	var out Output
	p := build(0)
	for i, v := range recs[:third] {
		p.Process(Record{Offset: int64(i), Value: v}, &out)
	}
	if strings.Contains(fmtAll(out.Candles), "rev=") {
		t.Fatal("a revision without a horizon")
	}
	st.apply(p)
	switchWM, _ := p.Watermark()
	p = build(time.Hour)
	st.restoreInto(t, p, rng)
	out.Reset()
	lateBefore := 0
	for i, v := range recs[third : 2*third] {
		p.Process(Record{Offset: int64(third + i), Value: v}, &out)
		for _, r := range out.Rejected {
			if r.Reason != ReasonLate && r.Reason != ReasonDuplicate {
				t.Fatalf("record %d: %s", i, fmtRejection(&r))
			}
			if r.Reason == ReasonLate {
				lateBefore++
			}
		}
		out.Rejected = out.Rejected[:0]
	}
	revs := 0
	for _, c := range out.Candles {
		if c.CloseTime <= switchWM {
			t.Fatalf("a window closed before the horizon was turned on changed: %s", fmtCandle(&c))
		}
		if c.Rev > 0 {
			revs++
		}
	}
	if lateBefore == 0 || revs == 0 {
		t.Fatalf("%d late trades for windows before the switch, %d revisions: the stream tests nothing", lateBefore, revs)
	}
	st.apply(p)
	trades := func() int {
		n := 0
		for k := range st {
			if k[0] == entryTrades {
				n++
			}
		}
		return n
	}
	if trades() == 0 {
		t.Fatal("no trade log in the state")
	}
	// Off again: the same outputs with and without a restart in between
	// (dedupe keeps the ids that were in the trade logs).
	off := st
	run := func(cut int) string {
		st = store{}
		for k, v := range off {
			st[k] = v
		}
		p = build(0)
		st.restoreInto(t, p, rng)
		out.Reset()
		for i, v := range recs[2*third:] {
			if i == 2 {
				if cut == 2 {
					st.apply(p)
					p = build(0)
					st.restoreInto(t, p, rng)
				}
				for _, v := range recs[2*third-10 : 2*third] { // again: duplicates of trades counted with the horizon
					p.Process(Record{Value: v}, &out)
				}
			}
			p.Process(Record{Offset: int64(2*third + i), Value: v}, &out)
		}
		st.apply(p)
		var b strings.Builder
		fmtOutput(&b, &out)
		return b.String()
	}
	if a, b := run(-1), run(2); a != b || !strings.Contains(a, "reject duplicate") {
		t.Fatalf("turned off: a restart changes the outputs\n%s", firstDiff(b, a))
	}
	if n := trades(); n != 0 || strings.Contains(fmtAll(out.Candles), "rev=") {
		t.Fatalf("turned off: %d trade log entries left, or a revision", n)
	}
	for k, v := range st {
		if k[0] == entryKey && v[1]&flagRevise != 0 {
			t.Fatalf("turned off: key entry %q still has a revision section", k)
		}
	}
}

// TestReviseTakeBacksEqualOnTime: with cancels and corrections inside the
// horizon, the latest revision of every window is the on-time aggregation
// of the records as taken back (cancelled trades left out, corrected ones
// at their place with the new price), but for the windows the cancels
// emptied: those stay as gap candles.
func TestReviseTakeBacksEqualOnTime(t *testing.T) {
	tf := tfOf(t, "1m", nil)
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 23))
		trades := lateStream(rng, 1500, 1+rng.IntN(4), 4*time.Second, 10*time.Minute)
		idOf := func(v []byte) string {
			_, rest, _ := strings.Cut(string(v), `"i":`)
			return strings.TrimSuffix(rest, "}")
		}
		var recs [][]byte
		var acts []candle.Action
		cancelled := map[string]bool{}
		price := map[string]string{} // id → corrected record
		moved := 0                   // take-backs stamped in another window than their trade's
		for i, v := range trades {
			recs, acts = append(recs, v), append(acts, candle.ActionTrade)
			if i < 20 || rng.IntN(10) != 0 {
				continue
			}
			old := trades[i-1-rng.IntN(min(i, 200))]
			id := idOf(old)
			act := candle.ActionCancel
			switch rng.IntN(4) {
			case 0:
				act = candle.ActionCorrect
				old = []byte(strings.Replace(string(old), `"p":"`, fmt.Sprintf(`"p":"%d`, 1+rng.IntN(9)), 1))
				if !cancelled[id] {
					price[id] = string(old) // at the trade's time
				}
			case 1:
				old = []byte(strings.Replace(string(old), `"i":`+id+`}`, `"i":"u`+id+`"}`, 1)) // an unknown id
			default:
				cancelled[id] = true
			}
			old, m := stampLater(rng, old, v)
			if m {
				moved++
			}
			recs, acts = append(recs, old), append(acts, act)
		}
		recs = append(recs, []byte(fmt.Sprintf(`{"s":"ZZ","t":%d,"p":"1","q":"1","i":"end"}`, baseDay.Add(48*time.Hour).UnixMilli())))
		acts = append(acts, candle.ActionTrade)
		var oracle [][]byte
		for _, v := range trades {
			id := idOf(v)
			if cancelled[id] {
				continue
			}
			if c, ok := price[id]; ok {
				v = []byte(c)
			}
			oracle = append(oracle, v)
		}
		oracle = append(oracle, recs[len(recs)-1])
		revised := withActs{newAgg(t, tf, func(c *CandleConfig) { c.Lateness, c.ReviseWithin = 5*time.Second, time.Hour }), acts}
		got, rej := collect(t, revised, recs)
		want, _ := collect(t, newAgg(t, tf, func(c *CandleConfig) { c.Lateness = time.Hour }), oracle)
		if rej[ReasonLate]+rej[ReasonBeyondHorizon]+rej[ReasonMalformedJSON] > 0 || rej[ReasonUnknownTrade] == 0 || moved < 20 {
			t.Fatalf("seed %d: rejections %v, %d take-backs stamped in another window", seed, rej, moved)
		}
		cut := baseDay.Add(47 * time.Hour).UnixMilli()
		early := func(c candle.Candle) bool { return c.CloseTime > cut }
		g, w := slices.DeleteFunc(latest(got), early), slices.DeleteFunc(latest(want), early)
		wm := map[string]candle.Candle{}
		for _, c := range w {
			wm[fmt.Sprintf("%s@%d", c.Symbol, c.OpenTime)] = c
		}
		emptied := 0
		for _, c := range g {
			k := fmt.Sprintf("%s@%d", c.Symbol, c.OpenTime)
			wc, ok := wm[k]
			delete(wm, k)
			switch {
			case ok && wc.Equal(&c):
			case !ok && c.Gap:
				emptied++ // its trades were all cancelled, before any other candle of its key
			default:
				t.Fatalf("seed %d: got %s\nwant %s (%v)", seed, fmtCandle(&c), fmtCandle(&wc), ok)
			}
		}
		for _, c := range wm {
			t.Fatalf("seed %d: no candle for %s", seed, fmtCandle(&c))
		}
		if emptied > 3 {
			t.Fatalf("seed %d: %d windows emptied before any candle of their key", seed, emptied)
		}
	}
}

// TestRevisionCounts: the counts for metrics follow the late trades,
// cancels, corrections and revisions, and start again after each take.
func TestRevisionCounts(t *testing.T) {
	a := newAgg(t, tfOf(t, "1m", nil), func(c *CandleConfig) { c.GapFill, c.ReviseWithin = false, time.Hour })
	var out Output
	for i, r := range []struct {
		act candle.Action
		v   string
	}{
		{0, `{"s":"A","t":"2024-01-01T10:00:10Z","p":"1","q":"1","i":1}`},
		{0, `{"s":"A","t":"2024-01-01T10:00:20Z","p":"2","q":"1","i":2}`},
		{0, `{"s":"A","t":"2024-01-01T10:02:00Z","p":"3","q":"1","i":3}`},
		{0, `{"s":"A","t":"2024-01-01T10:01:00Z","p":"4","q":"1","i":4}`}, // late: a window without a candle
		{candle.ActionCancel, `{"s":"A","t":"2024-01-01T10:00:10Z","p":"1","q":"1","i":1}`},
		{candle.ActionCorrect, `{"s":"A","t":"2024-01-01T10:00:20Z","p":"5","q":"1","i":2}`},
		{0, `{"s":"A","t":"2024-01-01T10:03:00Z","p":"3","q":"1","i":5}`},
	} {
		a.processAs(Record{Offset: int64(i), Value: []byte(r.v)}, r.act, &out)
	}
	if len(out.Rejected) > 0 {
		t.Fatal(fmtRejection(&out.Rejected[0]))
	}
	want := RevisionCounts{Revisions: 2, LateTrades: 1, Cancels: 1, Corrections: 1}
	if got := a.TakeRevisionCounts(); got != want {
		t.Fatalf("counts %+v, want %+v", got, want)
	}
	if got := a.TakeRevisionCounts(); got != (RevisionCounts{}) {
		t.Fatalf("counts after a take: %+v", got)
	}
}

// TestReviseOpenWindowFromBefore: a window open when the horizon was
// turned on holds trades its log lacks: a cancel in it is refused
// (beyond_horizon) rather than recomputing the window without them.
func TestReviseOpenWindowFromBefore(t *testing.T) {
	tf := tfOf(t, "1m", nil)
	var out Output
	p := newAgg(t, tf, nil)
	p.Process(Record{Value: []byte(`{"s":"A","t":"2024-01-01T10:00:10Z","p":"1","q":"1","i":1}`)}, &out)
	st := store{}
	st.apply(p)
	p = newAgg(t, tf, func(c *CandleConfig) { c.ReviseWithin = time.Hour })
	st.restoreInto(t, p, nil)
	p.Process(Record{Value: []byte(`{"s":"A","t":"2024-01-01T10:00:20Z","p":"2","q":"1","i":2}`)}, &out)
	p.processAs(Record{Value: []byte(`{"s":"A","t":"2024-01-01T10:00:20Z","p":"2","q":"1","i":2}`)}, candle.ActionCancel, &out)
	p.Process(Record{Value: []byte(`{"s":"A","t":"2024-01-01T10:01:00Z","p":"3","q":"1","i":3}`)}, &out)
	var b strings.Builder
	fmtOutput(&b, &out)
	want := "reject beyond_horizon A offset=0: cancel of trade \"2\": window 2024-01-01T10:00:00.000Z of 1m was open when revisions were turned on: its trades from before are not kept\n" +
		"A 1m 10:00:00 o=1 h=2 l=1 c=2 v=2 q=3 n=2 ids=1..2\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}
