// Package state keeps kandle's keyed processor state in a local Pebble
// store.
//
// Each (stage, partition) owns a key range holding the processor's entries
// (open windows, previous closes, dedupe ids, the partition watermark) and a
// small meta record: the changelog offset the entries reflect and the input
// offset they were computed up to. Both are written in one atomic Pebble
// batch, so a restart never sees state from one point and offsets from
// another.
//
// The store is a cache of the stage's Kafka changelog, which is the source of
// truth (it commits in the same transaction as the outputs and the input
// offsets). The engine writes Pebble only after a transaction commits, so the
// store can be behind the changelog (a crash between commit and batch) but
// never ahead; restore reads the changelog tail past Meta.ChangelogOffset.
// With the build tag invariants (package invariant), SetMeta checks that a
// partition's changelog position only grows unless the same batch drops it.
package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kandle/kandle/internal/invariant"
)

// Store is a Pebble database holding the state of every stage and partition
// of one kandle instance.
type Store struct {
	db *pebble.DB
}

// Open opens (creating if needed) the store in dir; dir "" keeps it in memory.
// The directory and every file in it are private to the user (0700, 0600).
func Open(dir string, log *slog.Logger) (*Store, error) {
	opts := &pebble.Options{Logger: pebbleLogger{log}}
	if dir == "" {
		opts.FS = vfs.NewMem()
	} else {
		if err := privateDir(dir); err != nil {
			return nil, err
		}
		opts.FS = privateFS{vfs.Default}
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("open state store %q: %w (is another kandle using this -state-dir?)", dir, err)
	}
	return &Store{db: db}, nil
}

// Close closes the store.
func (s *Store) Close() error { return s.db.Close() }

// Meta says which point of the input and changelog a partition's entries reflect.
type Meta struct {
	ChangelogOffset int64 // next changelog offset to read on restore
	InputOffset     int64 // next input offset to process
}

const (
	kindEntry = 'e'
	kindMeta  = 'm'
)

func prefix(stage string, partition int32, kind byte) []byte {
	b := make([]byte, 0, len(stage)+7)
	b = append(b, stage...)
	b = append(b, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(partition))
	return append(b, kind)
}

// Load calls fn for every entry of (stage, partition) and returns its meta
// (ok=false when the partition has no state here yet); fn nil reads only
// the meta.
func (s *Store) Load(stage string, partition int32, fn func(key, val []byte) error) (Meta, bool, error) {
	var m Meta
	found := false
	v, closer, err := s.db.Get(prefix(stage, partition, kindMeta))
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return m, false, fmt.Errorf("read state meta of %s/%d: %w", stage, partition, err)
	default:
		found = true
		if len(v) == 16 {
			m.ChangelogOffset = int64(binary.BigEndian.Uint64(v))
			m.InputOffset = int64(binary.BigEndian.Uint64(v[8:]))
		}
		closer.Close()
	}
	if fn == nil {
		return m, found, nil
	}
	p := prefix(stage, partition, kindEntry)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: upper(p)})
	if err != nil {
		return m, false, err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		if err := fn(it.Key()[len(p):], it.Value()); err != nil {
			return m, false, err
		}
	}
	return m, found, it.Error()
}

// Get returns a copy of the entry key of (stage, partition) (ok false: absent).
func (s *Store) Get(stage string, partition int32, key []byte) ([]byte, bool, error) {
	v, closer, err := s.db.Get(append(prefix(stage, partition, kindEntry), key...))
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("read state of %s/%d: %w", stage, partition, err)
	}
	defer closer.Close()
	return append([]byte(nil), v...), true, nil
}

// Scan calls fn with the entries of (stage, partition) whose keys are in
// [from, to) (to nil: to the end), in key order, until fn returns false.
// key and val are valid only during the call.
func (s *Store) Scan(stage string, partition int32, from, to []byte, fn func(key, val []byte) bool) error {
	p := prefix(stage, partition, kindEntry)
	hi := upper(p)
	if to != nil {
		hi = append(p[:len(p):len(p)], to...)
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: append(p[:len(p):len(p)], from...), UpperBound: hi})
	if err != nil {
		return fmt.Errorf("scan state of %s/%d: %w", stage, partition, err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		if !fn(it.Key()[len(p):], it.Value()) {
			break
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("scan state of %s/%d: %w", stage, partition, err)
	}
	return nil
}

func upper(p []byte) []byte {
	u := append([]byte(nil), p...)
	u[len(u)-1]++
	return u
}

// Batch collects entry changes of several partitions to apply atomically.
type Batch struct {
	b *pebble.Batch
	s *Store
	// dropped lists the partitions ("stage\x00" + partition) and stages
	// ("stage") this batch drops: their changelog position may start over
	// (invariants build only).
	dropped map[string]bool
}

// NewBatch starts a batch.
func (s *Store) NewBatch() *Batch { return &Batch{b: s.db.NewBatch(), s: s} }

// drop records, for the invariant checks, that the batch drops name.
func (b *Batch) drop(name string) {
	if b.dropped == nil {
		b.dropped = map[string]bool{}
	}
	b.dropped[name] = true
}

// checkGrows checks (invariants build) that the changelog position of
// (stage, partition) only grows: Pebble follows the changelog, which only
// grows, unless this batch drops the partition or its stage.
func (b *Batch) checkGrows(stage string, partition int32, m Meta) {
	base, _, _ := strings.Cut(stage, "/") // a Kinesis shard's state lives under "stage/shard"
	if b.dropped[stage] || b.dropped[base] || b.dropped[string(prefix(stage, partition, kindMeta))] {
		return
	}
	old, ok, err := b.s.Load(stage, partition, nil)
	invariant.Check(err == nil, "state %s/%d: read meta: %v", stage, partition, err)
	invariant.Check(!ok || m.ChangelogOffset >= old.ChangelogOffset,
		"state %s/%d: changelog position went back from %d to %d (Pebble only follows the changelog)", stage, partition, old.ChangelogOffset, m.ChangelogOffset)
}

// Set records an entry change of (stage, partition); val nil deletes the key.
func (b *Batch) Set(stage string, partition int32, key, val []byte) {
	k := append(prefix(stage, partition, kindEntry), key...)
	if val == nil {
		_ = b.b.Delete(k, nil)
		return
	}
	_ = b.b.Set(k, val, nil)
}

// SetMeta records the meta of (stage, partition) in the same batch.
func (b *Batch) SetMeta(stage string, partition int32, m Meta) {
	if invariant.Enabled {
		b.checkGrows(stage, partition, m)
	}
	v := binary.BigEndian.AppendUint64(nil, uint64(m.ChangelogOffset))
	v = binary.BigEndian.AppendUint64(v, uint64(m.InputOffset))
	_ = b.b.Set(prefix(stage, partition, kindMeta), v, nil)
}

// Drop deletes all state of (stage, partition) in the batch (a changelog
// that no longer reaches back to our offset must be read from its start).
func (b *Batch) Drop(stage string, partition int32) {
	if invariant.Enabled {
		b.drop(string(prefix(stage, partition, kindMeta)))
	}
	e := prefix(stage, partition, kindEntry)
	_ = b.b.DeleteRange(e, upper(e), nil)
	_ = b.b.Delete(prefix(stage, partition, kindMeta), nil)
}

// Commit applies the batch atomically. It does not fsync: the changelog is
// the durable copy, and a lost tail is re-read from it on restart.
func (b *Batch) Commit() error {
	defer b.b.Close()
	if err := b.b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("write state batch: %w", err)
	}
	return nil
}

// Count returns the number of entries stored for (stage, partition) (for
// tests and the bounded-state check).
func (s *Store) Count(stage string, partition int32) (int, error) {
	n := 0
	_, _, err := s.Load(stage, partition, func(_, _ []byte) error { n++; return nil })
	return n, err
}

type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	if p.l != nil {
		p.l.Debug("pebble: " + fmt.Sprintf(format, args...))
	}
}
func (p pebbleLogger) Errorf(format string, args ...any) {
	if p.l != nil {
		p.l.Error("pebble: " + fmt.Sprintf(format, args...))
	}
}
func (p pebbleLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("pebble: "+format, args...))
}
