package engine

import (
	"fmt"
	"testing"

	"github.com/kandle/kandle/topology"
)

// Which rollups run fused: those reading their upstream's output with the
// same key and partition count, unless they opt out; a chain fuses level
// by level, and a level whose partition count differs starts a stage of
// its own (which the next level may fuse into).
func TestGraphFuse(t *testing.T) {
	for _, tc := range []struct {
		name, procs string
		keyCheck    bool
		want        string // processor → the stage it runs in
	}{
		{"chain", `
  c1m: {kind: candles, from: trades, timeframe: 1m, output: {partitions: 3}}
  c5m: {kind: rollup, from: c1m, timeframe: 5m, output: {partitions: 3}}
  c1h: {kind: rollup, from: c5m, timeframe: 1h, output: {partitions: 1}}
  c1d: {kind: rollup, from: c1h, timeframe: 1d}`, true, "map[c1h:c1m c5m:c1m]"},
		{"partition counts differ", `
  c1m: {kind: candles, from: trades, timeframe: 1m, output: {partitions: 2}}
  c5m: {kind: rollup, from: c1m, timeframe: 5m, output: {partitions: 2}}
  c1h: {kind: rollup, from: c5m, timeframe: 1h}`, true, "map[c1h:c5m]"},
		{"opt out", `
  c1m: {kind: candles, from: trades, timeframe: 1m, output: {partitions: 3}}
  c5m: {kind: rollup, from: c1m, timeframe: 5m, fuse: false, output: {partitions: 3}}
  c1h: {kind: rollup, from: c5m, timeframe: 1h}`, true, "map[c1h:c5m]"},
		{"source keys not checked", `
  c1m: {kind: candles, from: trades, timeframe: 1m, output: {partitions: 3}}
  c5m: {kind: rollup, from: c1m, timeframe: 5m}`, false, "map[]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			top, err := topology.Parse("fuse.yaml", fmt.Appendf(nil, `
name: fuse
brokers: [127.0.0.1:9092]
sources:
  trades: {topic: trades, partitions: 3, key_check: %v}
processors:%s
dead_letter: {topic: fuse.dlq}
`, tc.keyCheck, tc.procs), topology.Registry{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := FusedInto(top)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != tc.want {
				t.Fatalf("fused: %v, want %s", got, tc.want)
			}
		})
	}
}

// The snapshot positions of fused processors ride on the stage's offset
// commit metadata after its own; an older reader sees only the first line
// (and a first line without a snapshot names none).
func TestFusedSnapMeta(t *testing.T) {
	own, f1, f2 := snapRef{offset: 7, token: "i.1"}, snapRef{offset: 0, token: "i.2"}, snapRef{offset: 42, token: "i.3"}
	md := own.metadata() + fusedSnapLine("c5m", f1) + fusedSnapLine("c1h", f2)
	if got, ok := parseSnapMeta(md); !ok || got != own {
		t.Fatalf("own snapshot: %v %v, want %v", got, ok, own)
	}
	for name, want := range map[string]snapRef{"c5m": f1, "c1h": f2} {
		if got, ok := parseFusedSnapMeta(md, name); !ok || got != want {
			t.Fatalf("%s: %v %v, want %v", name, got, ok, want)
		}
	}
	if _, ok := parseFusedSnapMeta(md, "c1"); ok {
		t.Fatal("a name that is a prefix of another's found a snapshot")
	}
	none := snapRef{offset: -1, token: "-"}.metadata() + fusedSnapLine("c5m", f1)
	if _, ok := parseSnapMeta(none); ok {
		t.Fatal("a first line without a snapshot named one")
	}
	if got, ok := parseFusedSnapMeta(none, "c5m"); !ok || got != f1 {
		t.Fatalf("c5m after an empty first line: %v %v", got, ok)
	}
}
