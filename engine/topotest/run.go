package topotest

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/processors"
)

// Outcome is what one test produced and whether it matched.
type Outcome struct {
	Pass    bool
	Diff    string // readable expected-vs-got report when !Pass
	Elapsed time.Duration
	// Produced, in emission order: every closed candle of every stage and
	// every dead letter.
	Candles     []Produced
	DeadLetters []string // compact one-line form

	log []string // candles and dead letters interleaved as produced (-v)
}

// Produced is one closed candle and the stage and output partition it came from.
type Produced struct {
	Stage     string
	Partition int32
	Candle    candle.Candle
}

// FullName is "file_test.yaml/test name", the name -run matches.
func (c *Case) FullName() string { return filepath.Base(c.File) + "/" + c.Name }

// Run runs the test in a fresh in-process pipeline. The error is for a
// pipeline that could not be built or fed, not for a failed expectation.
func (c *Case) Run() (*Outcome, error) {
	start := time.Now()
	now := c.now
	if now.IsZero() {
		now = farFuture
	}
	p, err := engine.NewPipeline(c.suite.Topology, processors.FixedClock{T: now})
	if err != nil {
		return nil, fmt.Errorf("%s:%d: test %q: build pipeline: %w", c.File, c.Line, c.Name, err)
	}
	o := &Outcome{}
	got := map[string][]*candle.Candle{}
	var dls []deadLetter
	p.OnCandle = func(stage, _ string, cd *candle.Candle, part int32) {
		o.Candles = append(o.Candles, Produced{Stage: stage, Partition: part, Candle: *cd})
		o.log = append(o.log, fmt.Sprintf("candle %s p%d: %s", stage, part, formatCandle(cd)))
		cp := *cd
		got[stage] = append(got[stage], &cp)
	}
	p.OnReject = func(stage string, r *processors.Rejection) {
		d := deadLetter{stage: stage, r: *r}
		d.r.Value = append([]byte(nil), r.Value...)
		dls = append(dls, d)
		o.DeadLetters = append(o.DeadLetters, formatDeadLetter(&d))
		o.log = append(o.log, "dead letter: "+o.DeadLetters[len(o.DeadLetters)-1])
	}
	gotEvents := map[string][]gotEvent{}
	p.OnEvent = func(stage, _ string, ev *processors.Event, part int32) {
		g := toGotEvent(ev.Value)
		gotEvents[stage] = append(gotEvents[stage], g)
		o.log = append(o.log, fmt.Sprintf("event %s p%d: %s", stage, part, g.raw))
	}
	var panics []string
	p.OnPanic = func(stage string, rec *processors.Record, times int, value any, _ []byte) {
		msg := fmt.Sprintf("processor %s panicked on the record at partition %d offset %d: %v", stage, rec.Partition, rec.Offset, value)
		if times >= 2 {
			msg += " (again: the record is dead-lettered internal_error; the stacks are in the log)"
		}
		panics = append(panics, msg)
		o.log = append(o.log, msg)
	}
	for _, f := range c.feeds {
		if f.advance > 0 {
			if err := p.AdvanceTo(f.advance); err != nil {
				return nil, fmt.Errorf("%s:%d: test %q: advance to %s: %w", c.File, c.Line, c.Name, fmtTime(f.advance), err)
			}
			continue
		}
		if err := p.FeedRecord(f.source, processors.Record{Partition: f.partition, Offset: f.offset, Key: f.key, Value: f.value, Timestamp: f.at}); err != nil {
			return nil, fmt.Errorf("%s:%d: test %q: feed %s p%d@%d: %w", c.File, c.Line, c.Name, f.source, f.partition, f.offset, err)
		}
	}
	var d diffWriter
	for _, st := range c.stages {
		if ws, ok := c.events[st]; ok {
			d.events(st, ws, gotEvents[st], c.exactly)
			continue
		}
		d.candles(st, c.candles[st], got[st], c.exactly)
	}
	if c.dlChecked {
		d.deadLetters(c.dls, dls, c.exactly)
	}
	d.panics(panics)
	o.Pass, o.Diff, o.Elapsed = d.failed == 0, d.b.String(), time.Since(start)
	return o, nil
}
