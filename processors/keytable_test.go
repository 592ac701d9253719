package processors

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestKeyTableMatchesMap runs random puts, gets and deletes against a Go map.
func TestKeyTableMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	tab := newKeyTable()
	ref := map[string]*keyState{}
	for i := range 200000 {
		key := fmt.Sprintf("K%d", rng.IntN(3000))
		switch rng.IntN(3) {
		case 0:
			k := &keyState{key: key}
			tab.put(k)
			ref[key] = k
		case 1:
			tab.del(key)
			delete(ref, key)
		}
		if got, want := tab.get([]byte(key)), ref[key]; got != want {
			t.Fatalf("step %d: get(%q) = %p, want %p", i, key, got, want)
		}
		if got, want := tab.getString(key), ref[key]; got != want {
			t.Fatalf("step %d: getString(%q) = %p, want %p", i, key, got, want)
		}
		if tab.len() != len(ref) {
			t.Fatalf("step %d: len %d, want %d", i, tab.len(), len(ref))
		}
	}
	for key, k := range ref {
		if tab.get([]byte(key)) != k {
			t.Fatalf("final: %q lost", key)
		}
	}
}
