package processors

import (
	"hash/maphash"
	"iter"
)

// keyTable maps a key's raw bytes to its state without building a string,
// so a trade of a known key costs one hash and one compare. It is an
// open-addressing table (linear probing, backward-shift deletion) hashed
// with a per-table random seed, so chosen keys cannot force collisions.
type keyTable struct {
	seed  maphash.Seed
	slots []keySlot // len is a power of two, at most half full
	n     int
}

type keySlot struct {
	h uint64
	k *keyState // nil: empty
}

func newKeyTable() keyTable {
	return keyTable{seed: maphash.MakeSeed(), slots: make([]keySlot, 64)}
}

func (t *keyTable) len() int { return t.n }

// all yields every key's state, in no particular order.
func (t *keyTable) all() iter.Seq[*keyState] {
	return func(yield func(*keyState) bool) {
		for _, s := range t.slots {
			if s.k != nil && !yield(s.k) {
				return
			}
		}
	}
}

// get returns the state of the key spelled b, or nil.
func (t *keyTable) get(b []byte) *keyState {
	h := maphash.Bytes(t.seed, b)
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.k == nil {
			return nil
		}
		if s.h == h && s.k.key == string(b) {
			return s.k
		}
	}
}

// getString is get for a string key.
func (t *keyTable) getString(key string) *keyState {
	h := maphash.String(t.seed, key)
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.k == nil {
			return nil
		}
		if s.h == h && s.k.key == key {
			return s.k
		}
	}
}

// put stores k under k.key, replacing the state the key had.
func (t *keyTable) put(k *keyState) {
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
	}
	h := maphash.String(t.seed, k.key)
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.k == nil {
			*s = keySlot{h, k}
			t.n++
			return
		}
		if s.h == h && s.k.key == k.key {
			s.k = k
			return
		}
	}
}

func (t *keyTable) grow() {
	old := t.slots
	t.slots = make([]keySlot, 2*len(old))
	mask := uint64(len(t.slots) - 1)
	for _, s := range old {
		if s.k == nil {
			continue
		}
		i := s.h & mask
		for t.slots[i].k != nil {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}

// del removes key. Later entries of its probe run shift back into the hole,
// so lookups never need tombstones.
func (t *keyTable) del(key string) {
	h := maphash.String(t.seed, key)
	mask := uint64(len(t.slots) - 1)
	i := h & mask
	for {
		s := &t.slots[i]
		if s.k == nil {
			return
		}
		if s.h == h && s.k.key == key {
			break
		}
		i = (i + 1) & mask
	}
	t.n--
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		s := t.slots[j]
		if s.k == nil {
			break
		}
		// s may move into the hole at i unless its home lies cyclically in (i, j].
		if home := s.h & mask; (j-home)&mask >= (j-i)&mask {
			t.slots[i] = s
			i = j
		}
	}
	t.slots[i] = keySlot{}
}
