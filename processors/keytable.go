package processors

import (
	"encoding/binary"
	"hash/maphash"
	"iter"
)

// table maps a key's raw bytes to a value without building a string, so a
// record of a known key costs one hash and one compare. It is an
// open-addressing table (linear probing, backward-shift deletion) hashed
// with a per-table random seed, so chosen keys cannot force collisions.
// The aggregator keeps its key states in one, the decoder its interned keys.
type table[V any] struct {
	seed  maphash.Seed
	slots []slot[V] // len is a power of two, at most half full
	n     int
}

type slot[V any] struct {
	h      uint64
	w0, w1 uint64 // the key's first 16 bytes (zero-padded): most keys compare without reading key's bytes
	key    string
	v      V
	used   bool
}

// keyWords returns the first 16 bytes of b, zero-padded, as two words. When
// b's capacity allows it reads them with two loads and masks off the bytes
// past len(b).
func keyWords(b []byte) (w0, w1 uint64) {
	n := len(b)
	if cap(b) >= 16 {
		b16 := b[:16:16]
		w0, w1 = binary.LittleEndian.Uint64(b16), binary.LittleEndian.Uint64(b16[8:])
	} else {
		var buf [16]byte
		copy(buf[:], b)
		w0, w1 = binary.LittleEndian.Uint64(buf[:]), binary.LittleEndian.Uint64(buf[8:])
	}
	switch {
	case n < 8:
		return w0 & (1<<(8*uint(n)) - 1), 0
	case n < 16:
		return w0, w1 & (1<<(8*uint(n-8)) - 1)
	}
	return w0, w1
}

// keyWordsString is keyWords for a string.
func keyWordsString(key string) (w0, w1 uint64) {
	var buf [16]byte
	copy(buf[:], key)
	return binary.LittleEndian.Uint64(buf[:]), binary.LittleEndian.Uint64(buf[8:])
}

// is reports whether s holds the key spelled b, whose hash is h and whose
// first 16 bytes are w0, w1. Only keys longer than 16 bytes compare the rest.
func (s *slot[V]) is(h, w0, w1 uint64, b []byte) bool {
	return s.h == h && s.w0 == w0 && s.w1 == w1 && len(s.key) == len(b) && (len(b) <= 16 || s.key[16:] == string(b[16:]))
}

func newTable[V any]() table[V] {
	return table[V]{seed: maphash.MakeSeed(), slots: make([]slot[V], 64)}
}

func (t *table[V]) len() int { return t.n }

// lookup returns the slot of the key spelled b, or nil.
func (t *table[V]) lookup(b []byte) *slot[V] {
	h := maphash.Bytes(t.seed, b)
	w0, w1 := keyWords(b)
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if !s.used {
			return nil
		}
		if s.is(h, w0, w1, b) {
			return s
		}
	}
}

// get returns the value of the key spelled b.
func (t *table[V]) get(b []byte) (v V, ok bool) {
	if s := t.lookup(b); s != nil {
		return s.v, true
	}
	return v, false
}

// getString is get for a string key.
func (t *table[V]) getString(key string) (v V, ok bool) {
	h := maphash.String(t.seed, key)
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if !s.used {
			return v, false
		}
		if s.h == h && s.key == key {
			return s.v, true
		}
	}
}

// put stores v under key, replacing the value the key had.
func (t *table[V]) put(key string, v V) {
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
	}
	h := maphash.String(t.seed, key)
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if !s.used {
			w0, w1 := keyWordsString(key)
			*s = slot[V]{h, w0, w1, key, v, true}
			t.n++
			return
		}
		if s.h == h && s.key == key {
			s.v = v
			return
		}
	}
}

func (t *table[V]) grow() {
	old := t.slots
	t.slots = make([]slot[V], 2*len(old))
	mask := uint64(len(t.slots) - 1)
	for _, s := range old {
		if !s.used {
			continue
		}
		i := s.h & mask
		for t.slots[i].used {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}

// del removes key. Later entries of its probe run shift back into the hole,
// so lookups never need tombstones.
func (t *table[V]) del(key string) {
	h := maphash.String(t.seed, key)
	mask := uint64(len(t.slots) - 1)
	i := h & mask
	for {
		s := &t.slots[i]
		if !s.used {
			return
		}
		if s.h == h && s.key == key {
			break
		}
		i = (i + 1) & mask
	}
	t.n--
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		s := t.slots[j]
		if !s.used {
			break
		}
		// s may move into the hole at i unless its home lies cyclically in (i, j].
		if home := s.h & mask; (j-home)&mask >= (j-i)&mask {
			t.slots[i] = s
			i = j
		}
	}
	t.slots[i] = slot[V]{}
}

// clear removes every key, keeping the memory.
func (t *table[V]) clear() {
	clear(t.slots)
	t.n = 0
}

// all yields every value, in no particular order.
func (t *table[V]) all() iter.Seq[V] {
	return func(yield func(V) bool) {
		for _, s := range t.slots {
			if s.used && !yield(s.v) {
				return
			}
		}
	}
}
