package processors

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
)

// reviseBenchStream is the stream of BenchmarkReviseHorizon: syms symbols
// trading round robin (each once per every minutes of event time) for
// span, in event-time order but for one trade in 100 that arrives 1 to 30
// minutes late.
func reviseBenchStream(syms int, every, span time.Duration) (recs, keys [][]byte) {
	rng := rand.New(rand.NewPCG(5, 6))
	n := int(int64(syms) * int64(span) / int64(every))
	step := float64(every.Milliseconds()) / float64(syms)
	t0 := baseDay.UnixMilli()
	recs, keys = make([][]byte, n), make([][]byte, n)
	for i := range n {
		ts := t0 + int64(float64(i)*step)
		if rng.IntN(100) == 0 {
			ts -= int64(time.Minute/time.Millisecond) * (1 + rng.Int64N(30))
		}
		sym := i % syms
		recs[i] = fmt.Appendf(nil, `{"s":"SYM%06dUSDT","t":%d,"p":"%d.%02d","q":"0.%05d","T":%d}`,
			sym, 100000000+i, 100+rng.IntN(60000), rng.IntN(100), 1+rng.IntN(99999), ts)
		keys[i] = fmt.Appendf(nil, "SYM%06dUSDT", sym)
	}
	return recs, keys
}

// BenchmarkReviseHorizon is what a revision horizon of 1 h costs with
// 100,000 symbols, each trading every 10 minutes, over 70 minutes of event
// time (1m windows, 2 s lateness, dedupe and gap fill on), against the same
// stream without a horizon: CPU per trade, the heap the aggregator holds
// at the end per symbol (kept windows, their trades, gap entries), the
// bytes of Changes output per trade (checkpoints every 10,000 trades) and
// the stored state per symbol at the end.
func BenchmarkReviseHorizon(b *testing.B) {
	const syms = 100_000
	recs, keys := reviseBenchStream(syms, 10*time.Minute, 70*time.Minute)
	tf, err := candle.ParseTimeframe("1m", nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, h := range []time.Duration{0, time.Hour} {
		b.Run(fmt.Sprintf("H=%s", h), func(b *testing.B) {
			var heap, changes, stored, entries, revs float64
			b.ReportAllocs()
			var cpu time.Duration
			for range b.N {
				b.StopTimer()
				runtime.GC()
				var m0, m1 runtime.MemStats
				runtime.ReadMemStats(&m0)
				a, err := NewAggregator(CandleConfig{Timeframe: tf, Lateness: 2 * time.Second, Dedupe: true, GapFill: true,
					Decoder: benchDecoder(b), ReviseWithin: h}, FixedClock{T: baseDay})
				if err != nil {
					b.Fatal(err)
				}
				// The store keeps only the size of each entry, under a hash of
				// its key: its own cost stays small next to the aggregator's.
				st := map[uint64]int32{}
				seed := maphash.MakeSeed()
				var out Output
				var changed int
				save := func(k, v []byte) {
					changed += len(k) + len(v)
					if h := maphash.Bytes(seed, k); v == nil {
						delete(st, h)
					} else {
						st[h] = int32(len(k) + len(v))
					}
				}
				b.StartTimer()
				c0 := cpuTime()
				for i, v := range recs {
					a.Process(Record{Offset: int64(i), Key: keys[i], Value: v}, &out)
					if len(out.Candles) > 4096 || len(out.Rejected) > 4096 {
						for _, c := range out.Candles {
							if c.Rev > 0 {
								revs++
							}
						}
						out.Reset()
					}
					if i%10_000 == 9_999 {
						a.Changes(save)
					}
				}
				a.Changes(save)
				cpu += cpuTime() - c0
				b.StopTimer()
				changes += float64(changed)
				for _, n := range st {
					stored += float64(n)
				}
				entries += float64(len(st))
				st = nil
				out = Output{}
				runtime.GC()
				runtime.ReadMemStats(&m1)
				heap += float64(m1.HeapAlloc) - float64(m0.HeapAlloc)
				runtime.KeepAlive(a)
				b.StartTimer()
			}
			n := float64(b.N)
			trades := n * float64(len(recs))
			b.ReportMetric(float64(cpu.Nanoseconds())/trades, "cpu-ns/trade")
			b.ReportMetric(heap/n/syms, "heap-B/symbol")
			b.ReportMetric(changes/trades, "changes-B/trade")
			b.ReportMetric(stored/n/syms, "state-B/symbol")
			b.ReportMetric(entries/n/syms, "entries/symbol")
			b.ReportMetric(revs/n, "revisions")
		})
	}
}

// BenchmarkTakeBackByID is what finding a take-back's trade by its id
// costs when the record is stamped with the time of the cancel message,
// not the trade's: one key with 60 closed 1m windows of 1000 trades each
// inside a 1h horizon, a correction (hit, of a trade 30 minutes back) or a
// cancel of an id no window holds (miss: every window is looked at), each
// stamped in the newest window. With dedupe each window's id set answers;
// without, the kept trades are scanned.
func BenchmarkTakeBackByID(b *testing.B) {
	const perWin, wins = 1000, 60
	for _, dedupe := range []bool{true, false} {
		a := newAgg(b, tfOf(b, "1m", nil), func(c *CandleConfig) {
			c.Lateness, c.ReviseWithin, c.Dedupe = 0, time.Hour, dedupe
		})
		t0 := baseDay.Add(10 * time.Hour).UnixMilli()
		var out Output
		for i := range perWin*wins + 1 {
			out.Reset()
			ts := t0 + int64(i)*60_000/perWin
			a.Process(Record{Value: fmt.Appendf(nil, `{"s":"A","t":%d,"p":"1","q":"1","i":%d}`, ts, i)}, &out)
		}
		now := t0 + wins*60_000
		hit := [2][]byte{
			fmt.Appendf(nil, `{"s":"A","t":%d,"p":"2","q":"1","i":%d}`, now, perWin*wins/2),
			fmt.Appendf(nil, `{"s":"A","t":%d,"p":"3","q":"1","i":%d}`, now, perWin*wins/2),
		}
		miss := fmt.Appendf(nil, `{"s":"A","t":%d,"p":"1","q":"1","i":%d}`, now, 10*perWin*wins)
		b.Run(fmt.Sprintf("dedupe=%v/hit", dedupe), func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				out.Reset()
				a.processAs(Record{Value: hit[i%2]}, candle.ActionCorrect, &out)
				if len(out.Rejected) > 0 {
					b.Fatal(out.Rejected[0].Detail)
				}
			}
		})
		b.Run(fmt.Sprintf("dedupe=%v/miss", dedupe), func(b *testing.B) {
			for b.Loop() {
				out.Reset()
				a.processAs(Record{Value: miss}, candle.ActionCancel, &out)
				if len(out.Rejected) != 1 || out.Rejected[0].Reason != ReasonUnknownTrade {
					b.Fatalf("%+v", out.Rejected)
				}
			}
		})
	}
}
