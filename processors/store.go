package processors

import (
	"strings"

	"github.com/RaduBerinde/btreemap"
)

// StateStore is the committed state of one processor partition, ordered by
// key. A processor that keeps its state there (StoreUser) holds in memory
// only what changed since its last Changes; the engine implements the store
// over the partition's Pebble range, which it writes (from Changes) after
// each committed transaction, so the store never sees uncommitted state.
type StateStore interface {
	// Get returns a copy of the value of key (ok false: absent).
	Get(key []byte) (val []byte, ok bool, err error)
	// Scan calls fn with the entries from ≤ key < to in key order (to nil:
	// no upper bound) until fn returns false. key and val are valid only
	// during the call.
	Scan(from, to []byte, fn func(key, val []byte) bool) error
}

// StoreUser is a processor whose state lives in a StateStore instead of
// the Go heap. The engine calls UseStore on a fresh processor instead of
// Restore, with the store already holding the partition's committed state.
type StoreUser interface {
	UseStore(StateStore) error
	// Err reports a store read that failed; the engine must not commit
	// the transaction after one.
	Err() error
}

// memStore is a StateStore in memory, for processors without an engine
// store (replays, topology tests, unit tests): the processor applies its own
// Changes to it.
type memStore struct {
	t *btreemap.BTreeMap[string, []byte]
}

func newMemStore() *memStore {
	return &memStore{t: btreemap.New[string, []byte](32, strings.Compare)}
}

func (m *memStore) Get(key []byte) ([]byte, bool, error) {
	_, v, ok := m.t.Get(string(key))
	return v, ok, nil
}

func (m *memStore) Scan(from, to []byte, fn func(key, val []byte) bool) error {
	hi := btreemap.Max[string]()
	if to != nil {
		hi = btreemap.LT(string(to))
	}
	for k, v := range m.t.Ascend(btreemap.GE(string(from)), hi) {
		if !fn([]byte(k), v) {
			break
		}
	}
	return nil
}

func (m *memStore) set(key string, val []byte) {
	if val == nil {
		m.t.Delete(key)
		return
	}
	m.t.ReplaceOrInsert(key, val)
}
