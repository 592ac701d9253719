package engine

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/internal/invariant"
	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/state"
)

// A unit is one exactly-once piece of work: the processor of one Kafka
// input partition or of one Kinesis shard, with its committed state. This
// file holds what a unit is whatever its source — its changelog key
// layout, its progress record, its restore (Pebble, then the changelog
// from a snapshot or Pebble's position up to a barrier), its running state
// (unit), the emission of its output and its commit (unitTxn.commit: the
// changelog, snapshots, the end of the transaction, Pebble); the drivers
// (stage.go for Kafka partitions, kinesis.go for Kinesis shards) bring
// assignment or leases, fetching, opening the transaction and committing
// the source position (positionCommitter).

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
	// changelog is the unit's changelog topic when it is not the driver's
	// (a processor fused into the driver's stage, fuse.go).
	changelog string
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
	// What was read, for errors about the state: local state (Pebble) or
	// not, the changelog from offset from to the barrier, and whether from
	// is a snapshot's marker.
	local, fromSnap bool
	from, barrier   int64
}

// source says where st was read from, for errors about the state.
func (st *unitState) source() string {
	switch {
	case st.local:
		return fmt.Sprintf("local state, then the changelog from offset %d to the restore barrier at %d", st.from, st.barrier)
	case st.fromSnap:
		return fmt.Sprintf("the changelog from the snapshot at offset %d to the restore barrier at %d", st.from, st.barrier)
	}
	return fmt.Sprintf("the changelog from its start (offset %d) to the restore barrier at %d", st.from, st.barrier)
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
	if !inMemory {
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
	if u.seqInPebble {
		v, has := entries[pebbleProgressKey]
		delete(entries, pebbleProgressKey)
		if !inMemory {
			if v, has, err = e.store.Get(u.ns, u.part, []byte(pebbleProgressKey)); err != nil {
				return st, err
			}
		}
		if has {
			st.progress, _ = decodeUnitProgress(v)
		}
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
	st.local, st.fromSnap, st.from, st.barrier = ok, !ok && hasSnap, from, barrier
	if from <= barrier {
		err = io.read(ctx, from, barrier, apply)
		if errors.Is(err, errNotSnapshot) {
			io.log.Warn("the committed snapshot is not where its position says (changelog recreated or compacted); reading the changelog from its start",
				"partition", u.part, "snapshot_offset", snap.offset)
			hasSnap, check = false, nil
			reset()
			st.found = false
			st.fromSnap, st.from = false, start
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
		produce(ctx, slab.candle(em.spec.OutputTopic, &out.Candles[i], em.spec.byWindow()))
	}
	em.spec.quietRecords(out, func(r *kgo.Record) { produce(ctx, r) })
	if n := len(out.Candles); n > 0 {
		em.candlesOnce.Do(func() {
			em.candles = em.e.m.candles.WithLabelValues(em.spec.Name, em.spec.Timeframe.String())
		})
		em.candles.Add(float64(n))
		countRevisions(em.e.m, em.spec, out.Candles)
	}
	for i := range out.Rejected {
		r := &out.Rejected[i]
		produce(ctx, deadLetter(em.e.g.deadLetterTopic(), em.spec.Name, em.input, r))
		em.e.m.rejected.WithLabelValues(em.spec.Name, string(r.Reason)).Inc()
		em.log.Debug("record rejected", "reason", r.Reason, "detail", r.Detail, "key", r.Key, "partition", r.Partition, "offset", r.Offset)
	}
}

// unit is the running state of one exactly-once unit between commits,
// whatever its source: its processor, what it emitted since the last
// commit and its snapshot bookkeeping. partState (a Kafka partition) and
// shardState (a Kinesis shard) embed it; unitTxn.commit commits it.
type unit struct {
	proc processor
	// consumed: the open transaction commits a new source position of the
	// unit (Kafka: the partition consumed input; a shard: every commit).
	// Only then does the transaction write its progress record and may it
	// hold a snapshot (the snapshot's position rides on the position's
	// commit).
	consumed bool
	// settled: a transaction committed since the restore. The first commit
	// after a restore carries a takeover's first output, which a copy of the
	// whole state would delay: it never snapshots.
	settled bool
	// snap is the unit's last committed snapshot (snapshot.go), carried with
	// every commit of its position; sinceSnap counts the changelog records a
	// restore from it reads beyond the snapshot, and liveKeys the entries of
	// the state when last counted.
	snap      snapRef
	sinceSnap int64
	liveKeys  int
	// handoff: state entries not yet committed that the unit's next commit
	// writes (a child shard's share of its parents' state, resharding).
	handoff map[string][]byte

	// What processing the unit's input emits, and the records and bytes it
	// is produced from: the unit's own, so units can be processed
	// concurrently.
	out  processors.Output
	slab outSlab
}

// snapshotDue reports whether the unit should snapshot in a commit that
// writes changes changelog records.
func (u *unit) snapshotDue(changes int) bool {
	return u.sinceSnap+int64(changes) > snapshotRatio*int64(max(u.liveKeys, snapshotFloor))
}

// start gives a processor built for the unit its restored state: entries
// go into memory (Restore), except for a processors.StoreUser, which reads
// the unit's Pebble range instead (partStore). Entries for a StoreUser are
// a handoff not yet committed: they are put in its Pebble range without a
// position, so a restore before the unit's first commit drops them and
// hands over again.
func (e *Engine) startProcessor(proc processor, ref unitRef, entries map[string][]byte) error {
	su, inStore := proc.(processors.StoreUser)
	if !inStore {
		for k, v := range entries {
			if err := proc.Restore([]byte(k), v); err != nil {
				return fmt.Errorf("restore entry %q: %w", k, err)
			}
		}
		return nil
	}
	if len(entries) > 0 {
		batch := e.store.NewBatch()
		for k, v := range entries {
			batch.Set(ref.ns, ref.part, []byte(k), v)
		}
		if err := batch.Commit(); err != nil {
			return fmt.Errorf("write handed-over state: %w", err)
		}
	}
	if err := su.UseStore(partStore{e.store, ref.ns, ref.part}); err != nil {
		return err
	}
	proc.ResetIdle() // built before the changelog read: its idle clock starts now
	return nil
}

// stateWhere says where proc's committed state lives, for logs: "pebble"
// (a processors.StoreUser) or "memory".
func stateWhere(proc processor) string {
	if inStore(proc) {
		return "pebble"
	}
	return "memory"
}

// inStore reports whether proc reads its committed state from the unit's
// Pebble range (processors.StoreUser) rather than from restored entries.
func inStore(proc processor) bool {
	_, ok := proc.(processors.StoreUser)
	return ok
}

// A positionCommitter is how a source commits the position of the units of
// a transaction: the one thing the commit path (unitTxn.commit) leaves to
// a driver.
//
// Kafka (liveStage) commits the input offsets inside the transaction: end
// ends the group session's transaction, whose TxnOffsetCommit carries each
// partition's offset and snapshot position; after does nothing. Kinesis
// (shardPosition) checkpoints the shard's sequence number in its lease
// after the transaction: end only ends the shard producer's transaction,
// after writes the checkpoint with the unit's snapshot position. The
// package doc says why a checkpoint after the commit is safe.
type positionCommitter interface {
	// end ends the open transaction with try (kgo.TryAbort when producing
	// failed) and reports whether it committed. An error means the
	// producer's state is unknown or fenced.
	end(ctx context.Context, try kgo.TransactionEndTry) (committed bool, err error)
	// after runs once the transaction committed and Pebble followed.
	after(ctx context.Context) error
	// positionInTxn reports whether the positions commit inside the
	// transaction: then a snapshot counts as committed only if end put its
	// position in (unitTxn.snapshotOf); otherwise every later after
	// carries it.
	positionInTxn() bool
}

// unitCommit is one unit's part in a commit.
type unitCommit struct {
	u        *unit
	ref      unitRef
	src      string       // the unit in errors and logs ("partition 3", "shard shardId-…")
	progress unitProgress // its progress record, written when u.consumed (or with a snapshot)
	// stage names the unit's processor in metrics when it is not the
	// driver's (a fused processor); "": the driver's.
	stage string
	// follows: a fused processor's input topic, whose partition ref.part
	// the transaction itself writes. Its progress is then the offset after
	// the last record the transaction wrote there (progress.next when it
	// wrote none), known once those records are flushed; commit sets
	// progress to it.
	follows string
}

// unitTxn is the open transaction of a driver, over one or more units (a
// Kafka stage's partitions, or one Kinesis shard), and the one commit path
// of both sources: emission, changelog records, snapshots, the end of the
// transaction and Pebble after it.
type unitTxn struct {
	e         *Engine
	spec      *stageSpec
	changelog string
	log       *slog.Logger
	em        *emitter
	// send produces a record in the transaction (the driver's
	// transactional producer); flush waits for every record sent.
	send  func(context.Context, *kgo.Record, func(*kgo.Record, error))
	flush func(context.Context) error
	// tokens names the snapshots it makes: prefix, then a count.
	tokenPrefix string
	tokens      *atomic.Int64

	promise func(*kgo.Record, error) // t.produced, made once
	slab    outSlab                  // the changelog records and bytes it produces
	// tracked are the topics besides the changelog whose last offsets
	// the transaction records in clMax: the changelogs of fused
	// processors and the topics they follow (nil: none).
	tracked map[string]bool

	mu      sync.Mutex // guards err, clMax and the snapshots' placement
	err     error      // the first failed produce
	clMax   map[topicPart]int64
	pending []pendingEntry
	clKeys  [][]byte // commit: the changelog keys of one unit's changes, as in pending
	snaps   map[*unit]*pendingSnap
}

// topicPart is a partition of a topic.
type topicPart struct {
	topic string
	part  int32
}

// clTopic is the changelog topic of the unit ref.
func (t *unitTxn) clTopic(ref *unitRef) string {
	if ref.changelog != "" {
		return ref.changelog
	}
	return t.changelog
}

// stageOf is the processor a unit commit counts its metrics under.
func (t *unitTxn) stageOf(c *unitCommit) string {
	if c.stage != "" {
		return c.stage
	}
	return t.spec.Name
}

// pendingEntry is a state change produced in the open transaction, to be
// written to Pebble once it commits.
type pendingEntry struct {
	ref      *unitRef
	key, val []byte
}

func newUnitTxn(e *Engine, spec *stageSpec, changelog string, log *slog.Logger, em *emitter, tokenPrefix string, tokens *atomic.Int64,
	send func(context.Context, *kgo.Record, func(*kgo.Record, error)), flush func(context.Context) error) *unitTxn {
	t := &unitTxn{e: e, spec: spec, changelog: changelog, log: log, em: em, send: send, flush: flush,
		tokenPrefix: tokenPrefix, tokens: tokens, clMax: map[topicPart]int64{}, snaps: map[*unit]*pendingSnap{}}
	t.promise = t.produced
	return t
}

// produce produces r in the transaction.
func (t *unitTxn) produce(ctx context.Context, r *kgo.Record) { t.send(ctx, r, t.promise) }

// produced is the promise of every record of the transaction.
func (t *unitTxn) produced(r *kgo.Record, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		if t.err == nil {
			t.err = err
		}
		return
	}
	if r.Topic != t.changelog && !t.tracked[r.Topic] {
		return
	}
	tp := topicPart{r.Topic, r.Partition}
	if cur, ok := t.clMax[tp]; !ok || r.Offset > cur {
		t.clMax[tp] = r.Offset
	}
}

// emit produces what a unit emitted (out, from slab) in the transaction.
// Safe for concurrent use, each caller with its own out and slab.
func (t *unitTxn) emit(ctx context.Context, out *processors.Output, slab *outSlab) {
	if len(out.Candles)+len(out.Events)+len(out.Rejected)+len(out.Quiet) > 0 {
		t.em.emit(ctx, out, slab, t.produce)
	}
}

// emitAs is emit through em: a fused processor's emitter (its output
// topic and metrics).
func (t *unitTxn) emitAs(ctx context.Context, em *emitter, out *processors.Output, slab *outSlab) {
	if len(out.Candles)+len(out.Events)+len(out.Rejected)+len(out.Quiet) > 0 {
		em.emit(ctx, out, slab, t.produce)
	}
}

// reset forgets what the ended transaction produced.
func (t *unitTxn) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pending, t.err = nil, nil
	t.clMax, t.snaps = map[topicPart]int64{}, map[*unit]*pendingSnap{}
}

// snapshotOf is the snapshot unit u made in the open transaction, once its
// marker's offset is known; mark records that its position goes into the
// transaction's commit of the unit's position. Called by positionCommitter.end.
func (t *unitTxn) snapshotOf(u *unit, mark bool) (snapRef, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	sn, ok := t.snaps[u]
	if !ok || !sn.placed {
		return snapRef{}, false
	}
	if mark {
		sn.written = true
	}
	return sn.ref, true
}

// commit commits the units' changes and positions (see "The exactly-once
// unit" in the package doc): for each unit it produces its state changes
// (after a snapshot of its whole state when one is due) and its progress
// record to the changelog, in the open transaction that already holds its
// emissions; then pos ends the transaction; only if it committed are the
// changes and positions written to Pebble, and then pos.after runs. It
// returns with the transaction ended (committed or aborted), reporting
// whether it committed; an error from ending it means the producer's state
// is unknown (the driver drops it).
func (t *unitTxn) commit(ctx context.Context, units []unitCommit, pos positionCommitter) (bool, error) {
	for _, c := range units {
		if err := storeFailure(c.u.proc); err != nil {
			// What it produced may be wrong: never commit it.
			return false, errors.Join(fmt.Errorf("%s: %w", c.src, err), t.abort(ctx, pos))
		}
	}
	changes := make([]int, len(units))
	progress := make([][]byte, len(units))
	for i, c := range units {
		u := c.u
		first := len(t.pending)
		t.clKeys = t.clKeys[:0]
		n := len(c.ref.keys.prefix) + 1
		add := func(k, v []byte) {
			key := c.ref.keys.entry(&t.slab, k)
			var val []byte  // nil: a deletion (a tombstone)
			if len(v) > 0 { // as cloneOrNil: an empty value is a deletion too
				val = t.slab.bytes(nil, v)
			}
			t.pending = append(t.pending, pendingEntry{&units[i].ref, key[n:], val})
			t.clKeys = append(t.clKeys, key)
		}
		for k, v := range u.handoff { // a handoff is persisted with the unit's first commit
			add([]byte(k), v)
		}
		u.proc.Changes(add)
		changed := t.pending[first:]
		changes[i] = len(changed)
		snap := u.consumed && u.settled && u.snapshotDue(len(changed))
		if snap {
			// The snapshot goes first: the changes of this transaction follow it.
			if err := t.snapshot(ctx, c, changed); err != nil {
				return false, errors.Join(err, t.abort(ctx, pos))
			}
		}
		cl := t.clTopic(&c.ref)
		for j, pe := range changed {
			r := t.slab.record()
			r.Topic, r.Partition, r.Key, r.Value = cl, c.ref.clPart, t.clKeys[j], pe.val
			t.produce(ctx, r)
		}
		if (u.consumed || snap) && c.follows == "" {
			progress[i] = c.progress.encode()
			t.produce(ctx, &kgo.Record{Topic: cl, Partition: c.ref.clPart, Key: c.ref.keys.progress(), Value: progress[i]})
		}
	}
	if err := t.followProgress(ctx, units, progress); err != nil {
		return false, errors.Join(err, t.abort(ctx, pos))
	}
	inputs := takeRevisionInputs(units)
	committed, err := t.end(ctx, kgo.TryCommit, pos)
	t.mu.Lock()
	pending, clMax, snaps := t.pending, t.clMax, t.snaps
	t.mu.Unlock()
	t.reset()
	if err != nil || !committed {
		return false, err
	}
	invariant.Check(err == nil && committed, "stage %s: Pebble written after a transaction that did not commit (it would be ahead of the changelog)", t.spec.Name)
	inputs.count(t.e.m, t, units)
	batch := t.e.store.NewBatch()
	for _, pe := range pending {
		batch.Set(pe.ref.ns, pe.ref.part, pe.key, pe.val)
	}
	for i, c := range units {
		u := c.u
		u.consumed, u.settled, u.handoff = false, true, nil
		u.sinceSnap += int64(changes[i])
		if sn, ok := snaps[u]; ok && sn.placed {
			t.e.m.snapshots.WithLabelValues(t.stageOf(&c)).Inc()
			t.e.m.snapshotRecords.WithLabelValues(t.stageOf(&c)).Add(float64(sn.records))
			u.liveKeys = sn.keys
			recorded := sn.written || !pos.positionInTxn()
			t.log.Debug("snapshot committed", "unit", c.src, "keys", sn.keys, "records", sn.records, "offset", sn.ref.offset, "recorded", recorded)
			if recorded {
				// Committed with its position (or carried by every later
				// checkpoint): a restore reads from it.
				u.snap, u.sinceSnap = sn.ref, int64(changes[i])
			}
		}
		if progress[i] != nil && c.ref.seqInPebble {
			batch.Set(c.ref.ns, c.ref.part, []byte(pebbleProgressKey), progress[i])
		}
		if off, ok := clMax[topicPart{t.clTopic(&c.ref), c.ref.clPart}]; ok {
			batch.SetMeta(c.ref.ns, c.ref.part, state.Meta{ChangelogOffset: off + 1, InputOffset: c.progress.next})
		}
	}
	if err := batch.Commit(); err != nil {
		return true, err
	}
	return true, pos.after(ctx)
}

// followProgress produces the progress records of the units that follow a
// topic the transaction writes (fused processors, unitCommit.follows):
// once every record sent so far is flushed, the last offset written to the
// followed partition is known, and the unit's position is the offset after
// it. progress[i] gets each record written.
func (t *unitTxn) followProgress(ctx context.Context, units []unitCommit, progress [][]byte) error {
	if !slices.ContainsFunc(units, func(c unitCommit) bool { return c.follows != "" }) {
		return nil
	}
	fctx, cancel := t.e.endContext(ctx)
	err := t.flush(fctx)
	cancel()
	t.mu.Lock()
	err = cmp.Or(err, t.err)
	write := make([]bool, len(units))
	for i := range units {
		c := &units[i]
		if c.follows == "" {
			continue
		}
		moved := false
		if off, ok := t.clMax[topicPart{c.follows, c.ref.part}]; ok && off+1 > c.progress.next {
			c.progress.next, moved = off+1, true
		}
		_, snapped := t.snaps[c.u]
		write[i] = c.u.consumed || snapped || moved // a position that moved is written, even in a transaction without input (idle advance)
	}
	t.mu.Unlock()
	if err != nil {
		return fmt.Errorf("flush before the progress of fused processors: %w", err)
	}
	for i := range units {
		if c := &units[i]; write[i] {
			progress[i] = c.progress.encode()
			t.produce(ctx, &kgo.Record{Topic: t.clTopic(&c.ref), Partition: c.ref.clPart, Key: c.ref.keys.progress(), Value: progress[i]})
		}
	}
	return nil
}

// end ends the transaction with try through pos, aborting instead when a
// record could not be written, and counts it. It is bounded by
// Engine.endContext.
func (t *unitTxn) end(ctx context.Context, try kgo.TransactionEndTry, pos positionCommitter) (bool, error) {
	start := time.Now()
	endCtx, cancel := t.e.endContext(ctx)
	defer cancel()
	if try == kgo.TryCommit {
		if err := t.flush(endCtx); err != nil {
			try = kgo.TryAbort
		}
	}
	t.mu.Lock()
	perr := t.err
	t.mu.Unlock()
	if perr != nil && try == kgo.TryCommit {
		t.log.Warn("produce failed; aborting transaction", "err", perr)
		try = kgo.TryAbort
	}
	committed, err := pos.end(endCtx, try)
	t.e.m.commitSecs.WithLabelValues(t.spec.Name).Observe(time.Since(start).Seconds())
	if err == nil && committed {
		t.e.m.transactions.WithLabelValues(t.spec.Name, "committed").Inc()
		return true, nil
	}
	t.e.m.transactions.WithLabelValues(t.spec.Name, "aborted").Inc()
	return false, err
}

// abort aborts the open transaction through pos.
func (t *unitTxn) abort(ctx context.Context, pos positionCommitter) error {
	_, err := t.end(ctx, kgo.TryAbort, pos)
	t.reset()
	return err
}

// snapshot produces, for unit c, a marker and every committed entry whose
// key changes holds not (the changes follow it on the changelog). The
// committed entries are Pebble's: commit writes every change there after
// its transaction, and restore writes every entry it read, so the unit's
// Pebble range is its state at the last commit.
func (t *unitTxn) snapshot(ctx context.Context, c unitCommit, changes []pendingEntry) error {
	changed := make(map[string]bool, len(changes)) // key → live after the changes
	keys := 0
	for _, pe := range changes {
		changed[string(pe.key)] = pe.val != nil
	}
	skip := make(map[string]bool, len(changed))
	for k, live := range changed {
		skip[k] = true
		if live {
			keys++
		}
	}
	ps := &pendingSnap{ref: snapRef{offset: -1, token: t.tokenPrefix + "." + strconv.FormatInt(t.tokens.Add(1), 10)}}
	t.mu.Lock()
	t.snaps[c.u] = ps
	t.mu.Unlock()
	cl := t.clTopic(&c.ref)
	t.send(ctx, &kgo.Record{Topic: cl, Partition: c.ref.clPart, Key: c.ref.keys.marker(), Value: []byte(ps.ref.token)}, func(r *kgo.Record, err error) {
		t.produced(r, err)
		if err == nil {
			t.mu.Lock()
			defer t.mu.Unlock()
			ps.ref.offset, ps.placed = r.Offset, true
		}
	})
	n := 1
	err := t.e.scanUnit(c.ref, skip, func(k, v []byte) {
		r := t.slab.record()
		r.Topic, r.Partition, r.Key, r.Value = cl, c.ref.clPart, c.ref.keys.entry(&t.slab, k), t.slab.bytes(nil, v)
		t.produce(ctx, r)
		keys++
		n++
	})
	if err != nil {
		return fmt.Errorf("snapshot %s: read state: %w", c.src, err)
	}
	ps.keys, ps.records = keys, n
	return nil
}
