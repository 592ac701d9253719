package main

import (
	"context"
	"fmt"
	"os"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/topology"
)

// kandleTopology is BenchmarkEndToEnd's: 1m candles and seven rollups,
// exactly once, state in Pebble on disk.
const kandleTopology = `
name: %[1]s
brokers: [%[2]s]
metrics: ""
commit_interval: 25ms
sources:
  trades: {topic: trades, partitions: %[3]d}
processors:
  1m: {kind: candles, from: trades, timeframe: 1m, lateness: 2s, idle_timeout: 0s, max_future: 0s, output: {topic: %[1]s.1m, partitions: %[3]d}}
  5m: {kind: rollup, from: 1m, timeframe: 5m, output: {topic: %[1]s.5m, partitions: %[3]d}}
  15m: {kind: rollup, from: 5m, timeframe: 15m, output: {topic: %[1]s.15m, partitions: %[3]d}}
  1h: {kind: rollup, from: 15m, timeframe: 1h, output: {topic: %[1]s.1h, partitions: %[3]d}}
  4h: {kind: rollup, from: 1h, timeframe: 4h, output: {topic: %[1]s.4h, partitions: %[3]d}}
  1d: {kind: rollup, from: 4h, timeframe: 1d, output: {topic: %[1]s.1d, partitions: %[3]d}}
  1w: {kind: rollup, from: 1d, timeframe: 1w, output: {topic: %[1]s.1w, partitions: 1}}
  1M: {kind: rollup, from: 1d, timeframe: 1M, output: {topic: %[1]s.1M, partitions: 1}}
dead_letter: {topic: %[1]s.dlq}
`

// runKandle runs the engine in this process until its 1m stage has committed
// (exactly once) every input offset, the way BenchmarkEndToEnd measures.
func runKandle(partitions int) func(ctx context.Context, seeds []string, group string, n int) error {
	return func(ctx context.Context, seeds []string, group string, n int) error {
		top, err := topology.Parse("peers.yaml", fmt.Appendf(nil, kandleTopology, group, seeds[0], partitions), topology.Registry{})
		if err != nil {
			return err
		}
		dir, err := os.MkdirTemp("", "peers-kandle-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		eng, err := engine.New(top, engine.WithLogger(quiet()), engine.WithInstanceID(group), engine.WithStateDir(dir))
		if err != nil {
			return err
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
		if err != nil {
			return err
		}
		defer cl.Close()
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- eng.Run(ctx) }()
		if err := waitCommitted(ctx, cl, top.Group+".1m", done); err != nil {
			return fmt.Errorf("the engine: %w", err)
		}
		cancel()
		return <-done
	}
}
