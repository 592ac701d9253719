package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/state"
)

// A unit is one exactly-once piece of work: the processor of one Kafka
// input partition or of one Kinesis shard, with its committed state. This
// file holds what a unit is whatever its source — its changelog key
// layout, its progress record, its restore (Pebble, then the changelog
// from a snapshot or Pebble's position up to a barrier) and the emission
// of its output; the drivers (stage.go for Kafka partitions, kinesis.go for
// Kinesis shards) bring assignment or leases, fetching and the commit of
// the source position.

// unitKeys is the changelog key layout of one unit: every record of the
// unit is its prefix followed by the record kind — 'p' and the processor's
// entry key for a state entry (a nil value deletes it), 'o' for its
// progress (unitProgress). A Kafka partition's prefix is empty (it has
// the changelog partition of its input partition to itself); a Kinesis
// shard's is "s", its shard id and a 0 byte (shards share changelog
// partitions). Restore barriers ("b") and snapshot markers ("s") belong to
// the changelog partition, not to a unit.
type unitKeys struct{ prefix []byte }

// Changelog record keys of a unit (after its prefix) and of a changelog
// partition.
var (
	keyOffset  = []byte("o")
	keyBarrier = []byte("b")
	keyPrefix  = []byte("p")
)

// entry returns the changelog key of entry k, from slab.
func (u unitKeys) entry(slab *outSlab, k []byte) []byte {
	if len(u.prefix) == 0 {
		return slab.bytes(keyPrefix, k)
	}
	return append(append(append(make([]byte, 0, len(u.prefix)+1+len(k)), u.prefix...), 'p'), k...)
}

// marker returns the changelog key of the unit's snapshot markers.
func (u unitKeys) marker() []byte {
	return append(append([]byte(nil), u.prefix...), keySnapshot...)
}

// progress returns the changelog key of the unit's progress record.
func (u unitKeys) progress() []byte {
	return append(append([]byte(nil), u.prefix...), keyOffset...)
}

// parse splits a changelog key into the unit record kind ('p' with the
// entry key, or 'o') and reports whether it is one of this unit's.
func (u unitKeys) parse(key []byte) (kind byte, entry []byte, ok bool) {
	if len(key) <= len(u.prefix) || string(key[:len(u.prefix)]) != string(u.prefix) {
		return 0, nil, false
	}
	rest := key[len(u.prefix):]
	switch {
	case len(rest) > 1 && rest[0] == 'p':
		return 'p', rest[1:], true
	case len(rest) == 1 && rest[0] == 'o':
		return 'o', nil, true
	}
	return 0, nil, false
}

// unitProgress is a unit's progress record: where its source resumes and
// its watermark, committed with its state. next is the next input offset
// of a Kafka partition, or the number of records a Kinesis shard has
// processed (its ordinal, the "offset" of its dead letters); seq is the
// last processed sequence number of a shard (empty for Kafka). Value
// layout: next (8 bytes big endian), watermark (8), has-watermark (1),
// seq; records from before watermarks hold next only.
type unitProgress struct {
	next  int64
	wm    int64
	hasWM bool
	seq   string
}

func (p unitProgress) encode() []byte {
	v := binary.BigEndian.AppendUint64(nil, uint64(p.next))
	v = binary.BigEndian.AppendUint64(v, uint64(p.wm))
	if p.hasWM {
		v = append(v, 1)
	} else {
		v = append(v, 0)
	}
	return append(v, p.seq...)
}

func decodeUnitProgress(v []byte) (unitProgress, bool) {
	if len(v) < 8 {
		return unitProgress{}, false
	}
	p := unitProgress{next: int64(binary.BigEndian.Uint64(v))}
	if len(v) >= 17 {
		p.wm, p.hasWM, p.seq = int64(binary.BigEndian.Uint64(v[8:])), v[16] == 1, string(v[17:])
	}
	return p, true
}

// progressOf is the progress of a unit whose processor is proc.
func progressOf(proc processor, next int64, seq string) unitProgress {
	p := unitProgress{next: next, seq: seq}
	p.wm, p.hasWM = watermarkOf(proc)
	return p
}

// unitRef names where a unit's state lives: its Pebble range (namespace
// and partition) and its changelog partition and keys.
type unitRef struct {
	ns     string
	part   int32 // Pebble partition: the input partition (Kafka), 0 (a shard)
	clPart int32 // changelog partition
	keys   unitKeys
	// seqInPebble: the progress is kept in Pebble as the entry
	// pebbleProgressKey too (a shard's sequence number does not fit
	// state.Meta).
	seqInPebble bool
}

// pebbleProgressKey stores a shard's progress among its Pebble entries
// (processor entry keys never start with '~').
const pebbleProgressKey = "~progress"

// unitIO is what restoring a unit needs from its source driver.
type unitIO struct {
	changelog string
	log       *slog.Logger
	// barrier appends a restore barrier to the unit's changelog partition
	// and returns its offset.
	barrier func(ctx context.Context) (int64, error)
	// start is the changelog partition's first offset.
	start func(ctx context.Context) (int64, error)
	// read reads the changelog partition from offset from to the barrier
	// (readChangelogTo), calling fn with every committed record.
	read func(ctx context.Context, from, barrier int64, fn func(*kgo.Record) error) error
	// snapshot is the unit's committed snapshot position, if its source
	// commits one (ok false: none known).
	snapshot func(ctx context.Context) (snapRef, bool)
}

// unitState is a unit's committed state as restore found it.
type unitState struct {
	entries  map[string][]byte // nil when restored into Pebble only (a StoreUser)
	progress unitProgress
	found    bool    // anything was committed for the unit
	records  int     // changelog records read
	mine     int     // changelog records of the unit read
	snap     snapRef // the snapshot restore read from (valid() false: none)
}

// restoreUnit rebuilds a unit's committed state (see the package doc): the
// entries Pebble holds, then the changelog from Pebble's position — or,
// with no usable local state, from the unit's last committed snapshot or
// the changelog's start — up to a barrier it appends first. Every entry
// read goes to Pebble too, with the barrier's position, so Pebble holds
// the committed state when restoreUnit returns. With inMemory false the
// entries are only written to Pebble (a processor that reads its state
// there, processors.StoreUser).
func (e *Engine) restoreUnit(ctx context.Context, u unitRef, io unitIO, inMemory bool) (unitState, error) {
	var st unitState
	entries := map[string][]byte{}
	load := func(k, v []byte) error {
		entries[string(k)] = append([]byte(nil), v...)
		return nil
	}
	if !inMemory && !u.seqInPebble {
		load = nil
	}
	meta, ok, err := e.store.Load(u.ns, u.part, load)
	if err != nil {
		return st, err
	}
	from := int64(0)
	if ok {
		from, st.progress.next = meta.ChangelogOffset, meta.InputOffset
	}
	if v, has := entries[pebbleProgressKey]; has {
		st.progress, _ = decodeUnitProgress(v)
		delete(entries, pebbleProgressKey)
	}
	// The snapshot committed with the source position: an empty disk reads
	// the changelog from it.
	var snap snapRef
	hasSnap := false
	if io.snapshot != nil {
		snap, hasSnap = io.snapshot(ctx)
	}
	// The barrier marks the end of what is decided now: everything before it
	// is committed or aborted once we can read it.
	barrier, err := io.barrier(ctx)
	if err != nil {
		return st, fmt.Errorf("write restore barrier: %w", err)
	}
	start, err := io.start(ctx)
	if err != nil {
		return st, fmt.Errorf("list changelog start offsets: %w", err)
	}
	batch := e.store.NewBatch()
	if ok && (start > from || barrier < from) {
		// Compaction or retention removed what we would need, or the changelog
		// was recreated (it is shorter than Pebble remembers): rebuild without it.
		ok = false
	}
	if hasSnap && (snap.offset < start || snap.offset >= barrier) {
		hasSnap = false // not on this changelog (recreated, or past its retention)
	}
	var check func(*kgo.Record) error
	reset := func() {
		clear(entries)
		batch.Drop(u.ns, u.part)
		st.progress, st.records, st.mine = unitProgress{}, 0, 0
	}
	if !ok {
		// No local state to build on: from the last committed snapshot
		// when there is one, else from the changelog's start.
		reset()
		from = start
		if hasSnap {
			from, check = snap.offset, checkMarker(snap, u.keys.marker())
		}
	}
	st.found = ok
	apply := func(r *kgo.Record) error {
		if check != nil {
			if err := check(r); err != nil {
				return err
			}
		}
		st.records++ // every record read counts: a restore's cost
		kind, key, mine := u.keys.parse(r.Key)
		if !mine {
			return nil
		}
		st.found = true
		st.mine++
		switch kind {
		case 'p':
			switch {
			case !inMemory:
			case r.Value == nil:
				delete(entries, string(key))
			default:
				entries[string(key)] = r.Value
			}
			batch.Set(u.ns, u.part, key, r.Value)
		case 'o':
			if p, ok := decodeUnitProgress(r.Value); ok {
				st.progress = p
				if u.seqInPebble {
					batch.Set(u.ns, u.part, []byte(pebbleProgressKey), r.Value)
				}
			}
		}
		return nil
	}
	if from <= barrier {
		err = io.read(ctx, from, barrier, apply)
		if errors.Is(err, errNotSnapshot) {
			io.log.Warn("the committed snapshot is not where its position says (changelog recreated or compacted); reading the changelog from its start",
				"partition", u.part, "snapshot_offset", snap.offset)
			hasSnap, check = false, nil
			reset()
			st.found = false
			err = io.read(ctx, start, barrier, apply)
		}
		if err != nil {
			return st, err
		}
	}
	if st.found || !u.seqInPebble {
		// A shard gets a position in Pebble only once it has committed
		// state: a meta for a shard that has none would make its next load
		// here "found" with no entries, and a child shard opened again on
		// this instance (its first open cut short by a lost lease, before
		// its first commit) would skip its parents' handoff and start
		// empty.
		batch.SetMeta(u.ns, u.part, state.Meta{ChangelogOffset: barrier + 1, InputOffset: st.progress.next})
	}
	if err := batch.Commit(); err != nil {
		return st, err
	}
	if inMemory {
		st.entries = entries
	}
	if hasSnap {
		st.snap = snap
	}
	return st, nil
}

// emitter produces what a unit's processor emitted: candles, events and
// quiet records to the stage's output topic, rejected records to the
// dead-letter topic, with their metrics. input names the unit's source in
// dead letters (the input topic, or the Kinesis stream).
type emitter struct {
	e     *Engine
	spec  *stageSpec
	input string
	log   *slog.Logger

	candlesOnce sync.Once
	candles     prometheus.Counter // resolved on first use: a stage that writes no candles has no series
}

// emit produces out in the open transaction, the records and candle bytes
// from slab. Safe for concurrent use, each caller with its own out and slab.
func (em *emitter) emit(ctx context.Context, out *processors.Output, slab *outSlab, produce func(context.Context, *kgo.Record)) {
	emitEvents(ctx, em.e.m, em.spec, out, produce)
	for i := range out.Candles {
		produce(ctx, slab.candle(em.spec.OutputTopic, &out.Candles[i]))
	}
	em.spec.quietRecords(out, func(r *kgo.Record) { produce(ctx, r) })
	if n := len(out.Candles); n > 0 {
		em.candlesOnce.Do(func() {
			em.candles = em.e.m.candles.WithLabelValues(em.spec.Name, em.spec.Timeframe.String())
		})
		em.candles.Add(float64(n))
	}
	for i := range out.Rejected {
		r := &out.Rejected[i]
		produce(ctx, deadLetter(em.e.g.deadLetterTopic(), em.spec.Name, em.input, r))
		em.e.m.rejected.WithLabelValues(em.spec.Name, string(r.Reason)).Inc()
		em.log.Debug("record rejected", "reason", r.Reason, "detail", r.Detail, "key", r.Key, "partition", r.Partition, "offset", r.Offset)
	}
}
