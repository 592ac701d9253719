package processors

import (
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
	"time"
)

// TestRollupTakeSameAsProcess: a rollup taking sub-candles from memory
// (Take, a rollup fused into its upstream's stage) emits, rejects and
// writes to its state exactly what one reading their JSON (Process) does,
// with and without a revision horizon, over random series with revisions,
// replays and candles of another timeframe.
func TestRollupTakeSameAsProcess(t *testing.T) {
	from, to := tfOf(t, "1m", nil), tfOf(t, "5m", nil)
	for _, h := range []time.Duration{0, 20 * time.Minute} {
		for seed := range uint64(10) {
			rng := rand.New(rand.NewPCG(seed, 7))
			s := reviseStream{tf: from, keys: 3, n: 300, skip: 3, horizon: max(h, time.Minute)}
			in := s.gen(rng, time.Date(2024, 1, 29, 0, 0, 0, 0, time.UTC).UnixMilli())
			byJSON, err := NewRollup(RollupConfig{From: from, To: to, ReviseWithin: h})
			if err != nil {
				t.Fatal(err)
			}
			byValue, err := NewRollup(RollupConfig{From: from, To: to, ReviseWithin: h})
			if err != nil {
				t.Fatal(err)
			}
			candles, rejected := 0, 0
			for i, r := range in {
				c := r.c
				if !c.Gap && rng.IntN(2) == 0 {
					c.FirstTradeID, c.LastTradeID = "t"+strconv.Itoa(i), "t\u2028\""+strconv.Itoa(i)
				}
				if rng.IntN(50) == 0 {
					c.Timeframe = "5m" // another timeframe: rejected by both
				}
				var outJSON, outValue Output
				rec := Record{Partition: 1, Offset: int64(i)}
				byJSON.Process(Record{Partition: 1, Offset: int64(i), Value: c.AppendJSON(nil)}, &outJSON)
				kept := c
				byValue.Take(rec, &c, &outValue)
				if !reflect.DeepEqual(c, kept) {
					t.Fatalf("h %s seed %d record %d: Take modified its candle", h, seed, i)
				}
				for j := range outValue.Rejected {
					if outValue.Rejected[j].Value != nil {
						t.Fatalf("h %s seed %d record %d: a rejection of Take has a value the record had not", h, seed, i)
					}
					outValue.Rejected[j].Value = c.AppendJSON(nil)
				}
				if !reflect.DeepEqual(outJSON, outValue) {
					t.Fatalf("h %s seed %d record %d (%+v): Process emitted\n%+v\nTake emitted\n%+v", h, seed, i, c, outJSON, outValue)
				}
				candles, rejected = candles+len(outValue.Candles), rejected+len(outValue.Rejected)
				if rng.IntN(20) == 0 || i == len(in)-1 {
					if a, b := changesOf(byJSON), changesOf(byValue); !reflect.DeepEqual(a, b) {
						t.Fatalf("h %s seed %d record %d: the state changes differ:\n%v\n%v", h, seed, i, a, b)
					}
				}
			}
			if candles == 0 || rejected == 0 {
				t.Fatalf("h %s seed %d: %d candles and %d rejections: the series tests neither", h, seed, candles, rejected)
			}
		}
	}
}

func changesOf(r *Rollup) map[string]string {
	m := map[string]string{}
	r.Changes(func(k, v []byte) { m[string(k)] = string(v) })
	return m
}
