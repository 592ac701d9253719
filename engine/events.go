package engine

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/topology"
)

// emitEvents produces out's events to the stage's output topic, keyed by
// their key, with produce (which adds them to the open transaction).
func emitEvents(ctx context.Context, m *metrics, spec *stageSpec, out *processors.Output, produce func(context.Context, *kgo.Record)) {
	for i := range out.Events {
		ev := &out.Events[i]
		produce(ctx, &kgo.Record{Topic: spec.OutputTopic, Key: []byte(ev.Key), Value: ev.Value})
	}
	if n := len(out.Events); n > 0 {
		m.events.WithLabelValues(spec.Name).Add(float64(n))
	}
}

// arrivalMS is a Kinesis record's approximate arrival time in Unix ms (0 when unknown).
func arrivalMS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// advancer is a processor whose clock can be moved without input (silence).
type advancer interface {
	AdvanceTo(t int64, out *processors.Output)
}

// AdvanceTo moves the ingestion clock of every time-driven processor
// (kind silence) of every partition to t (Unix ms), emitting what comes due.
// Pipelines never read the wall clock: topology tests use it to let days
// pass without input.
func (p *Pipeline) AdvanceTo(t int64) error {
	for _, s := range p.g.stages {
		for _, part := range slices.Sorted(maps.Keys(p.procs[s])) {
			pp := p.procs[s][part]
			a, ok := pp.pr.(advancer)
			if !ok {
				continue
			}
			var out processors.Output
			a.AdvanceTo(t, &out)
			pp.checkpoint(nil) // a rebuild must not take the advance back
			if err := p.emit(s, &out); err != nil {
				return err
			}
		}
	}
	return nil
}

// EventOutput is implemented by replay outputs that take events (kind
// silence); a replay to an output without it drops no candles but writes no events.
type EventOutput interface {
	Event(stage, topic string, ev *processors.Event) error
}

// Event produces ev to topic, keyed by its device.
func (o *TopicOutput) Event(_ string, topic string, ev *processors.Event) error {
	o.cl.Produce(context.Background(), &kgo.Record{Topic: topic, Key: []byte(ev.Key), Value: ev.Value}, o.promise)
	return o.err
}

// Event writes the event as one JSON line, as it is on the topic.
func (o *WriterOutput) Event(_ string, _ string, ev *processors.Event) error {
	o.buf = append(append(o.buf[:0], ev.Value...), '\n')
	_, err := o.W.Write(o.buf)
	return err
}

// EventSink is a sink that takes events (JSON objects) from processors of
// kind silence. Writes must be idempotent: events are redelivered after a
// crash, in order per partition.
type EventSink interface {
	WriteEvents(ctx context.Context, events [][]byte) error
}

// takeEvents makes the sink stage read stage st's events.
func (s *sinkStage) takeEvents(sk *topology.Sink, st *stageSpec) error {
	es, ok := s.sink.(EventSink)
	if !ok {
		return fmt.Errorf("sink %s: kind %s cannot take the events of %s (kind %s); use a dynamodb or valkey sink", s.name, sk.Kind, st.Name, st.Facts.Name)
	}
	if s.eventTopics == nil {
		s.eventTopics = map[string]bool{}
	}
	s.events, s.eventTopics[st.OutputTopic] = es, true
	return nil
}

// writeEvents retries until the sink takes the events or ctx ends.
func (s *sinkStage) writeEvents(ctx context.Context, events [][]byte) error {
	if len(events) == 0 {
		return nil
	}
	if err := s.retry(ctx, "write events", func() error { return s.events.WriteEvents(ctx, events) }); err != nil {
		return err
	}
	s.e.m.sinkWritten.WithLabelValues(s.name).Add(float64(len(events)))
	return nil
}
