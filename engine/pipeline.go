package engine

import (
	"fmt"
	"log/slog"
	"maps"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/topology"
)

// Pipeline runs a topology's processors in process, without a broker:
// records fed into a source flow through the candle processors, and their
// candles flow through the rollups via in-memory topics partitioned exactly
// like the real output topics. Replay and `kandle test` use it; it never
// reads the wall clock except through the Clock it is given (for the future
// guard), and never advances watermarks by it.
//
// A processor that panics on a record is handled as the live engine handles
// it: its state is rebuilt as of before the record and the record is given
// to it again; at its second panic the record is dead-lettered with reason
// internal_error instead, the stack of each panic is logged, and the
// pipeline carries on, so replay equals live for such a record too. To
// rebuild, each processor keeps its state entries as of a recent
// checkpoint and the records it took since.
type Pipeline struct {
	g       *graph
	clock   processors.Clock
	procs   map[*stageSpec]map[int32]*partProc
	offsets map[string][]int64 // next offset of each in-memory output partition
	parts   partitioner
	out     processors.Output
	buf     []byte

	// OnCandle receives every closed candle of every stage, with the output
	// topic and partition it belongs to.
	OnCandle func(stage, topic string, c *candle.Candle, partition int32)
	// OnEvent receives every event (kind silence) of every stage, with the
	// output topic and partition it belongs to.
	OnEvent func(stage, topic string, ev *processors.Event, partition int32)
	// OnReject receives every rejected record of every stage.
	OnReject func(stage string, r *processors.Rejection)
	// OnQuiet receives every quiet record (the body, see IsQuietRecord) a
	// stage writes to its output topic, after the candles it follows.
	OnQuiet func(stage, topic, key string, value []byte)
	// Log receives each processor panic with its stack (default slog.Default()).
	Log *slog.Logger
	// OnPanic, when set, is told of each processor panic after it is logged:
	// the stage, the record, how many times it has panicked so far, and the
	// panic's value and stack.
	OnPanic func(stage string, rec *processors.Record, times int, value any, stack []byte)
}

// checkpointEvery is how many records a pipeline processor takes between
// two checkpoints of its state: a panic rebuilds the processor from the
// last checkpoint and gives it the records since again.
const checkpointEvery = 512

// partProc is the processor of one stage and partition of a Pipeline, with
// what rebuilding it after a panic needs.
type partProc struct {
	pr    processor
	saved map[string][]byte   // state entries at the last checkpoint
	since []processors.Record // records taken after it, in order
}

// took notes that the processor took rec, checkpointing now and then.
func (pp *partProc) took(rec processors.Record) {
	pp.since = append(pp.since, rec)
	if len(pp.since) >= checkpointEvery {
		pp.checkpoint(nil)
	}
}

// checkpoint folds the processor's changes since the last checkpoint into
// saved (passing each to fn too, when set) and forgets the records taken.
func (pp *partProc) checkpoint(fn func(key, val []byte)) {
	pp.pr.Changes(func(k, v []byte) {
		if v == nil {
			delete(pp.saved, string(k))
		} else {
			pp.saved[string(k)] = append([]byte(nil), v...)
		}
		if fn != nil {
			fn(k, v)
		}
	})
	clear(pp.since)
	pp.since = pp.since[:0]
}

// rebuild replaces the processor with one restored from the last
// checkpoint that has taken the records since again (their outputs were
// emitted already and are dropped).
func (pp *partProc) rebuild(s *stageSpec, clock processors.Clock) error {
	pr, err := restoreProcessor(s, false, clock, pp.saved)
	if err != nil {
		return fmt.Errorf("stage %s: rebuild after a processor panic: %w", s.Name, err)
	}
	for _, rec := range pp.since {
		var out processors.Output
		if p := processCatching(s, pr, rec, &out); p != nil {
			return fmt.Errorf("stage %s: rebuild after a processor panic: record p%d@%d, which it took before, panicked it now (%v): the processor is not deterministic", s.Name, rec.Partition, rec.Offset, p.value)
		}
	}
	pp.pr = pr
	return nil
}

// NewPipeline builds an in-process pipeline for t.
func NewPipeline(t *topology.Topology, clock processors.Clock) (*Pipeline, error) {
	g, err := buildGraph(t)
	if err != nil {
		return nil, err
	}
	return newPipeline(g, clock), nil
}

func newPipeline(g *graph, clock processors.Clock) *Pipeline {
	p := &Pipeline{g: g, clock: clock, procs: map[*stageSpec]map[int32]*partProc{},
		offsets: map[string][]int64{}, parts: newPartitioner()}
	for _, s := range g.stages {
		p.procs[s] = map[int32]*partProc{}
		p.offsets[s.OutputTopic] = make([]int64, s.OutputParts)
	}
	return p
}

func (p *Pipeline) proc(s *stageSpec, partition int32) (*partProc, error) {
	pp, ok := p.procs[s][partition]
	if !ok {
		pr, err := s.newProcessor(false, p.clock)
		if err != nil {
			return nil, fmt.Errorf("stage %s: %w", s.Name, err)
		}
		pp = &partProc{pr: pr, saved: map[string][]byte{}}
		p.procs[s][partition] = pp
	}
	return pp, nil
}

// Feed processes one record of source at (partition, offset); key is its
// record key (Kafka) or partition key (Kinesis).
func (p *Pipeline) Feed(source string, partition int32, offset int64, key, value []byte) error {
	return p.FeedRecord(source, processors.Record{Partition: partition, Offset: offset, Key: key, Value: value})
}

// FeedRecord processes one record of source (with its record Key and its
// ingestion Timestamp, which silence processors measure silence by).
func (p *Pipeline) FeedRecord(source string, rec processors.Record) error {
	for _, s := range p.g.stages {
		if !s.Rollup && s.Input == source {
			if err := p.feedStage(s, rec); err != nil {
				return err
			}
		}
	}
	return nil
}

func (p *Pipeline) feedStage(s *stageSpec, rec processors.Record) error {
	pp, err := p.proc(s, rec.Partition)
	if err != nil {
		return err
	}
	var out processors.Output
	for n := 0; ; {
		if n >= panicLimit {
			out.Rejected = append(out.Rejected, internalError(rec, n))
			break
		}
		pan := processCatching(s, pp.pr, rec, &out)
		if pan == nil {
			pp.took(rec)
			break
		}
		n++
		log := p.Log
		if log == nil {
			log = slog.Default()
		}
		pan.log(log, "processor panicked; rebuilding its state as of before the record", s.Name, fmt.Sprintf("partition %d", rec.Partition), rec.Offset, n)
		if p.OnPanic != nil {
			p.OnPanic(s.Name, &rec, n, pan.value, pan.stack)
		}
		if err := pp.rebuild(s, p.clock); err != nil {
			return err
		}
		out = processors.Output{} // what the record made before its panic is dropped
	}
	return p.emit(s, &out)
}

func (p *Pipeline) emit(s *stageSpec, out *processors.Output) error {
	for i := range out.Rejected {
		if p.OnReject != nil {
			p.OnReject(s.Name, &out.Rejected[i])
		}
	}
	for i := range out.Events {
		ev := &out.Events[i]
		if p.OnEvent != nil {
			p.OnEvent(s.Name, s.OutputTopic, ev, p.parts.partition(s.OutputTopic, ev.Key, s.OutputParts))
		}
	}
	down := p.g.downstream(s.Name)
	for i := range out.Candles {
		c := &out.Candles[i]
		part := p.parts.partition(s.OutputTopic, c.Symbol, s.OutputParts)
		if p.OnCandle != nil {
			p.OnCandle(s.Name, s.OutputTopic, c, part)
		}
		if len(down) == 0 {
			continue
		}
		off := p.offsets[s.OutputTopic][part]
		p.offsets[s.OutputTopic][part]++
		value := c.AppendJSON(nil)
		for _, d := range down {
			if err := p.feedStage(d, processors.Record{Partition: part, Offset: off, Value: value}); err != nil {
				return err
			}
		}
	}
	var qerr error
	s.quietRecords(out, func(r *kgo.Record) {
		if qerr != nil {
			return
		}
		key := string(r.Key)
		part := p.parts.partition(s.OutputTopic, key, s.OutputParts)
		if p.OnQuiet != nil {
			p.OnQuiet(s.Name, s.OutputTopic, key, r.Value)
		}
		off := p.offsets[s.OutputTopic][part]
		p.offsets[s.OutputTopic][part]++
		for _, d := range down {
			if qerr = p.feedStage(d, processors.Record{Partition: part, Offset: off, Key: r.Key, Value: r.Value}); qerr != nil {
				return
			}
		}
	})
	return qerr
}

// restore replaces stage's processor of partition with one built from entries
// (a Kinesis child shard taking over its parents' keys).
func (p *Pipeline) restore(s *stageSpec, partition int32, entries map[string][]byte) error {
	pr, err := restoreProcessor(s, false, p.clock, entries)
	if err != nil {
		return err
	}
	p.procs[s][partition] = &partProc{pr: pr, saved: maps.Clone(entries)}
	return nil
}

// changes drains the state changes of stage's processor of partition (a
// checkpoint of it).
func (p *Pipeline) changes(s *stageSpec, partition int32, fn func(key, val []byte)) {
	if pp, ok := p.procs[s][partition]; ok {
		pp.checkpoint(fn)
	}
}

// Stages returns the names of the pipeline's stages in dependency order.
func (p *Pipeline) Stages() []string {
	names := make([]string, len(p.g.stages))
	for i, s := range p.g.stages {
		names[i] = s.Name
	}
	return names
}

// partitioner computes the partition kgo's default (murmur2, Kafka-compatible)
// partitioner picks for a key, so in-process topics match real ones.
type partitioner struct {
	p      kgo.Partitioner
	topics map[string]kgo.TopicPartitioner
	rec    kgo.Record
}

func newPartitioner() partitioner {
	return partitioner{p: kgo.StickyKeyPartitioner(nil), topics: map[string]kgo.TopicPartitioner{}}
}

func (pt *partitioner) partition(topic, key string, n int) int32 {
	tp, ok := pt.topics[topic]
	if !ok {
		tp = pt.p.ForTopic(topic)
		pt.topics[topic] = tp
	}
	pt.rec.Key = []byte(key)
	return int32(tp.Partition(&pt.rec, n))
}
