package engine

import (
	"testing"

	"github.com/kandle/kandle/topology"
)

// TestBuiltinKindsBuild: the engine builds every built-in topology kind,
// and no other.
func TestBuiltinKindsBuild(t *testing.T) {
	b := builtinKinds()
	for _, k := range topology.ProcessorKinds() {
		if b[k.Name] == nil {
			t.Errorf("built-in kind %s has no builder", k.Name)
		}
	}
	if len(b) != len(topology.ProcessorKinds()) {
		t.Errorf("%d builders for %d built-in kinds", len(b), len(topology.ProcessorKinds()))
	}
}
