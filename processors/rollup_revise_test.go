package processors

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
)

// TestDataDrivenReviseRollup runs the fixtures in testdata/revise-rollup/:
// the rules of a rollup with a revision horizon (see Rollup), with the
// directives of TestDataDriven.
func TestDataDrivenReviseRollup(t *testing.T) {
	files, err := filepath.Glob("testdata/revise-rollup/*")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no fixtures in testdata/revise-rollup")
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			h := &ddHarness{clock: &testClock{t: baseDay}, st: store{}}
			datadriven.RunTest(t, path, h.run)
		})
	}
}

// reviseStream is a random sub-candle series of several keys, each key's
// sub-candles in time order (some windows skipped, some gaps), with random
// revisions of a key's earlier sub-candles inside the horizon (newer revs
// of kept ones, and rev 0 ones for skipped windows: a late trade created
// them) and replays of sub-candles already sent.
type reviseStream struct {
	tf      candle.Timeframe
	keys, n int
	skip    int           // a key's next sub-candle opens 1..skip windows after its last
	horizon time.Duration // revisions only of sub-candles closing after the key's latest − horizon
}

type revRec struct {
	c candle.Candle
	// want is the reason the rollup must reject it for ("" for none): a
	// replay is a duplicate, or beyond the horizon when it is a revision
	// (rev > 0) of a sub-candle closing at or before the key's latest −
	// horizon.
	want Reason
}

func (s reviseStream) gen(rng *rand.Rand, start int64) []revRec {
	type keyGen struct {
		subs  map[int64]candle.Candle // latest revision of each sub-candle sent, by open time
		next  int64
		last  int64 // close of the latest sub-candle in time
		price int64
	}
	gens := make([]*keyGen, s.keys)
	for i := range gens {
		gens[i] = &keyGen{subs: map[int64]candle.Candle{}, next: s.tf.Start(start), price: 100}
	}
	mk := func(key string, open int64, gap bool, prev int64, rev uint32) (candle.Candle, int64) {
		c := candle.Candle{Symbol: key, Timeframe: s.tf.String(), OpenTime: open, CloseTime: s.tf.End(open), Rev: rev}
		d := func(x int64) decimal.Decimal { return decimal.MustParse(strconv.FormatInt(x, 10)) }
		if gap {
			c.Open, c.High, c.Low, c.Close, c.Gap = d(prev), d(prev), d(prev), d(prev), true
			return c, prev
		}
		o, cl := prev+rng.Int64N(7)-3, prev+rng.Int64N(7)-3
		c.Open, c.Close = d(o), d(cl)
		c.High, c.Low = d(max(o, cl)+rng.Int64N(3)), d(min(o, cl)-rng.Int64N(3))
		c.Trades = 1 + rng.Int64N(5)
		c.Volume = decimal.SumOf(d(c.Trades))
		c.QuoteVolume = decimal.SumOf(d(c.Trades * cl))
		return c, cl
	}
	var out []revRec
	h := s.horizon.Milliseconds()
	for len(out) < s.n {
		ki := rng.IntN(s.keys)
		g, key := gens[ki], fmt.Sprintf("K%d", ki)
		switch x := rng.IntN(10); {
		case x < 6 || len(g.subs) == 0: // the key's next sub-candle
			for range rng.IntN(s.skip) {
				g.next = s.tf.End(g.next)
			}
			c, cl := mk(key, g.next, len(g.subs) > 0 && rng.IntN(3) == 0, g.price, 0)
			g.price = cl
			g.subs[c.OpenTime], g.last, g.next = c, c.CloseTime, c.CloseTime
			out = append(out, revRec{c: c})
		case x < 9: // a revision inside the horizon
			open := s.tf.Start(g.last - 1 - rng.Int64N(h))
			if s.tf.End(open) <= g.last-h {
				continue
			}
			old, had := g.subs[open]
			var rev uint32
			if had {
				rev = old.Rev + 1
			}
			c, _ := mk(key, open, rng.IntN(3) == 0, 100+rng.Int64N(20), rev)
			g.subs[open] = c
			out = append(out, revRec{c: c})
		default: // a replay of a sub-candle sent
			opens := slices.Sorted(maps.Keys(g.subs))
			c := g.subs[opens[rng.IntN(len(opens))]]
			want := ReasonDuplicate
			if c.Rev > 0 && c.CloseTime <= g.last-h {
				want = ReasonBeyondHorizon
			}
			out = append(out, revRec{c: c, want: want})
		}
	}
	return out
}

// mergeOf is what a window holds: its sub-candles merged in time order.
func mergeOf(key, tf string, open, close int64, subs []candle.Candle) candle.Candle {
	acc, ng := candle.NewWindow(key, tf, open, close), false
	for i := range subs {
		ng = candle.Merge(&acc, &subs[i], ng)
	}
	candle.FlattenGap(&acc, ng)
	return acc
}

// TestRollupRevisionProperty: for random sub-candle series with random
// revisions inside the horizon, through a chain of rollups, every window's
// emissions have revs 0, 1, 2, … each differing from the previous in a
// value, the latest of each equals the merge of the latest revision of its
// sub-candles (for the top of the chain: of the bottom's sub-candles), no
// revision is refused, every replay is a duplicate, and a run with
// restarts at random points gives exactly the output of one without.
func TestRollupRevisionProperty(t *testing.T) {
	seoul, err := time.LoadLocation("Asia/Seoul")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		chain   []candle.Timeframe
		skip    int
		horizon time.Duration
	}{
		{"1m-5m-15m", []candle.Timeframe{tfOf(t, "1m", nil), tfOf(t, "5m", nil), tfOf(t, "15m", nil)}, 3, 20 * time.Minute},
		{"1m-1h", []candle.Timeframe{tfOf(t, "1m", nil), tfOf(t, "1h", nil)}, 20, 3 * time.Hour},
		{"1m-1d-1M Seoul", []candle.Timeframe{tfOf(t, "1m", seoul), tfOf(t, "1d", seoul), tfOf(t, "1M", seoul)}, 900, 72 * time.Hour},
		{"1d-1M Seoul", []candle.Timeframe{tfOf(t, "1d", seoul), tfOf(t, "1M", seoul)}, 2, 5 * 24 * time.Hour},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for seed := range uint64(30) {
				rng := rand.New(rand.NewPCG(seed, 20))
				s := reviseStream{tf: tc.chain[0], keys: 3, n: 400, skip: tc.skip, horizon: tc.horizon}
				in := s.gen(rng, time.Date(2024, 1, 29, 0, 0, 0, 0, time.UTC).UnixMilli())
				plain := runReviseChain(t, tc.chain, tc.horizon, in, nil)
				restarted := runReviseChain(t, tc.chain, tc.horizon, in, rand.New(rand.NewPCG(seed, 21)))
				for i := range plain {
					if !slices.Equal(plain[i], restarted[i]) {
						t.Fatalf("seed %d: stage %d: output with restarts differs from one without", seed, i+1)
					}
				}
				checkRevisions(t, seed, tc.chain, in, plain)
			}
		})
	}
}

// runReviseChain feeds in to a chain of rollups with horizon h, each
// stage taking the previous one's candles as they come, and returns every
// stage's output. With rng, each stage restarts (state through Changes, a
// fresh rollup, Restore in random order) at random points.
func runReviseChain(t *testing.T, chain []candle.Timeframe, h time.Duration, in []revRec, rng *rand.Rand) [][]candle.Candle {
	t.Helper()
	n := len(chain) - 1
	rs := make([]*Rollup, n)
	sts := make([]store, n)
	build := func(i int) *Rollup {
		r, err := NewRollup(RollupConfig{From: chain[i], To: chain[i+1], ReviseWithin: h})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for i := range rs {
		rs[i], sts[i] = build(i), store{}
	}
	outs := make([][]candle.Candle, n)
	var feed func(i int, c *candle.Candle, want Reason)
	feed = func(i int, c *candle.Candle, want Reason) {
		if i == n {
			return
		}
		var out Output
		rs[i].Process(Record{Value: c.AppendJSON(nil)}, &out)
		sts[i].apply(rs[i])
		switch {
		case want != "" && (len(out.Rejected) != 1 || out.Rejected[0].Reason != want || len(out.Candles) > 0):
			t.Fatalf("stage %d: a replay of %s gave %d rejections, %d candles, want one %s", i+1, fmtCandle(c), len(out.Rejected), len(out.Candles), want)
		case want == "" && len(out.Rejected) > 0:
			t.Fatalf("stage %d: %s rejected: %s", i+1, fmtCandle(c), fmtRejection(&out.Rejected[0]))
		}
		outs[i] = append(outs[i], out.Candles...)
		for j := range out.Candles {
			feed(i+1, &out.Candles[j], "")
		}
		if rng != nil && rng.IntN(25) == 0 {
			rs[i] = build(i)
			sts[i].restoreInto(t, rs[i], rng)
		}
	}
	for i := range in {
		feed(0, &in[i].c, in[i].want)
	}
	for i := range rs {
		checkRollupEntries(t, rs[i], sts[i])
	}
	return outs
}

// checkRollupEntries checks that st, the state r wrote, holds exactly an
// entry for each of r's keys and for each window and sub-candle it keeps:
// none left behind by a window that left the horizon, a fold or a freed
// key.
func checkRollupEntries(t *testing.T, r *Rollup, st store) {
	t.Helper()
	st.apply(r)
	want := map[string]bool{}
	for name, k := range r.keys {
		want[string(entryKey)+name] = true
		for _, w := range k.rv.wins {
			want[string(rollEntryKey(nil, name, rollOp{win: w.open}))] = true
			for i := range w.subs {
				want[string(rollEntryKey(nil, name, rollOp{isSub: true, win: w.open, sub: w.subs[i].OpenTime}))] = true
			}
		}
	}
	for k, v := range st {
		if !want[k] {
			t.Fatalf("state entry %s is kept by no key", fmtEntry(k, v))
		}
	}
	if len(st) != len(want) {
		t.Fatalf("state has %d entries, the rollup keeps %d", len(st), len(want))
	}
}

// checkRevisions checks each stage's output against its input.
func checkRevisions(t *testing.T, seed uint64, chain []candle.Timeframe, in []revRec, outs [][]candle.Candle) {
	t.Helper()
	type wkey struct {
		key  string
		open int64
	}
	// latest holds the latest revision of each sub-candle of the stage.
	latest := map[wkey]candle.Candle{}
	for _, r := range in {
		if r.want == "" {
			latest[wkey{r.c.Symbol, r.c.OpenTime}] = r.c
		}
	}
	bottom := latest
	revised := 0
	for i, out := range outs {
		from, to := chain[i], chain[i+1]
		last := map[wkey]candle.Candle{}
		for _, c := range out {
			k := wkey{c.Symbol, c.OpenTime}
			prev, ok := last[k]
			switch {
			case !ok && c.Rev != 0:
				t.Fatalf("seed %d: %s: first emission has rev %d", seed, fmtCandle(&c), c.Rev)
			case ok && c.Rev != prev.Rev+1:
				t.Fatalf("seed %d: %s follows rev %d", seed, fmtCandle(&c), prev.Rev)
			case ok:
				p := prev
				p.Rev = c.Rev
				if p.Equal(&c) {
					t.Fatalf("seed %d: %s emitted again with no change", seed, fmtCandle(&c))
				}
				revised++
			}
			last[k] = c
		}
		for _, src := range []map[wkey]candle.Candle{latest, bottom} {
			subs := map[wkey][]candle.Candle{}
			for k, c := range src {
				pk := wkey{k.key, to.Start(k.open)}
				subs[pk] = append(subs[pk], c)
			}
			for k, c := range last {
				ss := subs[k]
				slices.SortFunc(ss, func(a, b candle.Candle) int { return cmpInt(a.OpenTime, b.OpenTime) })
				want := mergeOf(k.key, to.String(), k.open, to.End(k.open), ss)
				want.Rev = c.Rev
				if !want.Equal(&c) {
					t.Fatalf("seed %d: %s→%s: latest %s\nwant merge of the latest sub-candles %s", seed, from, to, fmtCandle(&c), fmtCandle(&want))
				}
			}
		}
		latest = last
	}
	if revised == 0 {
		t.Fatalf("seed %d: no window was revised: the stream tests nothing", seed)
	}
}

// State written without a horizon restores under one: the key's open window
// continues, its sub-candles before the restore cannot be revised (beyond
// the horizon: they are not kept), later ones can. State written with a
// horizon restores without one as the plain rollup state it holds.
func TestRollupReviseRestoresStateWithoutHorizon(t *testing.T) {
	tf1, tf5 := tfOf(t, "1m", nil), tfOf(t, "5m", nil)
	sub := func(minute int, price string, rev uint32) candle.Candle {
		open := baseDay.Add(10*time.Hour + time.Duration(minute)*time.Minute).UnixMilli()
		p := decimal.MustParse(price)
		return candle.Candle{Symbol: "BTC", Timeframe: "1m", OpenTime: open, CloseTime: tf1.End(open),
			Open: p, High: p, Low: p, Close: p, Volume: decimal.MustParseSum("1"), QuoteVolume: decimal.SumOf(p), Trades: 1, Rev: rev}
	}
	process := func(r *Rollup, c candle.Candle) Output {
		var out Output
		r.Process(Record{Value: c.AppendJSON(nil)}, &out)
		return out
	}
	plain, err := NewRollup(RollupConfig{From: tf1, To: tf5})
	if err != nil {
		t.Fatal(err)
	}
	first := []candle.Candle{sub(0, "1", 0), sub(1, "2", 0), sub(2, "3", 0)}
	for _, c := range first {
		process(plain, c)
	}
	old := stateOf(plain, nil)

	r, err := NewRollup(RollupConfig{From: tf1, To: tf5, ReviseWithin: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range old {
		if err := r.Restore([]byte(k), v); err != nil {
			t.Fatal(err)
		}
	}
	if out := process(r, sub(1, "9", 1)); len(out.Rejected) != 1 || out.Rejected[0].Reason != ReasonBeyondHorizon || len(out.Candles) > 0 {
		t.Fatalf("a revision of a sub-candle taken before the horizon was on: %+v", out)
	}
	process(r, sub(3, "4", 0))
	process(r, sub(3, "5", 1)) // the open window takes it
	out := process(r, sub(4, "6", 0))
	want := mergeOf("BTC", "5m", first[0].OpenTime, tf5.End(first[0].OpenTime), append(first, sub(3, "5", 1), sub(4, "6", 0)))
	if len(out.Candles) != 1 || !out.Candles[0].Equal(&want) {
		t.Fatalf("window after the restore: %+v, want %s", out, fmtCandle(&want))
	}
	out = process(r, sub(4, "7", 1))
	want = mergeOf("BTC", "5m", first[0].OpenTime, tf5.End(first[0].OpenTime), append(first, sub(3, "5", 1), sub(4, "7", 1)))
	want.Rev = 1
	if len(out.Candles) != 1 || !out.Candles[0].Equal(&want) {
		t.Fatalf("revision after the restore: %+v, want %s", out, fmtCandle(&want))
	}

	// Back without a horizon: the open window of the revised state goes on.
	process(r, sub(5, "8", 0))
	back, err := NewRollup(RollupConfig{From: tf1, To: tf5})
	if err != nil {
		t.Fatal(err)
	}
	revised := stateOf(r, nil)
	for k, v := range revised {
		if err := back.Restore([]byte(k), v); err != nil {
			t.Fatal(err)
		}
	}
	// Its first Changes deletes the kept window and sub-candle entries
	// and writes the key entry without its section.
	if st := stateOf(back, revised); len(st) != 1 || st["kBTC"] == nil || st["kBTC"][1]&(rollRev|rollRevOwn) != 0 {
		t.Fatalf("state without the horizon again: %d entries", len(st))
	}
	for m := 6; m < 9; m++ {
		process(back, sub(m, "8", 0))
	}
	out = process(back, sub(9, "9", 0))
	want = mergeOf("BTC", "5m", sub(5, "8", 0).OpenTime, sub(9, "9", 0).CloseTime,
		[]candle.Candle{sub(5, "8", 0), sub(6, "8", 0), sub(7, "8", 0), sub(8, "8", 0), sub(9, "9", 0)})
	if len(out.Candles) != 1 || !out.Candles[0].Equal(&want) {
		t.Fatalf("without the horizon again: %+v, want %s", out, fmtCandle(&want))
	}
	if rev := stateOf(back, nil)["kBTC"]; rev[1]&(rollRev|rollRevOwn) != 0 {
		t.Fatalf("a rollup without a horizon wrote kept windows")
	}
}

// A Kinesis reshard hands each key's kept windows to the child that owns
// the key: children restored from the split state give, key by key, the
// output of the parent going on.
func TestRollupReviseHandOver(t *testing.T) {
	tf1, tf5 := tfOf(t, "1m", nil), tfOf(t, "5m", nil)
	for _, bad := range []string{"w\x03BT", "s\x03BTC\x00", "x"} {
		if _, _, err := (RollupResharder{}).EntryKey([]byte(bad)); err == nil {
			t.Fatalf("EntryKey(%q): no error", bad)
		}
	}
	for seed := range uint64(10) {
		rng := rand.New(rand.NewPCG(seed, 22))
		in := reviseStream{tf: tf1, keys: 8, n: 600, skip: 3, horizon: 20 * time.Minute}.gen(rng, baseDay.UnixMilli())
		build := func() *Rollup {
			r, err := NewRollup(RollupConfig{From: tf1, To: tf5, ReviseWithin: 20 * time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		parent := build()
		var out Output
		for _, rc := range in[:300] {
			parent.Process(Record{Value: rc.c.AppendJSON(nil)}, &out)
		}
		st := stateOf(parent, nil)
		if (store(st)).count(rollWinEntry) == 0 || (store(st)).count(rollSubEntry) == 0 {
			t.Fatalf("seed %d: no kept window or sub-candle entries to hand over", seed)
		}
		checkSplitMerge(t, RollupResharder{}, st)
		children := [2]*Rollup{build(), build()}
		for i, own := range []func(string) bool{owns, func(k string) bool { return !owns(k) }} {
			entries, conflicts, err := HandOver(RollupResharder{}, []map[string][]byte{st}, own)
			if err != nil || len(conflicts) > 0 {
				t.Fatalf("hand-over: %v %v", err, conflicts)
			}
			for k, v := range entries {
				// Every entry goes to the child owning its symbol.
				if name, _, err := (RollupResharder{}).EntryKey([]byte(k)); err != nil || !own(name) || k[0] != entryKey && entries[string(entryKey)+name] == nil {
					t.Fatalf("seed %d: entry %s handed to a child without its key (%v)", seed, fmtEntry(k, v), err)
				}
				if err := children[i].Restore([]byte(k), v); err != nil {
					t.Fatal(err)
				}
			}
		}
		want, got := map[string][]string{}, map[string][]string{}
		for i, rc := range in[300:] {
			rec := Record{Offset: int64(i), Value: rc.c.AppendJSON(nil)}
			child := children[1]
			if owns(rc.c.Symbol) {
				child = children[0]
			}
			for _, p := range []struct {
				r   *Rollup
				log map[string][]string
			}{{parent, want}, {child, got}} {
				var out Output
				p.r.Process(rec, &out)
				for j := range out.Candles {
					p.log[rc.c.Symbol] = append(p.log[rc.c.Symbol], fmtCandle(&out.Candles[j]))
				}
				for j := range out.Rejected {
					p.log[rc.c.Symbol] = append(p.log[rc.c.Symbol], fmtRejection(&out.Rejected[j]))
				}
			}
		}
		if !maps.EqualFunc(want, got, slices.Equal) {
			t.Fatalf("seed %d: children's output differs from the parent's:\nparent %v\nchildren %v", seed, want, got)
		}
	}
}

// Without revisions a horizon changes no output: the sub-candles of each
// key in time order, quiet marks included, give the candles and marks of a
// rollup without one.
func TestRollupReviseWithoutRevisionsSameAsOff(t *testing.T) {
	tf1, tf5 := tfOf(t, "1m", nil), tfOf(t, "5m", nil)
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 23))
		in := reviseStream{tf: tf1, keys: 4, n: 500, skip: 4, horizon: 15 * time.Minute}.gen(rng, baseDay.UnixMilli())
		var logs [2][]string
		for i, h := range []time.Duration{0, 15 * time.Minute} {
			r, err := NewRollup(RollupConfig{From: tf1, To: tf5, ReviseWithin: h})
			if err != nil {
				t.Fatal(err)
			}
			var subs []candle.Candle
			st := store{}
			last := map[string]int64{}
			for _, rc := range in {
				if rc.c.CloseTime > last[rc.c.Symbol] { // not a revision or a replay
					last[rc.c.Symbol] = rc.c.CloseTime
					subs = append(subs, rc.c)
				}
			}
			for j, c := range subs {
				var out Output
				r.Process(Record{Value: c.AppendJSON(nil)}, &out)
				// Now and then the key goes quiet at the end of its 5m
				// window, when its next sub-candle is in a later one.
				until := tf5.End(tf5.Start(c.OpenTime))
				next := slices.IndexFunc(subs[j+1:], func(n candle.Candle) bool { return n.Symbol == c.Symbol })
				if c.CloseTime/60_000%3 == 0 && (next < 0 || subs[j+1+next].OpenTime >= until) {
					r.Quiet(QuietMark{Key: c.Symbol, Until: until}, &out)
				}
				for j := range out.Candles {
					logs[i] = append(logs[i], fmtCandle(&out.Candles[j]))
				}
				for j := range out.Rejected {
					logs[i] = append(logs[i], fmtRejection(&out.Rejected[j]))
				}
				st.apply(r)
			}
			if h > 0 {
				checkRollupEntries(t, r, st) // quiet keys freed with their entries
			}
		}
		if len(logs[0]) == 0 || !slices.Equal(logs[0], logs[1]) {
			t.Fatalf("seed %d: with a horizon (%d lines) differs from without (%d lines)", seed, len(logs[1]), len(logs[0]))
		}
	}
}

// BenchmarkRollupRevise: the cost of a horizon (1h, 1m → 5m) per
// sub-candle, its state entry rewritten each time as the engine does; it
// reports the state bytes written per sub-candle.
func BenchmarkRollupRevise(b *testing.B) {
	tf1, tf5 := tfOf(b, "1m", nil), tfOf(b, "5m", nil)
	for _, h := range []time.Duration{0, time.Hour} {
		b.Run("revise_within="+h.String(), func(b *testing.B) {
			r, err := NewRollup(RollupConfig{From: tf1, To: tf5, ReviseWithin: h})
			if err != nil {
				b.Fatal(err)
			}
			const keys = 100
			recs := make([][]byte, 0, 600*keys)
			p := decimal.MustParse("100.5")
			for m := range int64(600) {
				for k := range keys {
					open := baseDay.UnixMilli() + m*60_000
					c := candle.Candle{Symbol: fmt.Sprintf("K%03d", k), Timeframe: "1m", OpenTime: open, CloseTime: open + 60_000,
						Open: p, High: p, Low: p, Close: p, Volume: decimal.MustParseSum("1.25"), QuoteVolume: decimal.MustParseSum("125.625"), Trades: 3}
					recs = append(recs, c.AppendJSON(nil))
				}
			}
			var out Output
			written := 0
			b.ResetTimer()
			for i := range b.N {
				if i%len(recs) == 0 && i > 0 {
					b.StopTimer()
					r, _ = NewRollup(RollupConfig{From: tf1, To: tf5, ReviseWithin: h})
					b.StartTimer()
				}
				out.Reset()
				r.Process(Record{Value: recs[i%len(recs)]}, &out)
				r.Changes(func(_, v []byte) { written += len(v) })
			}
			b.ReportMetric(float64(written)/float64(b.N), "state-B/op")
		})
	}
}
