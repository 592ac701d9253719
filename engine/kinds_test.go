package engine_test

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/topology"
)

// tallyKind is a processor kind that only this test registers: it reads a
// source's records and emits, per record, the running count of its key as
// an event.
type tallyKind struct{}

func (tallyKind) Facts() topology.KindFacts {
	return topology.KindFacts{Name: "tally", Doc: "Counts the records of each key."}
}

func (tallyKind) Validate(*topology.ProcessorCheck, *topology.Processor) {}

func (tallyKind) Fingerprint(f *topology.FingerprintFields, p *topology.Processor) error {
	f.Source(f.Topology().Sources[p.From])
	return nil
}

func (tallyKind) NewProcessor(*engine.Partition) (processors.Processor, error) {
	return &tally{n: map[string]int{}, dirty: map[string]bool{}}, nil
}

// tally is the processor of kind tally: counts by record key, state entry
// key → count.
type tally struct {
	n     map[string]int
	dirty map[string]bool
}

func (t *tally) Process(rec processors.Record, out *processors.Output) {
	k := string(rec.Key)
	t.n[k]++
	t.dirty[k] = true
	out.Events = append(out.Events, processors.Event{Key: k, Value: fmt.Appendf(nil, `{"key":%q,"n":%d}`, k, t.n[k])})
}

func (t *tally) Tick(*processors.Output) {}
func (t *tally) ResetIdle()              {}
func (t *tally) Changes(fn func(key, val []byte)) {
	for k := range t.dirty {
		fn([]byte(k), strconv.AppendInt(nil, int64(t.n[k]), 10))
	}
	clear(t.dirty)
}

func (t *tally) Restore(key, val []byte) error {
	n, err := strconv.Atoi(string(val))
	t.n[string(key)] = n
	return err
}

func (t *tally) Active(func(c *candle.Candle)) {}

// barsKind is a candle kind that only this test registers: an aggregator
// built from what the engine hands it, so rollups may read its candles. It
// keeps the partitions it was asked to build.
type barsKind struct{ built []engine.Partition }

func (*barsKind) Facts() topology.KindFacts {
	return topology.KindFacts{Name: "bars", Doc: "Candles without dedupe.", Timeframe: true, Candles: true}
}

func (*barsKind) Validate(*topology.ProcessorCheck, *topology.Processor) {}

func (*barsKind) Fingerprint(f *topology.FingerprintFields, p *topology.Processor) error {
	if err := f.Timeframe(p); err != nil {
		return err
	}
	f.Source(f.Topology().Sources[p.From])
	return nil
}

func (k *barsKind) NewProcessor(b *engine.Partition) (processors.Processor, error) {
	k.built = append(k.built, *b)
	dec, err := processors.NewDecoder(b.Decoder)
	if err != nil {
		return nil, err
	}
	p := b.Processor
	return processors.NewAggregator(processors.CandleConfig{Timeframe: b.Timeframe, Lateness: p.Lateness,
		MaxFuture: p.MaxFuture, MaxIdle: p.MaxIdle, GapFill: p.GapFill, Decoder: dec, Rollups: b.Rollups}, b.Clock)
}

const kindsTopology = `name: k
brokers: embedded
sources:
  trades: {topic: trades}
processors:
  n: {kind: tally, from: trades}
  b1m: {kind: bars, from: trades, timeframe: 1m}
  r5m: {kind: rollup, from: b1m, timeframe: 5m}
`

// TestRegisteredKindsRun: kinds registered in the topology Registry, and
// nowhere else, are validated, fingerprinted and run by the engine: an
// event kind's events reach its output topic, and a candle kind's candles
// feed a built-in rollup, quiet marks included.
func TestRegisteredKindsRun(t *testing.T) {
	bars := &barsKind{}
	reg := topology.Registry{Processors: map[string]topology.ProcessorKind{"tally": tallyKind{}, "bars": bars}}
	top, err := topology.Parse("k.yaml", []byte(kindsTopology), reg)
	if err != nil {
		t.Fatal(err)
	}
	fp, err := top.Fingerprint("r5m")
	if err != nil || !strings.Contains(string(fp.Encode()), `["from.kind","bars"],["from.timeframe","1m"],["from.input","kafka topic trades"]`) {
		t.Fatalf("rollup fingerprint %s, %v: want the bars processor's under from.", fp.Encode(), err)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	p, err := engine.NewPipeline(top, processors.FixedClock{T: time.UnixMilli(start).Add(24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	candles := map[string][]candle.Candle{}
	p.OnEvent = func(stage, topic string, ev *processors.Event, _ int32) {
		events = append(events, stage+" "+topic+" "+string(ev.Value))
	}
	p.OnCandle = func(stage, _ string, c *candle.Candle, _ int32) {
		if !c.Gap {
			candles[stage] = append(candles[stage], *c)
		}
	}
	p.OnReject = func(stage string, r *processors.Rejection) { t.Errorf("%s rejected: %s %s", stage, r.Reason, r.Detail) }
	// One BTC trade a minute for 5 minutes at prices 1..5, then one that
	// moves the watermark past the 5m window.
	for i, at := range []int64{0, 1, 2, 3, 4, 7} {
		v := fmt.Appendf(nil, `{"symbol":"BTC","ts":%d,"price":"%d","qty":"1","trade_id":%d}`, start+at*60_000, i+1, i)
		if err := p.Feed("trades", 0, int64(i), []byte("BTC"), v); err != nil {
			t.Fatal(err)
		}
	}
	if len(events) != 6 || events[5] != `n k.n {"key":"BTC","n":6}` {
		t.Errorf("tally events = %q", events)
	}
	if n := len(candles["b1m"]); n != 5 {
		t.Errorf("bars candles = %d, want 5 (minutes 0-4)", n)
	}
	r := candles["r5m"]
	if len(r) != 1 || r[0].OpenTime != start || r[0].Open.String() != "1" || r[0].High.String() != "5" ||
		r[0].Close.String() != "5" || r[0].Trades != 5 {
		t.Fatalf("rollup of bars candles = %+v, want one 5m candle 1/5/1/5 of 5 trades", r)
	}
	if len(bars.built) != 1 {
		t.Fatalf("bars built %d processors, want 1 (one partition)", len(bars.built))
	}
	b := bars.built[0]
	if b.Name != "b1m" || b.Source != top.Sources["trades"] || b.Timeframe.String() != "1m" || b.Live ||
		!reflect.DeepEqual(b.Rollups, []candle.Timeframe{top.TimeframeOf(top.Processors["r5m"])}) || b.Decoder.Fields.Key != "symbol" {
		t.Errorf("bars partition = %+v", b)
	}
}

// TestRegisteredKindWithoutProcessor: a kind registered only for parsing
// (no NewProcessor) is refused by the engine with what to do.
func TestRegisteredKindWithoutProcessor(t *testing.T) {
	type parseOnly struct{ topology.ProcessorKind }
	reg := topology.Registry{Processors: map[string]topology.ProcessorKind{"tally": parseOnly{tallyKind{}}, "bars": &barsKind{}}}
	top, err := topology.Parse("k.yaml", []byte(kindsTopology), reg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = engine.NewPipeline(top, processors.FixedClock{})
	if err == nil || !strings.Contains(err.Error(), "processor n: kind tally has no processor in this build") {
		t.Fatalf("got %v", err)
	}
}
