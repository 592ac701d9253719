package engine_test

import (
	"fmt"
	"io/fs"
	"runtime"
	"testing"
	"time"

	"github.com/kandle/kandle"
	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/topology"
)

// BenchmarkStateMemory measures the live heap of the processors' state for
// 100k symbols (KANDLE_STATE_SYMBOLS) across the crypto topology's 8
// timeframes (1m candles rolled up to 5m, 15m, 1h, 4h, 1d, 1w and 1M): two
// hours of trades so every key has open windows at every level, dedupe ids
// and previous closes. The target (docs/performance.md) is ≤ 1 GiB for 100k
// symbols; memory is bounded by open windows, not history.
//
// The trades are shaped as the shipped topology reads them (it maps a taker
// side, so each carries one). A benchmark fed trades the topology
// dead-letters measures an empty pipeline, so it fails when any record is
// rejected or the stages close fewer candles than the trades must make. It
// also fails as soon as the heap passes the 1 GiB target, rather than going
// on to exhaust a shared machine.
func BenchmarkStateMemory(b *testing.B) {
	data, err := fs.ReadFile(kandle.Topologies, "testdata/topologies/crypto.yaml")
	if err != nil {
		b.Fatal(err)
	}
	top, err := topology.Parse("crypto.yaml", data, topology.Registry{})
	if err != nil {
		b.Fatal(err)
	}
	symbols := envInt(b, "KANDLE_STATE_SYMBOLS", 100_000)
	const bound = 1 << 30 // the target, for 100k symbols
	sides := [2]string{"buy", "sell"}
	for range b.N {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		// grown is the live heap added since before; it collects first when
		// the heap holds more than the bound, garbage included.
		grown := func() float64 {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapAlloc-before.HeapAlloc > bound {
				runtime.GC()
				runtime.ReadMemStats(&m)
			}
			return float64(m.HeapAlloc) - float64(before.HeapAlloc)
		}
		p, err := engine.NewPipeline(top, processors.FixedClock{T: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)})
		if err != nil {
			b.Fatal(err)
		}
		candles := map[string]int{} // closed candles per stage
		p.OnCandle = func(stage, _ string, _ *candle.Candle, _ int32) { candles[stage]++ }
		rejected := map[string]int{} // per stage and reason
		var firstRejected string
		p.OnReject = func(stage string, r *processors.Rejection) {
			if len(rejected) == 0 {
				firstRejected = fmt.Sprintf("stage %s: %s: %s", stage, r.Reason, r.Detail)
			}
			rejected[stage+"/"+string(r.Reason)]++
		}
		start := time.Date(2026, 1, 5, 22, 0, 0, 0, time.UTC).UnixMilli()
		id := 0
		// Every symbol trades every 10 minutes for two hours, across 3 partitions.
		for minute := 0; minute <= 120; minute += 10 {
			for s := 0; s < symbols; s++ {
				id++
				v := fmt.Appendf(nil, `{"symbol":"S%06d","ts":%d,"price":"%d.25","qty":"0.5","trade_id":%d,"side":"%s"}`,
					s, start+int64(minute)*60_000+int64(s%50_000), 100+s%7, id, sides[id%2])
				if err := p.Feed("trades", int32(s%3), int64(id), fmt.Appendf(nil, "S%06d", s), v); err != nil {
					b.Fatal(err)
				}
				if id%50_000 == 0 {
					if heap := grown(); heap > bound {
						b.Fatalf("the live heap passed the 1 GiB target after %d of %d trades (minute %d of 120, %d symbols): %.1f MiB, %.0f bytes per symbol so far; candles per stage: %v",
							id, 13*symbols, minute, symbols, heap/(1<<20), heap/float64(symbols), candles)
					}
				}
			}
		}
		if len(rejected) > 0 {
			b.Fatalf("the pipeline rejected trades the benchmark fed it (per stage/reason: %v; first: %s): it would measure a pipeline without their state", rejected, firstRejected)
		}
		// Every symbol's 1m windows at minutes 0, 10, …, 110 have closed
		// (the trades of minute 120 passed them), and its first hour's
		// 5m, 15m and 1h windows with them.
		for stage, least := range map[string]int{"1m": 12 * symbols, "5m": symbols, "15m": symbols, "1h": symbols} {
			if candles[stage] < least {
				b.Fatalf("stage %s closed %d candles, want at least %d (all per stage: %v): the trades did not make the state measured", stage, candles[stage], least, candles)
			}
		}
		total := 0
		for _, n := range candles {
			total += n
		}
		runtime.GC()
		heap := grown()
		b.ReportMetric(heap/(1<<20), "heap-MiB")
		b.ReportMetric(heap/float64(symbols), "bytes/symbol")
		b.ReportMetric(float64(total), "candles")
		runtime.KeepAlive(p)
	}
}
