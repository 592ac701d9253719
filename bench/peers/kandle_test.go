package main

import (
	"fmt"
	"slices"
	"testing"

	"github.com/kandle/kandle/topology"
)

// TestStageGroups checks what kandle's clock waits for: fused, the 1m
// stage's group alone (the seven rollups commit in its transactions);
// unfused, every processor's group.
func TestStageGroups(t *testing.T) {
	for _, tc := range []struct {
		fuse bool
		want []string
	}{
		{true, []string{"kandle-g.1m"}},
		{false, []string{"kandle-g.15m", "kandle-g.1M", "kandle-g.1d", "kandle-g.1h", "kandle-g.1m", "kandle-g.1w", "kandle-g.4h", "kandle-g.5m"}},
	} {
		top, err := topology.Parse("peers.yaml", fmt.Appendf(nil, kandleTopology, "g", "127.0.0.1:9092", 2), topology.Registry{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range top.Processors {
			p.Fuse = tc.fuse
		}
		got, err := stageGroups(top)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("fuse %v: groups %v, want %v", tc.fuse, got, tc.want)
		}
	}
}

// TestRSS checks that the process's resident memory is read (the figure
// -maxrss compares and each round prints).
func TestRSS(t *testing.T) {
	cur, err := procStatus("VmRSS")
	if err != nil {
		t.Fatal(err)
	}
	if cur <= 0 {
		t.Fatalf("VmRSS %d bytes", cur)
	}
}
