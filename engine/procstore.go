package engine

import (
	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/state"
)

// partStore is a processor's committed state as its stage partition's
// Pebble range: processors that implement processors.StoreUser read it
// instead of holding every entry in memory. It is the same range commit
// writes after each transaction and restore rebuilds from the changelog.
type partStore struct {
	db    *state.Store
	stage string
	p     int32
}

var _ processors.StateStore = partStore{}

func (s partStore) Get(key []byte) ([]byte, bool, error) { return s.db.Get(s.stage, s.p, key) }

func (s partStore) Scan(from, to []byte, fn func(key, val []byte) bool) error {
	return s.db.Scan(s.stage, s.p, from, to, fn)
}

// storeFailure is the failed store read of a StoreUser processor, if any.
func storeFailure(p processor) error {
	if su, ok := p.(processors.StoreUser); ok {
		return su.Err()
	}
	return nil
}
