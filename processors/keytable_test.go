package processors

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestKeyTableMatchesMap runs random puts, gets and deletes against a Go map.
func TestKeyTableMatchesMap(t *testing.T) {
	t.Run("short", func(t *testing.T) {
		testKeyTable(t, func(rng *rand.Rand) string { return fmt.Sprintf("K%d", rng.IntN(3000)) })
	})
	// Keys of 0 to 40 bytes, many sharing their first 16 (the slot's
	// words), so the compare of the rest and of the length is what tells
	// them apart.
	t.Run("any length", func(t *testing.T) {
		testKeyTable(t, func(rng *rand.Rand) string {
			return "SYMBOL-LONG-PREFIX-0123456789"[:rng.IntN(30)] + fmt.Sprint(rng.IntN(100))[:rng.IntN(2)]
		})
	})
}

func testKeyTable(t *testing.T, genKey func(*rand.Rand) string) {
	rng := rand.New(rand.NewPCG(5, 6))
	tab := newTable[*keyState]()
	ref := map[string]*keyState{}
	for i := range 200000 {
		key := genKey(rng)
		switch rng.IntN(3) {
		case 0:
			k := &keyState{key: key}
			tab.put(key, k)
			ref[key] = k
		case 1:
			tab.del(key)
			delete(ref, key)
		}
		if got, _ := tab.get([]byte(key)); got != ref[key] {
			want := ref[key]
			t.Fatalf("step %d: get(%q) = %p, want %p", i, key, got, want)
		}
		// The key's bytes inside a longer record: get must ignore what follows.
		rec := append([]byte(key), "\",\"t\":1234567890123}"...)
		if got, _ := tab.get(rec[:len(key)]); got != ref[key] {
			t.Fatalf("step %d: get(%q) in a record = %p, want %p", i, key, got, ref[key])
		}
		if got, _ := tab.getString(key); got != ref[key] {
			want := ref[key]
			t.Fatalf("step %d: getString(%q) = %p, want %p", i, key, got, want)
		}
		if tab.len() != len(ref) {
			t.Fatalf("step %d: len %d, want %d", i, tab.len(), len(ref))
		}
	}
	n := 0
	for range tab.all() {
		n++
	}
	if n != len(ref) {
		t.Fatalf("all yields %d keys, want %d", n, len(ref))
	}
	tab.clear()
	if v, ok := tab.get([]byte("K1")); ok || v != nil || tab.len() != 0 {
		t.Fatal("clear left keys behind")
	}
	for key, k := range ref {
		tab.put(key, k)
	}
	for key, k := range ref {
		if got, _ := tab.get([]byte(key)); got != k {
			t.Fatalf("final: %q lost", key)
		}
	}
}
