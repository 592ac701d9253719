package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/topology"
)

// TestBuiltinKindsBuild: the engine builds every built-in topology kind,
// and no other.
func TestBuiltinKindsBuild(t *testing.T) {
	b := builtinKinds()
	for _, k := range topology.ProcessorKinds() {
		if b[k.Name].build == nil || b[k.Name].reshard == nil {
			t.Errorf("built-in kind %s has no builder or resharder", k.Name)
		}
	}
	if len(b) != len(topology.ProcessorKinds()) {
		t.Errorf("%d builders for %d built-in kinds", len(b), len(topology.ProcessorKinds()))
	}
}

// plainKind is a registered kind that builds processors but cannot split
// or merge their state; reshardKind can.
type plainKind struct{}

func (plainKind) Facts() topology.KindFacts {
	return topology.KindFacts{Name: "plain", Doc: "No resharding."}
}
func (plainKind) Validate(*topology.ProcessorCheck, *topology.Processor) {}
func (plainKind) Fingerprint(f *topology.FingerprintFields, p *topology.Processor) error {
	f.Source(f.Topology().Sources[p.From])
	return nil
}
func (plainKind) NewProcessor(*Partition) (processors.Processor, error) { return nil, nil }

type reshardKind struct{ plainKind }

func (reshardKind) Facts() topology.KindFacts {
	return topology.KindFacts{Name: "resh", Doc: "Resharding."}
}
func (reshardKind) Resharder(*Partition) (processors.Resharder, error) {
	return processors.SilenceResharder{}, nil
}

// TestResharderOfEveryKind: every built-in kind splits and merges its state
// across a Kinesis reshard (multi-metric candles by device), a registered
// kind does when it implements ReshardingKind, and one that does not is
// refused with an error naming it and what it lacks.
func TestResharderOfEveryKind(t *testing.T) {
	const yaml = `name: r
brokers: embedded
sources:
  ticks: {kind: kinesis, kinesis: {stream: s}}
  readings: {kind: kinesis, kinesis: {stream: r}, fields: {key: device, time: ts, values: [temperature, humidity]}}
processors:
  c1s: {kind: candles, from: ticks, timeframe: 1s}
  m10s: {kind: candles, from: readings, timeframe: 10s}
  r5s: {kind: rollup, from: c1s, timeframe: 5s}
  quiet: {kind: silence, from: readings, levels: [{name: l1, after: 10s}]}
  p: {kind: plain, from: ticks}
  q: {kind: resh, from: ticks}
`
	top, err := topology.Parse("r.yaml", []byte(yaml), topology.Registry{Processors: map[string]topology.ProcessorKind{"plain": plainKind{}, "resh": reshardKind{}}})
	if err != nil {
		t.Fatal(err)
	}
	g, err := buildGraph(top)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]processors.Resharder{"c1s": processors.CandleResharder{}, "m10s": processors.CandleResharder{Metrics: true},
		"r5s": processors.RollupResharder{}, "quiet": processors.SilenceResharder{}, "q": processors.SilenceResharder{}}
	for name, w := range want {
		r, err := resharderOf(g.byName[name])
		if err != nil || r != w {
			t.Errorf("%s: resharder %#v, %v; want %#v", name, r, err, w)
		}
	}
	_, err = resharderOf(g.byName["p"])
	if err == nil || !strings.Contains(err.Error(), "kind plain cannot follow a Kinesis split or merge") || !strings.Contains(err.Error(), "engine.ReshardingKind") {
		t.Fatalf("kind without a resharder: %v", err)
	}
}

// revTopology has a candles processor with a revision horizon and two
// rollups above it, and one without a horizon with a rollup.
const revTopology = `
name: rev
brokers: embedded
sources:
  trades: {topic: trades}
processors:
  1m: {kind: candles, from: trades, timeframe: 1m, revise_within: 90m}
  5m: {kind: rollup, from: 1m, timeframe: 5m}
  1d: {kind: rollup, from: 5m, timeframe: 1d}
  plain: {kind: candles, from: trades, timeframe: 1m, output: {topic: plain}}
  plain5m: {kind: rollup, from: plain, timeframe: 5m}
`

// revGraph is the graph of revTopology.
func revGraph(t *testing.T) *graph {
	t.Helper()
	top, err := topology.Parse("rev.yaml", []byte(revTopology), topology.Registry{})
	if err != nil {
		t.Fatal(err)
	}
	g, err := buildGraph(top)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestPartitionCarriesTheRevisionHorizon: a candles processor's processors
// get its revise_within, and every rollup above it the same horizon (the
// configs kinds.go builds take it from the Partition); without one, none.
func TestPartitionCarriesTheRevisionHorizon(t *testing.T) {
	g := revGraph(t)
	want := map[string]time.Duration{"1m": 90 * time.Minute, "5m": 90 * time.Minute, "1d": 90 * time.Minute, "plain": 0, "plain5m": 0}
	for _, s := range g.stages {
		if got := s.partition(false, nil).ReviseWithin; got != want[s.Name] {
			t.Errorf("stage %s: Partition.ReviseWithin %v, want %v", s.Name, got, want[s.Name])
		}
		if _, err := s.newProcessor(false, processors.FixedClock{}); err != nil {
			t.Errorf("stage %s: %v", s.Name, err)
		}
	}
}
