package engine

import (
	"fmt"

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
type Pipeline struct {
	g       *graph
	clock   processors.Clock
	procs   map[*stageSpec]map[int32]processor
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
	p := &Pipeline{g: g, clock: clock, procs: map[*stageSpec]map[int32]processor{},
		offsets: map[string][]int64{}, parts: newPartitioner()}
	for _, s := range g.stages {
		p.procs[s] = map[int32]processor{}
		p.offsets[s.OutputTopic] = make([]int64, s.OutputParts)
	}
	return p
}

func (p *Pipeline) proc(s *stageSpec, partition int32) (processor, error) {
	pr, ok := p.procs[s][partition]
	if !ok {
		var err error
		if pr, err = s.newProcessor(false, p.clock); err != nil {
			return nil, fmt.Errorf("stage %s: %w", s.Name, err)
		}
		p.procs[s][partition] = pr
	}
	return pr, nil
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
	pr, err := p.proc(s, rec.Partition)
	if err != nil {
		return err
	}
	var out processors.Output
	s.process(pr, rec, &out)
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
	p.procs[s][partition] = pr
	return nil
}

// changes drains the state changes of stage's processor of partition.
func (p *Pipeline) changes(s *stageSpec, partition int32, fn func(key, val []byte)) {
	if pr, ok := p.procs[s][partition]; ok {
		pr.Changes(fn)
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
