package topology

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// billionLaughs nests aliases: level k is a list of ten aliases of level
// k-1, so the last level stands for 10^levels scalars.
func billionLaughs(levels int, merge bool) string {
	var b strings.Builder
	b.WriteString("lol0: &lol0 [\"lol\", \"lol\"]\n")
	for k := 1; k <= levels; k++ {
		fmt.Fprintf(&b, "lol%d: &lol%d [", k, k)
		for i := range 10 {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*lol%d", k-1)
		}
		b.WriteString("]\n")
	}
	if merge {
		// Merge keys too: each level merges the previous one under new keys.
		b.WriteString("m0: &m0 {a: *lol" + fmt.Sprint(levels) + "}\n")
		for k := 1; k <= 8; k++ {
			fmt.Fprintf(&b, "m%d: &m%d {<<: [*m%d], k%d: *m%d, j%d: *m%d}\n", k, k, k-1, k, k-1, k, k-1)
		}
	}
	fmt.Fprintf(&b, "name: laughs\nsources:\n  trades: {topic: t, symbols: *lol%d}\nprocessors: {}\n", levels)
	return b.String()
}

// A billion-laughs file is refused at once with a clear error, instead of
// expanding exponentially while it is read.
func TestAliasExpansionBounded(t *testing.T) {
	for _, merge := range []bool{false, true} {
		start := time.Now()
		_, err := Parse("laughs.yaml", []byte(billionLaughs(9, merge)), testRegistry())
		if err == nil || !strings.Contains(err.Error(), "aliases") || !strings.Contains(err.Error(), "expands to more than") {
			t.Fatalf("merge=%v: Parse = %v, want the alias expansion error", merge, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("merge=%v: Parse took %s", merge, d)
		}
	}
	// Aliases within the bound still work (the shipped examples use them).
	if n := expandedSize(mustNode(t, billionLaughs(2, false)), maxExpandedNodes); n > maxExpandedNodes || n < 200 {
		t.Fatalf("small alias file sized %d", n)
	}
}

// FuzzParse: the topology loader never panics or hangs, whatever the file,
// and a topology it accepts is accepted again.
func FuzzParse(f *testing.F) {
	root := filepath.Join("..", "testdata", "topologies")
	for _, name := range []string{"crypto.yaml", "devices.yaml", "crypto-sinks.yaml"} {
		if b, err := os.ReadFile(filepath.Join(root, name)); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(billionLaughs(3, true)))
	f.Add([]byte("base: &b {kind: candles, from: trades, timeframe: 1m}\nname: x\nsources: {trades: {topic: t}}\nprocessors:\n  c1m: {<<: *b, output: {topic: o}}\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte("---\n---\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64<<10 {
			return
		}
		top, err := Parse("fuzz.yaml", data, testRegistry())
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz.yaml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if _, err := Parse("fuzz.yaml", data, testRegistry()); err != nil {
			t.Fatalf("accepted once, then rejected: %v", err)
		}
		_ = top
	})
}

func mustNode(t *testing.T, s string) *yaml.Node {
	t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(s), &n); err != nil {
		t.Fatal(err)
	}
	return &n
}
