package processors

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
)

var updateRollupGolden = flag.Bool("update", false, "rewrite testdata/rollup-revise-key-layout.golden with the state this rollup writes")

// rollupLayoutGolden holds the state a rollup with a horizon wrote when it
// kept its windows inside the key entry (flag rollRev), for the stream of
// layoutRun, cut at layoutCut.
const rollupLayoutGolden = "testdata/rollup-revise-key-layout.golden"

const layoutCut = 300

// layoutRun feeds recs to r: each sub-candle, then, now and then when it
// ends its 5m window, a QuietMark of its key for that window's close. It
// returns the output, one line per candle or rejection.
func layoutRun(r *Rollup, recs []revRec, tf5 candle.Timeframe, rng *rand.Rand, st store) []string {
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

func writeStore(path string, st store) error {
	var b bytes.Buffer
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range st {
			if !yield(k) {
				return
			}
		}
	}) {
		fmt.Fprintf(&b, "%x %x\n", k, st[k])
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

func readStore(t testing.TB, path string) store {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("%v (write it with go test -run TestRollupReviseRestoresKeyLayout -update)", err)
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
		r, err := NewRollup(RollupConfig{From: tf1, To: tf5, ReviseWithin: 20 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if *updateRollupGolden {
		r, st := build(), store{}
		layoutRun(r, in[:layoutCut], tf5, nil, st)
		if err := writeStore(rollupLayoutGolden, st); err != nil {
			t.Fatal(err)
		}
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
	layoutRun(ref, in[:layoutCut], tf5, nil, nil)
	want := layoutRun(ref, in[layoutCut:], tf5, nil, nil)
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
	got := layoutRun(r, in[layoutCut:], tf5, nil, nil)
	if !slices.Equal(want, got) {
		t.Fatalf("restored from the key layout:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
