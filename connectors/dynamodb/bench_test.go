package dynamodb

import (
	"context"
	"testing"
	"time"

	"github.com/kandle/kandle/internal/testkit"
)

// BenchmarkSinkWrite measures Write+Flush throughput against dynalite (a
// Node emulator: the number bounds the sink's overhead, not DynamoDB's).
func BenchmarkSinkWrite(b *testing.B) {
	ctx := context.Background()
	dyn := testkit.Dynalite(b)
	cfg := historyConfig("bench", dyn.URL())
	cfg.Provision = false
	if _, err := Apply(ctx, rawClient(dyn.URL()), []TableSpec{cfg.Table}, false, WithLogger(quietLogger())); err != nil {
		b.Fatal(err)
	}
	h := newSink(b, cfg, nil)
	cs := genCandles([]string{"BTC", "ETH", "SOL", "ADA"}, []string{"1m"}, 250, 1) // 1000 distinct keys
	b.ResetTimer()
	start := time.Now()
	n := 0
	for i := 0; i < b.N; i++ {
		batch := cs[(i*100)%len(cs) : (i*100)%len(cs)+100]
		if err := h.sink.Write(ctx, batch); err != nil {
			b.Fatal(err)
		}
		n += len(batch)
	}
	if err := h.sink.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "candles/s")
}
