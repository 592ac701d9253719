package topotest

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/topology"
)

// tripBars is a candles kind that panics on a trade priced 666.
type tripBars struct{}

func (tripBars) Facts() topology.KindFacts {
	return topology.KindFacts{Name: "tripbars", Doc: "Candles; panics on a trade priced 666.", Timeframe: true, Candles: true}
}

func (tripBars) Validate(*topology.ProcessorCheck, *topology.Processor) {}

func (tripBars) Fingerprint(f *topology.FingerprintFields, p *topology.Processor) error {
	if err := f.Timeframe(p); err != nil {
		return err
	}
	f.Source(f.Topology().Sources[p.From])
	return nil
}

func (tripBars) NewProcessor(b *engine.Partition) (processors.Processor, error) {
	dec, err := processors.NewDecoder(b.Decoder)
	if err != nil {
		return nil, err
	}
	p := b.Processor
	a, err := processors.NewAggregator(processors.CandleConfig{Timeframe: b.Timeframe, Lateness: p.Lateness,
		MaxFuture: p.MaxFuture, MaxIdle: p.MaxIdle, GapFill: p.GapFill, Decoder: dec, Rollups: b.Rollups}, b.Clock)
	if err != nil {
		return nil, err
	}
	return tripAggregator{a}, nil
}

type tripAggregator struct{ *processors.Aggregator }

func (t tripAggregator) Process(rec processors.Record, out *processors.Output) {
	if bytes.Contains(rec.Value, []byte(`"666"`)) {
		panic("tripbars: price 666")
	}
	t.Aggregator.Process(rec, out)
}

// A record that panics its processor is dead-lettered internal_error, the
// other records are counted as if it never came, and the test fails with
// where the processor panicked.
func TestProcessorPanicFailsTheTest(t *testing.T) {
	var buf bytes.Buffer
	sum := NewRunner(&buf, WithRegistry(topology.Registry{Processors: map[string]topology.ProcessorKind{"tripbars": tripBars{}}})).
		Run("testdata/trip_test.yaml")
	if sum.Failed != 1 || sum.Broken != 0 {
		t.Errorf("summary %+v, want 1 failed", sum)
	}
	out := buf.String()
	if want := "processor 1m panicked on the record at partition 0 offset 1: tripbars: price 666 (again: the record is dead-lettered internal_error; the stacks are in the log)\n"; !strings.Contains(out, want) {
		t.Errorf("report lacks %q:\n%s", want, out)
	}
	// The candle and the dead letter match: the panic is the only failure.
	if strings.Contains(out, "expected matched") {
		t.Errorf("the outputs are not those of a run that dead-letters the record:\n%s", out)
	}
}
