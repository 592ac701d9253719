package engine

import (
	"fmt"
	"sort"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/topology"
)

// processor is what a stage needs of a candle or rollup processor.
type processor interface {
	Process(rec processors.Record, out *processors.Output)
	Tick(out *processors.Output)
	Changes(fn func(key, val []byte))
	Restore(key, val []byte) error
	Active(fn func(c *candle.Candle))
}

// stageSpec is one processor of the topology, resolved: its topics and how
// to build its per-partition processor.
type stageSpec struct {
	Name      string
	Proc      *topology.Processor
	Timeframe candle.Timeframe
	Rollup    bool
	// Input is the source name (candles) or upstream processor name (rollup).
	Input       string
	InputTopic  string
	OutputTopic string
	OutputParts int
	decoder     processors.DecoderConfig
	from        candle.Timeframe // rollups: the upstream timeframe
}

// newProcessor builds the processor of one input partition. live enables the
// wall-clock idle advance.
func (s *stageSpec) newProcessor(live bool, clock processors.Clock) (processor, error) {
	if s.Rollup {
		return processors.NewRollup(processors.RollupConfig{From: s.from, To: s.Timeframe})
	}
	dec, err := processors.NewDecoder(s.decoder)
	if err != nil {
		return nil, err
	}
	p := s.Proc
	return processors.NewAggregator(processors.CandleConfig{
		Timeframe: s.Timeframe, Lateness: p.Lateness, IdleTimeout: p.IdleTimeout,
		MaxFuture: p.MaxFuture, MaxIdle: p.MaxIdle, Dedupe: p.Dedupe, GapFill: p.GapFill,
		Live: live, Decoder: dec,
	}, clock)
}

// graph is a topology resolved into stages in dependency order.
type graph struct {
	top    *topology.Topology
	stages []*stageSpec
	byName map[string]*stageSpec
}

func buildGraph(t *topology.Topology) (*graph, error) {
	g := &graph{top: t, byName: map[string]*stageSpec{}}
	names := make([]string, 0, len(t.Processors))
	for n := range t.Processors {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := t.Processors[n]
		loc, err := time.LoadLocation(p.Zone)
		if err != nil {
			return nil, fmt.Errorf("processor %s: zone %q: %w", n, p.Zone, err)
		}
		tf, err := candle.ParseTimeframe(p.Timeframe, loc)
		if err != nil {
			return nil, fmt.Errorf("processor %s: %w", n, err)
		}
		s := &stageSpec{Name: n, Proc: p, Timeframe: tf, Rollup: p.Kind == "rollup", Input: p.From,
			OutputTopic: p.Output.Topic, OutputParts: p.Output.Partitions}
		if s.OutputTopic == "" {
			s.OutputTopic = t.Name + "." + n
		}
		if s.OutputParts < 1 {
			s.OutputParts = 1
		}
		if !s.Rollup {
			src, ok := t.Sources[p.From]
			if !ok {
				return nil, fmt.Errorf("processor %s: no source named %q", n, p.From)
			}
			s.InputTopic = src.Topic
			f := src.Fields
			s.decoder = processors.DecoderConfig{
				Fields:         processors.Fields{Key: f.Key, Time: f.Time, Price: f.Price, Qty: f.Qty, ID: f.ID},
				Symbols:        src.Symbols,
				MaxRecordBytes: src.MaxRecordBytes,
			}
		}
		g.byName[n] = s
	}
	// Resolve rollup inputs and order stages so every upstream comes first.
	for _, s := range g.byName {
		if !s.Rollup {
			continue
		}
		up, ok := g.byName[s.Input]
		if !ok {
			return nil, fmt.Errorf("rollup %s: no processor named %q", s.Name, s.Input)
		}
		s.InputTopic = up.OutputTopic
		s.from = up.Timeframe
	}
	state := map[string]int{}
	var visit func(s *stageSpec) error
	visit = func(s *stageSpec) error {
		switch state[s.Name] {
		case 1:
			return fmt.Errorf("processor %s: rollup chain is cyclic", s.Name)
		case 2:
			return nil
		}
		state[s.Name] = 1
		if s.Rollup {
			if err := visit(g.byName[s.Input]); err != nil {
				return err
			}
		}
		state[s.Name] = 2
		g.stages = append(g.stages, s)
		return nil
	}
	for _, n := range names {
		if err := visit(g.byName[n]); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// downstream returns the rollup stages that read stage name's output.
func (g *graph) downstream(name string) []*stageSpec {
	var out []*stageSpec
	for _, s := range g.stages {
		if s.Rollup && s.Input == name {
			out = append(out, s)
		}
	}
	return out
}

// groupID is the consumer group of a stage or sink.
func (g *graph) groupID(stage string) string {
	prefix := g.top.Group
	if prefix == "" {
		prefix = "kandle-" + g.top.Name
	}
	return prefix + "." + stage
}

// changelogTopic is the compacted topic holding a stage's state.
func (g *graph) changelogTopic(stage string) string {
	return g.top.Name + "." + stage + ".changelog"
}

// deadLetterTopic is the topic rejected records go to.
func (g *graph) deadLetterTopic() string {
	if g.top.DeadLetter.Topic != "" {
		return g.top.DeadLetter.Topic
	}
	return g.top.Name + ".dlq"
}
