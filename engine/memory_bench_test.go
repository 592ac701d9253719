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
// 100k symbols across the crypto topology's 8 timeframes (1m candles rolled
// up to 5m, 15m, 1h, 4h, 1d, 1w and 1M): two hours of trades so every key
// has open windows at every level, dedupe ids and previous closes. The
// target (docs/performance.md) is ≤ 1 GiB; memory is bounded by open windows, not
// history.
func BenchmarkStateMemory(b *testing.B) {
	data, err := fs.ReadFile(kandle.Topologies, "testdata/topologies/crypto.yaml")
	if err != nil {
		b.Fatal(err)
	}
	top, err := topology.Parse("crypto.yaml", data, topology.Registry{})
	if err != nil {
		b.Fatal(err)
	}
	const symbols = 100_000
	for range b.N {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		p, err := engine.NewPipeline(top, processors.FixedClock{T: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)})
		if err != nil {
			b.Fatal(err)
		}
		candles := 0
		p.OnCandle = func(string, string, *candle.Candle, int32) { candles++ }
		start := time.Date(2026, 1, 5, 22, 0, 0, 0, time.UTC).UnixMilli()
		id := 0
		// Every symbol trades every 10 minutes for two hours, across 3 partitions.
		for minute := 0; minute <= 120; minute += 10 {
			for s := 0; s < symbols; s++ {
				id++
				v := fmt.Appendf(nil, `{"symbol":"S%06d","ts":%d,"price":"%d.25","qty":"0.5","trade_id":%d}`,
					s, start+int64(minute)*60_000+int64(s%50_000), 100+s%7, id)
				if err := p.Feed("trades", int32(s%3), int64(id), fmt.Appendf(nil, "S%06d", s), v); err != nil {
					b.Fatal(err)
				}
			}
		}
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		heap := float64(after.HeapAlloc) - float64(before.HeapAlloc)
		b.ReportMetric(heap/(1<<20), "heap-MiB")
		b.ReportMetric(heap/symbols, "bytes/symbol")
		b.ReportMetric(float64(candles), "candles")
		runtime.KeepAlive(p)
	}
}
