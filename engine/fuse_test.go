package engine_test

import (
	"os"
	"testing"

	"github.com/kandle/kandle/topology"
)

// fuseModes are the modes tests of rollup chains run in: fused (the
// default: a rollup reading its upstream's output with the same key and
// partition count runs in its upstream's transaction) and unfused (fuse:
// false on every processor: every rollup is a stage of its own reading its
// input topic). KANDLE_TEST_FUSE=on or off runs only that one.
func fuseModes() []string {
	switch os.Getenv("KANDLE_TEST_FUSE") {
	case "on":
		return []string{"fused"}
	case "off":
		return []string{"unfused"}
	}
	return []string{"fused", "unfused"}
}

// setFuse applies mode to every processor of top.
func setFuse(top *topology.Topology, mode string) {
	for _, p := range top.Processors {
		p.Fuse = mode != "unfused"
	}
}

// eachFuseMode runs fn as a subtest in every mode of fuseModes.
func eachFuseMode(t *testing.T, fn func(t *testing.T, mode string)) {
	for _, mode := range fuseModes() {
		t.Run(mode, func(t *testing.T) { fn(t, mode) })
	}
}
