package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/topology"
)

// A quiet record round-trips, is recognised by header or body, and is never
// read as a candle; a candle is never read as a quiet record.
func TestQuietRecordFormat(t *testing.T) {
	m := processors.QuietMark{Key: `we"ird`, Until: 1767226200000}
	v := appendQuiet(nil, "1m", m)
	if want := `{"kind":"quiet","symbol":"we\"ird","timeframe":"1m","quiet_until":1767226200000}`; string(v) != want {
		t.Fatalf("body %s, want %s", v, want)
	}
	q, err := DecodeQuiet(v)
	if err != nil || q.Symbol != m.Key || q.Timeframe != "1m" || q.QuietUntil != m.Until {
		t.Fatalf("DecodeQuiet = %+v, %v", q, err)
	}
	if c, err := candle.ParseJSON(v); err == nil {
		t.Fatalf("a quiet record parses as a candle: %+v", c)
	}
	if !IsQuietRecord(&kgo.Record{Value: v}) || !IsQuietRecord(&kgo.Record{Value: []byte("{}"), Headers: []kgo.RecordHeader{{Key: QuietHeader, Value: []byte(QuietKind)}}}) {
		t.Fatal("a quiet record is not recognised")
	}
	c := candle.Candle{Symbol: "BTC", Timeframe: "1m", OpenTime: 0, CloseTime: 60000}
	if IsQuietRecord(&kgo.Record{Value: c.AppendJSON(nil)}) {
		t.Fatal("a candle is taken for a quiet record")
	}
	if _, err := DecodeQuiet([]byte(`{"kind":"quiet","symbol":""}`)); err == nil {
		t.Fatal("a quiet record without symbol decodes")
	}
}

// A rollup stage closes a key's open window on a quiet record, passes the
// mark on, and dead-letters a quiet record it cannot use instead of dropping it.
func TestRollupStageTakesQuietRecords(t *testing.T) {
	tf1m, _ := candle.ParseTimeframe("1m", time.UTC)
	tf5m, _ := candle.ParseTimeframe("5m", time.UTC)
	s := &stageSpec{Stage: topology.Stage{Name: "r5m", Timeframe: tf5m}, Rollup: true, from: tf1m, build: newRollup}
	proc, err := s.newProcessor(false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out processors.Output
	sub := candle.Candle{Symbol: "A", Timeframe: "1m", OpenTime: 60000, CloseTime: 120000}
	s.process(proc, processors.Record{Offset: 0, Value: sub.AppendJSON(nil)}, &out)
	if len(out.Candles)+len(out.Rejected) != 0 {
		t.Fatalf("one sub-candle produced %+v", out)
	}
	s.process(proc, processors.Record{Offset: 1, Value: appendQuiet(nil, "5m", processors.QuietMark{Key: "A", Until: 300000})}, &out)
	s.process(proc, processors.Record{Offset: 2, Value: []byte(`{"kind":"quiet","symbol":"A",`)}, &out)
	if len(out.Candles) != 0 || len(out.Quiet) != 0 || len(out.Rejected) != 2 {
		t.Fatalf("bad quiet records: %+v", out)
	}
	for _, r := range out.Rejected {
		if r.Reason != processors.ReasonMalformedJSON {
			t.Fatalf("reason %s, want %s", r.Reason, processors.ReasonMalformedJSON)
		}
	}
	out.Reset()
	s.process(proc, processors.Record{Offset: 3, Value: appendQuiet(nil, "1m", processors.QuietMark{Key: "A", Until: 300000})}, &out)
	if len(out.Candles) != 1 || out.Candles[0].OpenTime != 0 || out.Candles[0].CloseTime != 300000 {
		t.Fatalf("the quiet record did not close A's window: %+v", out.Candles)
	}
	if len(out.Quiet) != 1 || out.Quiet[0].Key != "A" {
		t.Fatalf("the mark is not passed on: %+v", out.Quiet)
	}
}

// A candle stage gets the timeframes of every rollup built from it, direct
// or through other rollups.
func TestGraphRollupsOf(t *testing.T) {
	g := &graph{byName: map[string]*stageSpec{}}
	for _, s := range []struct{ name, input, tf string }{{"c1m", "trades", "1m"}, {"r5m", "c1m", "5m"}, {"r1h", "r5m", "1h"}, {"r15m", "c1m", "15m"}, {"d5m", "trades", "5m"}} {
		tf, err := candle.ParseTimeframe(s.tf, time.UTC)
		if err != nil {
			t.Fatal(err)
		}
		st := &stageSpec{Stage: topology.Stage{Name: s.name, Input: s.input, Timeframe: tf}, Rollup: s.input != "trades"}
		g.stages = append(g.stages, st)
	}
	var got []string
	for _, tf := range g.rollupsOf("c1m") {
		got = append(got, tf.String())
	}
	if want := "[5m 1h 15m]"; fmt.Sprint(got) != want {
		t.Fatalf("rollups of c1m: %s, want %s", fmt.Sprint(got), want)
	}
	if n := len(g.rollupsOf("d5m")); n != 0 {
		t.Fatalf("d5m has %d rollups, want none", n)
	}
}
