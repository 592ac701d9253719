package processors

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/kandle/kandle/candle"
)

// TestLazyIDChunksSameBytes: the state an aggregator writes is byte for
// byte what it wrote when every dedupe id was written out as it was added
// (eagerIDs), now that in-order numeric ids are written out from their
// numbers at the checkpoint: over exchange-like streams (ids in and out of
// order, repeated, non-numeric, missing), every configuration
// TestIDChunksSurviveKills runs, checkpoints after every record in some
// stretches and after thousands in others, lost commits and restores, the
// two write the same entries in the same order, and emit the same outputs.
func TestLazyIDChunksSameBytes(t *testing.T) {
	mixed, inOrder := 0, 0 // id chunks with and without other ids among the in-order numeric ones
	for seed := range uint64(max(1, *idChunkSeeds/2)) {
		rng := rand.New(rand.NewPCG(seed, 0x1a2))
		cc := randomIDChunkCase(rng)
		win, mod := cc.win, cc.mod(t)
		clock := &testClock{}
		build := func(eager bool) *Aggregator {
			a := newAgg(t, candle.Timeframe{}, mod)
			a.clock, a.eagerIDs = clock, eager
			return a
		}
		recs, walls := exchangeTrades(rng, 4000, 2+rng.IntN(40), win)
		desc := fmt.Sprintf("seed %d (%s)", seed, cc)

		var changes [2]strings.Builder
		changesOf := func(i int, a *Aggregator, st store) {
			b := &changes[i]
			b.Reset()
			a.Changes(func(k, v []byte) {
				fmt.Fprintf(b, "%q=%q\n", k, v)
				if len(k) > 0 && k[0] == entryIDs && v != nil {
					if bytes.ContainsAny(v, "x") || bytes.Contains(v, []byte{2, '0'}) {
						mixed++
					} else {
						inOrder++
					}
				}
				if st == nil {
					return
				}
				if v == nil {
					delete(st, string(k))
				} else {
					st[string(k)] = bytes.Clone(v)
				}
			})
		}
		var outs [2]Output
		var out [2]strings.Builder
		step := func(i int, a *Aggregator, r int) {
			clock.t = walls[r]
			o := &outs[i]
			out[i].Reset()
			if r%3 == 0 {
				o.Reset()
				a.Tick(o)
				fmtOutput(&out[i], o)
			}
			o.Reset()
			a.Process(Record{Offset: int64(r), Value: recs[r]}, o)
			fmtOutput(&out[i], o)
			if r%5 == 0 {
				a.Active(func(c *candle.Candle) {
					fmt.Fprintf(&out[i], "live %s %d %d %s..%s\n", c.Symbol, c.OpenTime, c.Trades, c.FirstTradeID, c.LastTradeID)
				})
			}
		}
		agg := [2]*Aggregator{build(true), build(false)}
		sts := [2]store{{}, {}}
		every, restores := 1, 0
		for r := 0; r < len(recs); r++ {
			for i, a := range agg {
				step(i, a, r)
			}
			if out[0].String() != out[1].String() {
				t.Fatalf("%s: record %d: outputs differ\neager: %s\n lazy: %s", desc, r, out[0].String(), out[1].String())
			}
			if rng.IntN(300) == 0 {
				every = [4]int{1, 1 + rng.IntN(20), 1 + rng.IntN(500), 1 + rng.IntN(4000)}[rng.IntN(4)]
			}
			if rng.IntN(every) != 0 {
				continue
			}
			lost := rng.IntN(15) == 0 // a commit that failed: the changes are not stored
			for i, a := range agg {
				st := sts[i]
				if lost {
					st = nil
				}
				changesOf(i, a, st)
			}
			if changes[0].String() != changes[1].String() {
				t.Fatalf("%s: record %d: checkpoints differ\neager:\n%s\n lazy:\n%s", desc, r, changes[0].String(), changes[1].String())
			}
			if lost || rng.IntN(100) == 0 { // killed: a new owner restores the stored entries
				seed := rng.Uint64()
				for i := range agg {
					agg[i] = build(i == 0)
					sts[i].restoreInto(t, agg[i], rand.New(rand.NewPCG(seed, 1)))
				}
				restores++
			}
		}
		if restores == 0 {
			t.Fatalf("%s: no restore", desc)
		}
	}
	if mixed == 0 || inOrder == 0 {
		t.Fatalf("%d id chunks with other ids among the in-order numeric ones, %d without: the streams do not exercise both", mixed, inOrder)
	}
	t.Logf("%d id chunks compared with other ids among the in-order numeric ones, %d without", mixed, inOrder)
}
