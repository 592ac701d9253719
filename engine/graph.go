package engine

import (
	"fmt"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/topology"
)

// processor is what a stage runs per input partition.
type processor = processors.Processor

// stageSpec is one compiled stage of the topology (topology.Stage: name,
// input, kind and facts, zoned timeframe) with what the engine adds to it:
// its topics and how to build its per-partition processor.
type stageSpec struct {
	topology.Stage
	Rollup      bool // it reads another processor's output (Kind.FromProcessor)
	InputTopic  string
	OutputTopic string
	OutputParts int
	decoder     processors.DecoderConfig
	from        candle.Timeframe // rollups: the upstream timeframe
	build       builder          // the kind's processor of one partition
	// rollups are the timeframes built from this stage's candles, directly
	// or through other rollups: its processor emits quiet marks for them,
	// and its output carries them as quiet records (quiet.go).
	rollups []candle.Timeframe
	// stateLateness is the lateness of state entries written before the
	// aggregator stored its watermark, from the recorded fingerprint
	// (checkFingerprints); nil: the processor's lateness.
	stateLateness *time.Duration
	// fusedInto is the stage whose unit runs this one in its transaction,
	// feeding it its output from memory (fuse.go); nil: a stage of its
	// own. fused lists the stages fused into this one.
	fusedInto *stageSpec
	fused     []*stageSpec
}

// newProcessor builds the processor of one input partition. live enables the
// wall-clock idle advance.
func (s *stageSpec) newProcessor(live bool, clock processors.Clock) (processor, error) {
	return s.build(s.partition(live, clock))
}

// partition describes the stage's processor of one input partition to its
// kind.
func (s *stageSpec) partition(live bool, clock processors.Clock) *Partition {
	return &Partition{Name: s.Name, Processor: s.Processor, Source: s.Source, Decoder: s.decoder,
		Timeframe: s.Timeframe, From: s.from, Rollups: s.rollups, Live: live, Clock: clock, StateLateness: s.stateLateness,
		ReviseWithin: s.Stage.ReviseWithin}
}

// kinesisSource returns the source of a stage that reads a Kinesis stream,
// else nil.
func (s *stageSpec) kinesisSource() *topology.Source {
	if s.Source != nil && s.Source.IsKinesis() {
		return s.Source
	}
	return nil
}

// graph is a topology resolved into stages in dependency order.
type graph struct {
	top    *topology.Topology
	stages []*stageSpec
	byName map[string]*stageSpec
}

// buildGraph resolves t (as returned by topology.Parse, which validated it
// and filled defaults) into stages in dependency order, from the compiled
// stages alone (topology.Stages: kind, facts and zoned timeframe resolved
// once).
func buildGraph(t *topology.Topology) (*graph, error) {
	g := &graph{top: t, byName: map[string]*stageSpec{}}
	for _, st := range t.Stages() {
		p := st.Processor
		if st.Kind == nil {
			return nil, fmt.Errorf("processor %s: unknown kind %q (run kandle validate)", st.Name, p.Kind)
		}
		build, err := builderOf(st.Kind)
		if err != nil {
			return nil, fmt.Errorf("processor %s: %w", st.Name, err)
		}
		s := &stageSpec{Stage: st, Rollup: st.Upstream != nil,
			OutputTopic: p.Output.Topic, OutputParts: max(p.Output.Partitions, 1), build: build}
		if st.Facts.Timeframe && s.Timeframe.N == 0 {
			return nil, fmt.Errorf("processor %s: invalid timeframe %q (run kandle validate)", st.Name, p.Timeframe)
		}
		if s.Rollup {
			up, ok := g.byName[st.Input]
			if !ok {
				return nil, fmt.Errorf("rollup %s: no processor named %q (run kandle validate)", st.Name, st.Input)
			}
			s.InputTopic, s.from = up.OutputTopic, up.Timeframe
		} else {
			if st.Source == nil {
				return nil, fmt.Errorf("processor %s: no source named %q (run kandle validate)", st.Name, st.Input)
			}
			s.InputTopic, s.decoder = st.Source.Topic, decoderConfig(st.Source)
		}
		g.byName[st.Name] = s
		g.stages = append(g.stages, s)
	}
	for _, s := range g.stages {
		s.rollups = g.rollupsOf(s.Name)
	}
	g.fuse()
	return g, nil
}

// decoderConfig maps a source's field mapping to the decoder's.
func decoderConfig(src *topology.Source) processors.DecoderConfig {
	f := src.Fields
	return processors.DecoderConfig{
		Fields:         processors.Fields{Key: f.Key, Time: f.Time, Price: f.Price, Qty: f.Qty, ID: f.ID, Side: f.Side, BuyerMaker: f.BuyerMaker, Action: f.Action},
		Symbols:        src.Symbols,
		MaxRecordBytes: src.MaxRecordBytes,
		KeyCheck:       src.KeyCheck,
	}
}

// kinesisStages counts the candle stages reading source.
func (g *graph) kinesisStages(source string) int {
	n := 0
	for _, s := range g.stages {
		if !s.Rollup && s.Input == source {
			n++
		}
	}
	return n
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
func (g *graph) groupID(stage string) string { return g.top.Group + "." + stage }

// changelogTopic is the compacted topic holding a stage's state.
func (g *graph) changelogTopic(stage string) string {
	return g.top.Name + "." + stage + ".changelog"
}

// deadLetterTopic is the topic rejected records go to.
func (g *graph) deadLetterTopic() string { return g.top.DeadLetter.Topic }
