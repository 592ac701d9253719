package processors

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
)

// rollupLayoutGolden holds the state a rollup with horizon layoutH wrote
// when it kept its windows inside the key entry (flag rollRev), for the
// stream of layoutStream fed by layoutRun up to layoutCut. The rollup code
// of commit 792f958 wrote it (its test's -update); the code that reads it no
// longer writes that layout, so it is not rewritten.
const rollupLayoutGolden = "testdata/rollup-state/key-layout.golden"

const layoutCut = 300

// layoutRun feeds recs to r: each sub-candle, then, now and then when it
// ends its 5m window, a QuietMark of its key for that window's close. It
// returns the output, one line per candle or rejection.
func layoutRun(r *Rollup, recs []revRec, tf5 candle.Timeframe, st store) []string {
	var log []string
	for _, rc := range recs {
		var out Output
		r.Process(Record{Value: rc.c.AppendJSON(nil)}, &out)
		if until := tf5.End(tf5.Start(rc.c.OpenTime)); rc.c.CloseTime == until && rc.c.CloseTime/60_000%2 == 0 {
			r.Quiet(QuietMark{Key: rc.c.Symbol, Until: until}, &out)
		}
		for j := range out.Candles {
			log = append(log, fmtCandle(&out.Candles[j]))
		}
		for j := range out.Rejected {
			log = append(log, fmtRejection(&out.Rejected[j]))
		}
		if st != nil {
			st.apply(r)
		}
	}
	return log
}

func layoutStream(t testing.TB) ([]revRec, candle.Timeframe, candle.Timeframe) {
	tf1, tf5 := tfOf(t, "1m", nil), tfOf(t, "5m", nil)
	rng := rand.New(rand.NewPCG(7, 24))
	return reviseStream{tf: tf1, keys: 6, n: 600, skip: 3, horizon: 20 * time.Minute}.gen(rng, baseDay.UnixMilli()), tf1, tf5
}

func readStore(t testing.TB, path string) store {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st := store{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		kb, err1 := hex.DecodeString(k)
		vb, err2 := hex.DecodeString(v)
		if !ok || err1 != nil || err2 != nil {
			t.Fatalf("%s: bad line %q", path, sc.Text())
		}
		st[string(kb)] = vb
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return st
}

// State written when a key's kept windows lived in its key entry (flag
// rollRev; testdata/rollup-revise-key-layout.golden, written by that code)
// restores under a horizon and gives the output of a rollup that never
// stopped.
func TestRollupReviseRestoresKeyLayout(t *testing.T) {
	in, tf1, tf5 := layoutStream(t)
	build := func() *Rollup {
		r, err := NewRollup(RollupConfig{From: tf1, To: tf5, ReviseWithin: layoutH})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	old := readStore(t, rollupLayoutGolden)
	rev := 0
	for k, v := range old {
		if k[0] == entryKey && v[1]&rollRev != 0 {
			rev++
		}
	}
	if rev == 0 {
		t.Fatalf("%s holds no key entry with kept windows", rollupLayoutGolden)
	}
	ref := build()
	layoutRun(ref, in[:layoutCut], tf5, nil)
	want := layoutRun(ref, in[layoutCut:], tf5, nil)
	if len(want) == 0 {
		t.Fatal("no output after the cut: the test tests nothing")
	}
	r := build()
	old.restoreInto(t, r, rand.New(rand.NewPCG(1, 1)))
	quiet, wins := 0, 0
	for _, k := range r.keys {
		if k.rv.quiet {
			quiet++
		}
		wins += len(k.rv.wins)
	}
	if quiet == 0 || wins < 2*len(r.keys) {
		t.Fatalf("%s: %d quiet keys, %d kept windows in %d keys: it tests too little", rollupLayoutGolden, quiet, wins, len(r.keys))
	}
	// Its first Changes rewrites every key in the layout of rollRevOwn;
	// a restart from that state half-way gives the same output again.
	st := maps.Clone(old)
	st.apply(r)
	for k, v := range st {
		if k[0] == entryKey && v[1]&rollRev != 0 {
			t.Fatalf("entry %s still in the key layout after Changes", fmtEntry(k, v))
		}
	}
	if st.count(rollWinEntry) == 0 || st.count(rollSubEntry) == 0 {
		t.Fatalf("no kept window or sub-candle entries after Changes: %d entries", len(st))
	}
	half := layoutCut + (len(in)-layoutCut)/2
	got := layoutRun(r, in[layoutCut:half], tf5, st)
	r = build()
	st.restoreInto(t, r, rand.New(rand.NewPCG(1, 2)))
	got = append(got, layoutRun(r, in[half:], tf5, st)...)
	checkRollupEntries(t, r, st)
	if !slices.Equal(want, got) {
		t.Fatalf("restored from the key layout:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

var updateRollupOff = flag.Bool("update", false, "rewrite testdata/rollup-state/off.golden")

// rollupOffGolden pins a rollup without a horizon: the output of
// layoutStream and the state it leaves, byte for byte (a horizon's state
// layout must not change them).
const rollupOffGolden = "testdata/rollup-state/off.golden"

func TestRollupOffStateUnchanged(t *testing.T) {
	in, tf1, tf5 := layoutStream(t)
	r, err := NewRollup(RollupConfig{From: tf1, To: tf5})
	if err != nil {
		t.Fatal(err)
	}
	st := store{}
	var b bytes.Buffer
	// Each key's sub-candles in time order: a rollup without a horizon
	// takes no revisions.
	last := map[string]int64{}
	in = slices.DeleteFunc(in, func(rc revRec) bool {
		if rc.c.CloseTime <= last[rc.c.Symbol] {
			return true
		}
		last[rc.c.Symbol] = rc.c.CloseTime
		return false
	})
	for _, l := range layoutRun(r, in, tf5, st) {
		b.WriteString(l + "\n")
	}
	for _, k := range slices.Sorted(maps.Keys(st)) {
		fmt.Fprintf(&b, "state %x %x\n", k, st[k])
	}
	if *updateRollupOff {
		if err := os.WriteFile(rollupOffGolden, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(rollupOffGolden)
	if err != nil {
		t.Fatalf("%v (write it with -update)", err)
	}
	if !bytes.Equal(b.Bytes(), want) {
		t.Fatalf("a rollup without a horizon changed its output or state from %s", rollupOffGolden)
	}
}

// layoutH is the horizon of the rollups of TestRollupReviseRestoresKeyLayout:
// longer than the stream's (20m), so a key goes quiet but is not freed
// while the stream can still revise it.
const layoutH = time.Hour
