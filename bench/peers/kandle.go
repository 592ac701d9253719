package main

import (
	"context"
	"fmt"
	"os"
	"sort"

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

// runKandle runs the engine in this process until every processor has
// caught up: every stage's consumer group has committed (exactly once)
// every offset of its input, all in one look, the way BenchmarkEndToEnd
// measures. A processor fused into a stage (a rollup fed in memory by the
// processor it reads, in one exactly-once unit) has no group of its own:
// what it computed from an input record commits in the transaction that
// commits that record's offset in its stage's group, so the stage's group
// stands for it. With fuse false every rollup is a stage of its own, and
// the clock waits for the last of them.
func runKandle(partitions int, fuse bool) func(ctx context.Context, seeds []string, group string, n int) error {
	return func(ctx context.Context, seeds []string, group string, n int) error {
		top, err := topology.Parse("peers.yaml", fmt.Appendf(nil, kandleTopology, group, seeds[0], partitions), topology.Registry{})
		if err != nil {
			return err
		}
		for _, p := range top.Processors {
			p.Fuse = fuse
		}
		groups, err := stageGroups(top)
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
		if err := waitCommitted(ctx, cl, groups, done); err != nil {
			return fmt.Errorf("the engine: %w", err)
		}
		cancel()
		return <-done
	}
}

// stageGroups lists the consumer groups of top's stages, in no particular
// order: every processor's but those fused into another's stage.
func stageGroups(top *topology.Topology) ([]string, error) {
	fused, err := engine.FusedInto(top)
	if err != nil {
		return nil, err
	}
	var out []string
	for name := range top.Processors {
		if _, ok := fused[name]; !ok {
			out = append(out, top.Group+"."+name)
		}
	}
	sort.Strings(out)
	return out, nil
}
