package engine

import (
	"fmt"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/topology"
)

// ProcessorKind is a processor kind the engine can run: a topology kind
// (its facts, validation and fingerprint) that also builds the processor of
// one input partition. Register it in topology.Registry.Processors: the
// parsed topology hands it to the engine, so a new kind needs no change
// here. The built-in kinds (candles, rollup, silence) are built by
// builtinKinds.
type ProcessorKind interface {
	topology.ProcessorKind
	// NewProcessor builds the processor of one input partition.
	NewProcessor(p *Partition) (processors.Processor, error)
}

// Partition is what a processor kind gets to build the processor of one
// input partition of a stage.
type Partition struct {
	Name      string              // the processor's name
	Processor *topology.Processor // its settings, defaults filled
	// Source is the source the processor reads (nil for kinds reading a
	// processor), and Decoder its field mapping as a decoder config.
	Source  *topology.Source
	Decoder processors.DecoderConfig
	// Timeframe is the processor's, with its zone (zero for kinds without
	// windows); From the timeframe of the candles a kind reading a
	// processor gets.
	Timeframe, From candle.Timeframe
	// Rollups are the timeframes of every rollup built from the
	// processor's candles, directly or through other rollups: emit quiet
	// marks for them (processors.CandleConfig.Rollups).
	Rollups []candle.Timeframe
	// Live enables wall-clock driven work (idle advance, silence levels);
	// replays and `kandle test` run with it off.
	Live  bool
	Clock processors.Clock
	// ReviseWithin is the revision horizon of the stage
	// (topology.Stage.ReviseWithin): processors.CandleConfig.ReviseWithin
	// for a candles processor, processors.RollupConfig.ReviseWithin for a
	// rollup. 0: no revisions.
	ReviseWithin time.Duration
	// StateLateness is the lateness the stored state was written under
	// when it is older than the stored watermark (processors.CandleConfig);
	// nil: the processor's.
	StateLateness *time.Duration
}

// ReshardingKind is implemented by a registered processor kind whose state
// can follow a Kinesis split or merge: its Resharder says which record key
// each state entry belongs to and how partition-wide entries of several
// parent shards merge (see processors.HandOver). A kind without it runs on
// Kafka and on a Kinesis stream that is never resharded; a split or merge
// of its stream fails the child shard's open with an error naming the kind,
// rather than hand the child a state it cannot split. The Partition it is
// given describes the stage (Live and Clock are unset).
type ReshardingKind interface {
	Resharder(p *Partition) (processors.Resharder, error)
}

// builder builds the processor of one input partition.
type builder func(p *Partition) (processor, error)

// builtinKind is how the engine runs a built-in kind: it builds its
// processors and splits and merges their state across a reshard.
type builtinKind struct {
	build   builder
	reshard func(p *Partition) (processors.Resharder, error)
}

// builtinKinds returns how the engine runs the built-in kinds, by kind
// name.
func builtinKinds() map[string]builtinKind {
	return map[string]builtinKind{
		"candles": {newCandles, func(p *Partition) (processors.Resharder, error) {
			return processors.CandleResharder{Metrics: len(p.Source.Fields.Values) > 0}, nil
		}},
		"rollup":  {newRollup, func(*Partition) (processors.Resharder, error) { return processors.RollupResharder{}, nil }},
		"silence": {newSilence, func(*Partition) (processors.Resharder, error) { return processors.SilenceResharder{}, nil }},
	}
}

// builderOf returns how the engine builds the processors of kind k: its
// own NewProcessor when it has one, else the built-in one of its name.
func builderOf(k topology.ProcessorKind) (builder, error) {
	if pk, ok := k.(ProcessorKind); ok {
		return pk.NewProcessor, nil
	}
	name := k.Facts().Name
	if b, ok := builtinKinds()[name]; ok {
		return b.build, nil
	}
	return nil, fmt.Errorf("kind %s has no processor in this build (its registered value must implement engine.ProcessorKind)", name)
}

// resharderOf returns how stage s splits and merges its processors' state
// across a Kinesis reshard: the kind's Resharder when it has one, else the
// built-in one of its name; an error names a kind that has neither.
func resharderOf(s *stageSpec) (processors.Resharder, error) {
	k := s.Kind
	if k == nil {
		return nil, fmt.Errorf("processor %s: unknown kind %q", s.Name, s.Processor.Kind)
	}
	p := s.partition(false, nil)
	if rk, ok := k.(ReshardingKind); ok {
		return rk.Resharder(p)
	}
	if _, own := k.(ProcessorKind); !own {
		if b, ok := builtinKinds()[k.Facts().Name]; ok {
			return b.reshard(p)
		}
	}
	return nil, fmt.Errorf("processor %s: kind %s cannot follow a Kinesis split or merge: its registered value does not implement "+
		"engine.ReshardingKind (which record key each state entry belongs to, how parents' partition-wide entries merge), "+
		"so its state cannot be handed to the child shards", s.Name, k.Facts().Name)
}

// newCandles builds a candle aggregator, or for a source with several
// value fields one series per metric.
func newCandles(b *Partition) (processor, error) {
	p := b.Processor
	if vals := b.Source.Fields.Values; len(vals) > 0 {
		f := b.Decoder.Fields
		return processors.NewMultiMetric(processors.MetricsConfig{
			Key: f.Key, Time: f.Time, Values: vals, Symbols: b.Decoder.Symbols, MaxRecordBytes: b.Decoder.MaxRecordBytes,
			KeyCheck: b.Decoder.KeyCheck,
		}, processors.CandleConfig{
			Timeframe: b.Timeframe, Lateness: p.Lateness, IdleTimeout: p.IdleTimeout,
			MaxFuture: p.MaxFuture, MaxIdle: p.MaxIdle, GapFill: p.GapFill, Live: b.Live, Rollups: b.Rollups,
			StateLateness: b.StateLateness, ReviseWithin: b.ReviseWithin,
		}, b.Clock)
	}
	dec, err := processors.NewDecoder(b.Decoder)
	if err != nil {
		return nil, err
	}
	return processors.NewAggregator(processors.CandleConfig{
		Timeframe: b.Timeframe, Lateness: p.Lateness, IdleTimeout: p.IdleTimeout,
		MaxFuture: p.MaxFuture, MaxIdle: p.MaxIdle, Dedupe: p.Dedupe, GapFill: p.GapFill,
		Live: b.Live, Decoder: dec, Rollups: b.Rollups, StateLateness: b.StateLateness,
		ReviseWithin: b.ReviseWithin,
	}, b.Clock)
}

// newRollup builds a rollup of the upstream processor's candles.
func newRollup(b *Partition) (processor, error) {
	return processors.NewRollup(processors.RollupConfig{From: b.From, To: b.Timeframe, ReviseWithin: b.ReviseWithin})
}

// newSilence builds a silence processor from the source's fields and the
// processor's levels.
func newSilence(b *Partition) (processor, error) {
	p := b.Processor
	levels := make([]processors.SilenceLevel, len(p.Levels))
	for i, l := range p.Levels {
		levels[i] = processors.SilenceLevel{Name: l.Name, After: l.After, Action: l.Action}
	}
	f := b.Decoder.Fields
	return processors.NewSilence(processors.SilenceConfig{
		Levels: levels, Key: f.Key, Time: f.Time, Carry: p.Carry, Retire: p.RetireField,
		MaxRecordBytes: b.Decoder.MaxRecordBytes, KeyCheck: b.Decoder.KeyCheck, IdleTimeout: p.IdleTimeout, Live: b.Live,
	}, b.Clock)
}
