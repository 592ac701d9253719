package processors

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
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

// BenchmarkRollupFeed is what a fused rollup costs per sub-candle: 1m
// candles of 200 keys into a 1m → 5m rollup, taken from memory (take:
// Rollup.Take) or, as before, encoded to JSON and parsed back (json:
// AppendJSON and Process). Compare cpu-ns/op (the process's CPU time):
// on a busy machine ns/op mostly measures the other processes.
func BenchmarkRollupFeed(b *testing.B) {
	from, to := tfOf(b, "1m", nil), tfOf(b, "5m", nil)
	const keys = 200
	subs := make([]candle.Candle, 0, keys*60)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	for m := range int64(60) {
		for k := range keys {
			open := start + m*60_000
			c := candle.Candle{Symbol: fmt.Sprintf("SYM%03dUSDT", k), Timeframe: "1m", OpenTime: open, CloseTime: open + 60_000,
				Open: decimal.MustParse("101.25"), High: decimal.MustParse("102.5"), Low: decimal.MustParse("100.75"), Close: decimal.MustParse("101.5"),
				Volume: decimal.SumOf(decimal.MustParse("12.345")), QuoteVolume: decimal.SumOf(decimal.MustParse("1250.123456")), Trades: 42,
				FirstTradeID: "123456789", LastTradeID: "123456830"}
			subs = append(subs, c)
		}
	}
	for _, mode := range []string{"json", "take"} {
		b.Run(mode, func(b *testing.B) {
			var r *Rollup
			var out Output
			var buf []byte
			b.ReportAllocs()
			cpu0 := cpuTime()
			for i := range b.N {
				j := i % len(subs)
				if j == 0 {
					var err error
					if r, err = NewRollup(RollupConfig{From: from, To: to}); err != nil {
						b.Fatal(err)
					}
				}
				out.Reset()
				rec := Record{Offset: int64(i)}
				if mode == "json" {
					buf = subs[j].AppendJSON(buf[:0])
					rec.Value = buf
					r.Process(rec, &out)
				} else {
					r.Take(rec, &subs[j], &out)
				}
			}
			if cpu := cpuTime() - cpu0; cpu > 0 {
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			}
		})
	}
}
