package engine_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/connectors/kafka"
	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/internal/gen"
	"github.com/kandle/kandle/topology"
)

const benchTopology = `
name: bench
brokers: [%s]
metrics: ""
commit_interval: %s
sources:
  trades: {topic: trades, partitions: 2}
processors:
  1m: {kind: candles, from: trades, timeframe: 1m, lateness: 2s, idle_timeout: 0s, max_future: 0s, output: {topic: c.1m, partitions: 2}}
  5m: {kind: rollup, from: 1m, timeframe: 5m, output: {topic: c.5m, partitions: 2}}
  15m: {kind: rollup, from: 5m, timeframe: 15m, output: {topic: c.15m, partitions: 2}}
  1h: {kind: rollup, from: 15m, timeframe: 1h, output: {topic: c.1h, partitions: 2}}
  4h: {kind: rollup, from: 1h, timeframe: 4h, output: {topic: c.4h, partitions: 2}}
  1d: {kind: rollup, from: 4h, timeframe: 1d, output: {topic: c.1d, partitions: 2}}
  1w: {kind: rollup, from: 1d, timeframe: 1w, output: {topic: c.1w, partitions: 1}}
  1M: {kind: rollup, from: 1d, timeframe: 1M, output: {topic: c.1M, partitions: 1}}
dead_letter: {topic: bench.dlq}
`

// BenchmarkEndToEnd measures trades/s through the whole exactly-once path on
// the in-process dev broker: consume → 1m candles → seven rollups →
// transactional produce of candles, changelog and offsets. The trades are
// produced before the timer starts; the clock stops when the 1m stage has
// committed its offsets for every trade.
func BenchmarkEndToEnd(b *testing.B) {
	for _, interval := range []string{"50ms", "200ms"} {
		b.Run("commit="+interval, func(b *testing.B) {
			const n = 1_000_000
			var rate float64
			for range b.N {
				rate = runEndToEnd(b, n, interval)
			}
			b.ReportMetric(rate, "trades/s")
		})
	}
}

func runEndToEnd(b *testing.B, n int, interval string) float64 {
	b.StopTimer()
	broker, err := kafka.StartDevBroker(kafka.WithListen("127.0.0.1:0"))
	if err != nil {
		b.Fatal(err)
	}
	defer broker.Close()
	seeds := broker.Addrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(1<<20))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	if _, err := kafka.EnsureTopics(context.Background(), cl, []kafka.TopicSpec{{Name: "trades", Partitions: 2}}); err != nil {
		b.Fatal(err)
	}
	cfg := gen.DefaultConfig()
	cfg.Symbols = make([]string, 200)
	for i := range cfg.Symbols {
		cfg.Symbols[i] = fmt.Sprintf("SYM%03d", i)
	}
	cfg.Count, cfg.Span, cfg.Start = n, 48*time.Hour, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	g, err := gen.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := gen.Produce(context.Background(), cl, "trades", g, 0); err != nil {
		b.Fatal(err)
	}
	top, err := topology.Parse("bench.yaml", fmt.Appendf(nil, benchTopology, seeds[0], interval), topology.Registry{})
	if err != nil {
		b.Fatal(err)
	}
	eng, err := engine.New(top, engine.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), engine.WithInstanceID("bench"))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	b.StartTimer()
	start := time.Now()
	go func() { done <- eng.Run(ctx) }()
	adm := kadm.NewClient(cl)
	for {
		lag, err := adm.Lag(ctx, top.Group+".1m")
		if err == nil {
			if l, ok := lag[top.Group+".1m"]; ok && len(l.Lag) > 0 && l.Lag.Total() == 0 {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return float64(n) / elapsed.Seconds()
}
