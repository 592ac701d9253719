package valkey

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/valkey-io/valkey-go"
)

// BenchmarkSinkVsIdeal compares the sink's two write paths with an ideal
// client sending the same commands to the same redis-server: per candle
// HSET + PEXPIRE + PUBLISH (the sink's own builders and message), one SADD
// of the symbols per pipeline, pipelines of maxPipeline candles from N
// writers on one client, and nothing else: no coalescing map, no
// compare-and-set, no transaction. 20,000 candles of 20,000 symbols (one
// window each, so the sink sends every candle).
//
//   - live: Active for every candle, then FlushActive. The sink keeps one
//     pipeline in flight (its one flush goroutine).
//   - finals: Write in batches of 500, then Flush. The sink keeps one
//     transaction in flight: WATCH + HGET open_time of maxChunk keys in
//     one round trip, MULTI … EXEC in a second.
//
// The machine is shared and noisy, so every round runs each contestant once,
// in a rotating order, and the benchmark reports each one's candles/s over
// all rounds and the sink's ratio to the ideal client with one writer (the
// sink's own number of pipelines in flight).
func BenchmarkSinkVsIdeal(b *testing.B) {
	srv := startRedis(b)
	ctx := context.Background()
	const n = 20_000
	cs := make([]candle.Candle, n)
	for i := range cs {
		cs[i] = mk(fmt.Sprintf("SYM%05d", i), 29_000_000, "100.5", "101", "99.25", "100", "12.5", "1250.5", 42)
	}
	for _, final := range []bool{false, true} {
		name := map[bool]string{false: "live", true: "finals"}[final]
		b.Run(name, func(b *testing.B) {
			s := newSink(b, srv.Addr, func(c *Config) { c.KeyPrefix = name + ":" })
			cl := reader(b, srv.Addr)
			nm := names{prefix: "ideal:" + name + ":"}
			var sinkTrips, idealTrips int64
			round := 0
			next := make([]candle.Candle, n)
			sink := func() {
				t0 := s.RoundTrips()
				if final {
					for i := 0; i < n; i += 500 {
						if err := s.Write(ctx, next[i:i+500]); err != nil {
							b.Fatal(err)
						}
					}
					if err := s.Flush(ctx); err != nil {
						b.Fatal(err)
					}
				} else {
					for i := range next {
						s.Active(next[i])
					}
					if err := s.FlushActive(ctx); err != nil {
						b.Fatal(err)
					}
				}
				sinkTrips += s.RoundTrips() - t0
			}
			contestants := []struct {
				name string
				run  func()
			}{
				{"sink", sink},
				{"ideal1", func() { idealTrips += idealSend(ctx, b, cl, nm, cs, final, 1) }},
				{"ideal4", func() { idealSend(ctx, b, cl, nm, cs, final, 4) }},
			}
			took := make([]time.Duration, len(contestants))
			b.ResetTimer()
			for range b.N {
				round++
				for i := range cs { // a newer window every round, so finals are all stored
					next[i] = cs[i]
					next[i].OpenTime += int64(round) * minute
					next[i].CloseTime += int64(round) * minute
				}
				for j := range contestants {
					k := (j + round) % len(contestants)
					t0 := time.Now()
					contestants[k].run()
					took[k] += time.Since(t0)
				}
			}
			rate := func(k int) float64 { return float64(n*b.N) / took[k].Seconds() }
			for k, c := range contestants {
				b.ReportMetric(rate(k), c.name+"_candles/s")
			}
			b.ReportMetric(rate(0)/rate(1), "sink/ideal1")
			b.ReportMetric(1000*float64(sinkTrips)/float64(n*b.N), "sink_roundtrips/1k")
			b.ReportMetric(1000*float64(idealTrips)/float64(n*b.N), "ideal_roundtrips/1k")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// idealSend sends cs as pipelines of maxPipeline candles from writers
// goroutines and returns the number of pipelines.
func idealSend(ctx context.Context, b *testing.B, cl valkey.Client, nm names, cs []candle.Candle, final bool, writers int) int64 {
	chunks := make(chan []candle.Candle, len(cs)/maxPipeline+1)
	for i := 0; i < len(cs); i += maxPipeline {
		chunks <- cs[i:min(i+maxPipeline, len(cs))]
	}
	close(chunks)
	pipes := int64(len(chunks))
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			bld := cl.B()
			var msg []byte
			cmds := make(valkey.Commands, 0, 3*maxPipeline+1)
			syms := make([]string, 0, maxPipeline)
			for chunk := range chunks {
				cmds, syms = cmds[:0], syms[:0]
				for i := range chunk {
					c := &chunk[i]
					hk := nm.hash(c.Timeframe, c.Symbol)
					msg = message(msg, c, final)
					cmds = append(cmds, hset(bld, hk, c), bld.Pexpire().Key(hk).Milliseconds(ttl(0, c)).Build(),
						bld.Publish().Channel(nm.channel(c.Timeframe, c.Symbol)).Message(string(msg)).Build())
					syms = append(syms, c.Symbol)
				}
				cmds = append(cmds, bld.Sadd().Key(nm.symbols()).Member(syms...).Build())
				for _, r := range cl.DoMulti(ctx, cmds...) {
					if err := r.Error(); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return pipes
}
