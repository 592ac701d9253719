package topology

import (
	"strings"
	"testing"
	"time"
)

const silenceBase = `name: dev
sources:
  readings: {topic: r, fields: {key: device, time: ts, price: temperature, qty: "", id: ""}}
processors:
  1m: {kind: candles, from: readings, timeframe: 1m}
`

// TestSilenceParses: levels decode as a list with defaults, days are
// accepted as durations, and a silence stage reads its source.
func TestSilenceParses(t *testing.T) {
	src := silenceBase + `  silence:
    kind: silence
    from: readings
    carry: [owner]
    levels:
      - {name: unreachable, after: 3d, action: status}
      - {name: alert1, after: 7d}
      - {name: alert2, after: 1d216h}
`
	top, err := Parse("d.yaml", []byte(src), Registry{})
	if err != nil {
		t.Fatal(err)
	}
	p := top.Processors["silence"]
	if len(p.Levels) != 3 || p.Levels[0].After != 72*time.Hour || p.Levels[0].Action != "status" ||
		p.Levels[1].Action != "alert" || p.Levels[2].After != 240*time.Hour || p.RetireField != "retired" {
		t.Fatalf("levels = %+v, retire %q", p.Levels, p.RetireField)
	}
	var found bool
	for _, st := range top.Stages() {
		if st.Name == "silence" {
			found = st.Source == top.Sources["readings"] && st.Upstream == nil
		}
	}
	if !found {
		t.Fatal("the silence stage does not read its source")
	}
}

// TestSilenceInvalid: each mistake is reported with what to change.
func TestSilenceInvalid(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"  s: {kind: silence, from: readings}\n", "kind silence needs levels"},
		{"  s: {kind: silence, from: readings, timeframe: 1m, levels: [{name: a, after: 1h}]}\n", "kind silence has no windows"},
		{"  s: {kind: silence, from: readings, levels: [{name: recovered, after: 1h}]}\n", "recovered is the event"},
		{"  s: {kind: silence, from: readings, levels: [{name: a, after: 1h}, {name: a, after: 2h}]}\n", "listed twice"},
		{"  s: {kind: silence, from: readings, levels: [{name: a, after: 0s}]}\n", "positive duration"},
		{"  s: {kind: silence, from: readings, levels: [{name: a}]}\n", `missing required key "after"`},
		{"  s: {kind: silence, from: readings, carry: [device], levels: [{name: a, after: 1h}]}\n", "overwrite a field"},
		{"  s: {kind: silence, from: readings, levels: [{name: a, after: 1h}]}\n  r: {kind: rollup, from: s, timeframe: 1h}\n", "holds events, not candles"},
		{"  s: {kind: silence, from: 1m, levels: [{name: a, after: 1h}]}\n", "kind silence reads records from a source"},
		{"  c: {kind: candles, from: readings}\n", "kind candles needs a timeframe"},
	} {
		_, err := Parse("d.yaml", []byte(silenceBase+c.yaml), Registry{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want a problem containing %q", c.yaml, err, c.want)
		}
	}
}
