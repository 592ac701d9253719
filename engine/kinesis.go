package engine

import (
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/big"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/connectors/kinesis"
	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/topology"
)

// kinesisStage runs a candle processor over a Kinesis stream. A shard plays
// the role of a Kafka partition: it has its own processor and watermark.
//
// Exactly once works per shard: every shard has its own transactional Kafka
// producer (transactional id <group>.<stage>.<shard>), so a new owner of a
// shard fences the old one the moment it starts. Each GetRecords batch is
// processed and committed in one transaction holding its candles, dead
// letters, state changes and the shard position (sequence number) in the
// stage's changelog; the lease checkpoint is written after the commit and is
// only a hint — the changelog is authoritative, exactly as input offsets are
// for Kafka stages.
//
// On a split or merge a child shard starts from its parents' final state,
// keeping only the keys whose hash now falls in the child's range (keys
// must be the records' partition keys), with the parents' partition-wide
// state merged (the latest watermark, the latest silence clock). Which key
// a state entry belongs to, and how partition-wide entries merge, is the
// processor kind's (resharderOf, processors.HandOver). Replay applies the
// same handoff, so its output matches.
type kinesisStage struct {
	spec      *stageSpec
	e         *Engine
	log       *slog.Logger
	src       *topology.Source
	changelog string
	clParts   int
	kin       *awskinesis.Client
	ranges    *shardRanges

	accepted, rejectedRecords prometheus.Counter
	em                        *emitter

	mu        sync.Mutex
	shards    map[string]*shardState
	snapHints map[string]string    // shard → its lease's checkpoint metadata when taken: its last snapshot
	restoring map[string]*unitLock // shard → the lock its restores on this instance take (lockUnit)
	snapSeq   atomic.Int64         // snapshots made (tokens)
	started   time.Time            // when the stage was made: part of its snapshot tokens
}

type shardState struct {
	unit    // its processor, output and snapshot bookkeeping; handoff: its parents' keys until its first commit
	mu      sync.Mutex
	id      string
	part    int32
	cl      *kgo.Client
	lease   *kinesis.Lease
	seq     string // last processed sequence number
	ordinal int64  // records processed in this shard (the "offset" of dead letters)
	// behind: the last read of the shard did not reach its tip
	// (MillisBehindLatest > 0), or there was no read yet since Open. A
	// shard that is behind never advances by the wall clock.
	behind bool
	// tipAt: when (the engine's clock) the last read that reached the tip
	// returned. A shard whose reads stall (a slow or throttled service,
	// a starved process) knows nothing of what was put since: it advances
	// by the wall clock only while tipAt is less than idle_timeout old.
	tipAt time.Time
	// listed: whether the consumer's latest shard listing showed the shard
	// open, and its age (nil: no listing, as in unit tests).
	listed func() (bool, time.Duration)
	failed error // an idle advance could not commit nor rebuild: the next Records call gives up the shard
}

func newKinesisStage(e *Engine, spec *stageSpec, src *topology.Source) (*kinesisStage, error) {
	k := &kinesisStage{spec: spec, e: e, src: src, log: e.log.With("stage", spec.Name),
		changelog: e.g.changelogTopic(spec.Name), clParts: max(src.Partitions, 1), shards: map[string]*shardState{},
		snapHints: map[string]string{}, restoring: map[string]*unitLock{}, started: time.Now(),
		accepted:        e.m.records.WithLabelValues(spec.Name, "accepted"),
		rejectedRecords: e.m.records.WithLabelValues(spec.Name, "rejected")}
	k.em = &emitter{e: e, spec: spec, input: src.Kinesis.Stream, log: k.log}
	return k, nil
}

func (k *kinesisStage) run(ctx context.Context) error {
	kc := k.src.Kinesis
	kin, ddb, err := kinesis.NewClients(ctx, kc.Region, kc.Endpoint, kc.DynamoDB)
	if err != nil {
		return err
	}
	k.kin = kin
	k.ranges = newShardRanges(kin, kc.Stream)
	// Leases are per (stage, shard): every candle stage reading the stream
	// reads every shard, its instances sharing them. With enhanced fan-out
	// each stage of a stream read by several has its own stream consumer
	// (one subscription per consumer and shard at a time).
	// Idle advance needs a shard listing younger than idle_timeout (see
	// tickShard): list at least twice per idle_timeout.
	shardSync := kc.LeaseTTL
	if idle := k.spec.Processor.IdleTimeout; idle > 0 && (shardSync <= 0 || shardSync > idle/2) {
		shardSync = idle / 2
	}
	fanOut := kc.EnhancedFanOut
	if fanOut != "" && k.e.g.kinesisStages(k.spec.Input) > 1 {
		fanOut += "." + k.spec.Name
	}
	cons, err := kinesis.NewConsumer(kin, ddb, kinesis.ConsumerConfig{
		Stream: kc.Stream, LeaseTable: kc.LeaseTable, LeaseNamespace: k.spec.Name,
		Owner:         k.e.instance + "-" + strconv.FormatUint(rand.Uint64()%1e6, 10),
		LeaseDuration: kc.LeaseTTL, ShardSyncInterval: shardSync, PollInterval: kc.Poll, EnhancedFanOut: fanOut,
	}, k, kinesis.WithLogger(k.log))
	if err != nil {
		return fmt.Errorf("stage %s: kinesis consumer: %w", k.spec.Name, err)
	}
	var wg sync.WaitGroup
	if k.spec.Processor.IdleTimeout > 0 {
		tctx, cancel := context.WithCancel(ctx)
		defer func() { cancel(); wg.Wait() }()
		wg.Add(1)
		go func() { defer wg.Done(); k.tickLoop(tctx) }()
	}
	err = cons.Run(ctx)
	k.mu.Lock()
	for _, sh := range k.shards {
		sh.cl.Close()
	}
	clear(k.shards)
	k.mu.Unlock()
	return err
}

// tickLoop advances quiet shards' watermarks by the wall clock (live only).
func (k *kinesisStage) tickLoop(ctx context.Context) {
	t := time.NewTicker(k.e.commitInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		k.e.health.beat(k.spec.Name, true) // shard leases restore as they are taken
		k.mu.Lock()
		shards := make([]*shardState, 0, len(k.shards))
		for _, sh := range k.shards {
			shards = append(shards, sh)
		}
		k.mu.Unlock()
		for _, sh := range shards {
			if err := k.e.recovered(k.spec.Name, func() error { k.tickShard(ctx, sh); return nil }); err != nil {
				sh.mu.Lock()    // tickShard's deferred unlock ran
				sh.failed = err // the next Records call gives the shard up
				sh.mu.Unlock()
			}
		}
	}
}

// tickShard advances a quiet shard's watermark by the wall clock when it is
// caught up (the processor measures idle_timeout from its last record or
// restore, whichever is later); a shard that is behind restarts its idle
// clock. If the idle advance's transaction fails, it is reported and the
// shard's state is rebuilt from its last commit, so the next tick makes the
// same candles again: they are retried, never lost.
func (k *kinesisStage) tickShard(ctx context.Context, sh *shardState) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.cl == nil || sh.failed != nil {
		return
	}
	if sh.behind {
		sh.proc.ResetIdle()
		return
	}
	idle := k.spec.Processor.IdleTimeout
	if k.e.clock.Now().Sub(sh.tipAt) >= idle {
		// The last read at the tip is too old to vouch for the shard
		// being idle since (an advance to now - idle_timeout could pass
		// records put meanwhile and make them late): wait for a new one.
		return
	}
	if sh.listed != nil {
		// A shard closed by a split or merge is quiet because its keys
		// moved to its children, not because its market is: advancing
		// it would close windows whose trades the children hold (and
		// hand them its wall-clock watermark). It idle-advances only
		// while a listing less than idle_timeout old shows it open.
		if open, age := sh.listed(); !open || age >= idle {
			return
		}
	}
	sh.out.Reset()
	sh.proc.Tick(&sh.out)
	if len(sh.out.Candles)+len(sh.out.Events)+len(sh.out.Quiet) == 0 {
		return
	}
	k.log.Debug("idle advance", "shard", sh.id, "candles", len(sh.out.Candles))
	cerr := k.commit(ctx, sh, sh.seq, nil) // the position does not move: no checkpoint
	if cerr == nil || ctx.Err() != nil {
		return
	}
	k.e.m.idleErrors.WithLabelValues(k.spec.Name, "commit").Inc()
	k.log.Warn("idle advance could not commit; rebuilding the shard from its last commit and retrying", "shard", sh.id, "err", cerr)
	if err := k.rebuild(ctx, sh); err != nil && ctx.Err() == nil {
		sh.failed = fmt.Errorf("shard %s: idle advance failed (%v) and its state could not be rebuilt from the changelog: %w", sh.id, cerr, err)
		k.log.Error("giving the shard up: a new owner restores it", "shard", sh.id, "err", sh.failed)
	}
}

// rebuild replaces a shard's processor with its last committed state.
func (k *kinesisStage) rebuild(ctx context.Context, sh *shardState) error {
	proc, err := k.spec.newProcessor(true, k.e.clock)
	if err != nil {
		return err
	}
	st, err := k.loadUnit(ctx, sh.cl, sh.id, !inStore(proc))
	if err != nil {
		return err
	}
	entries, pr, found := st.entries, st.progress, st.found
	sh.snap, sh.sinceSnap, sh.liveKeys, sh.settled = st.snap, int64(st.mine), len(entries), false
	if !found && sh.handoff != nil {
		entries = sh.handoff // the handed-over state was not committed yet
	}
	if err := k.e.startProcessor(proc, k.unit(sh.id), entries); err != nil {
		return err
	}
	sh.proc = proc
	if found {
		sh.seq, sh.ordinal = pr.seq, pr.next
	}
	return nil
}

// Position records whether the shard's last read reached its tip.
func (k *kinesisStage) Position(s kinesis.Shard, millisBehind int64) {
	sh := k.shard(s.ID)
	if sh == nil {
		return
	}
	sh.mu.Lock()
	sh.behind = millisBehind > 0
	if sh.behind {
		sh.proc.ResetIdle()
	} else {
		sh.tipAt = k.e.clock.Now()
	}
	sh.mu.Unlock()
}

// Open restores the shard (or hands its parents' keys over) and says where to resume.
func (k *kinesisStage) Open(ctx context.Context, s kinesis.Shard) (resume string, err error) {
	err = k.e.recovered(k.spec.Name, func() error {
		resume, err = k.open(ctx, s)
		return err
	})
	return resume, err
}

func (k *kinesisStage) open(ctx context.Context, s kinesis.Shard) (string, error) {
	sh := &shardState{id: s.ID, part: shardNumber(s.ID), lease: s.Lease, behind: true, listed: s.Listed}
	cl, err := kgo.NewClient(k.e.kafkaOpts(k.e.clientID(),
		kgo.TransactionalID(k.e.g.groupID(k.spec.Name)+"."+s.ID), kgo.TransactionTimeout(k.e.txnTimeout),
		kgo.RecordPartitioner(outputPartitioner([]string{k.changelog}, windowTopics(k.spec))), kgo.ProducerLinger(0), kgo.WithLogger(kgoLogger(k.log)))...)
	if err != nil {
		return "", err
	}
	sh.cl = cl
	opened := false
	defer func() {
		if !opened { // an error, or a panic on its way to Open's recovery
			cl.Close()
		}
	}()
	if s.Lease != nil {
		k.mu.Lock()
		k.snapHints[s.ID] = s.Lease.LastMeta()
		k.mu.Unlock()
	}
	start := time.Now()
	proc, err := k.spec.newProcessor(true, k.e.clock)
	if err != nil {
		return "", err
	}
	st, err := k.loadUnit(ctx, cl, s.ID, !inStore(proc))
	if err != nil {
		return "", fmt.Errorf("restore shard %s: %w", s.ID, err)
	}
	k.e.m.restoreSecs.WithLabelValues(k.spec.Name).Observe(time.Since(start).Seconds())
	k.e.m.restored.WithLabelValues(k.spec.Name).Add(float64(st.records))
	entries, pr, found := st.entries, st.progress, st.found
	sh.snap, sh.sinceSnap, sh.liveKeys = st.snap, int64(st.mine), len(entries)
	if !found && len(s.Parents) > 0 {
		if entries, err = k.handoff(ctx, cl, s); err != nil {
			return "", fmt.Errorf("hand shard %s its parents' keys: %w", s.ID, err)
		}
		sh.handoff = entries
	}
	if err := k.e.startProcessor(proc, k.unit(s.ID), entries); err != nil {
		return "", err
	}
	sh.proc = proc
	sh.seq, sh.ordinal = pr.seq, pr.next
	k.mu.Lock()
	k.shards[s.ID] = sh
	k.mu.Unlock()
	opened = true
	k.log.Info("shard opened", "shard", s.ID, "parents", s.Parents, "resume_after", sh.seq, "handed_over_entries", len(sh.handoff), "state", stateWhere(proc),
		"changelog_records", st.records, "from_snapshot", st.snap.valid(), "took", time.Since(start))
	return sh.seq, nil
}

func restoreProcessor(spec *stageSpec, live bool, clock processors.Clock, entries map[string][]byte) (processor, error) {
	proc, err := spec.newProcessor(live, clock)
	if err != nil {
		return nil, err
	}
	for key, v := range entries {
		if err := proc.Restore([]byte(key), v); err != nil {
			return nil, fmt.Errorf("restore entry %q: %w", key, err)
		}
	}
	return proc, nil
}

// Records processes one batch and commits it with the shard position. A
// panic gives the shard up (the consumer reopens it from its last commit).
func (k *kinesisStage) Records(ctx context.Context, s kinesis.Shard, b kinesis.Batch) error {
	return k.e.recovered(k.spec.Name, func() error { return k.records(ctx, s, b) })
}

func (k *kinesisStage) records(ctx context.Context, s kinesis.Shard, b kinesis.Batch) error {
	sh := k.shard(s.ID)
	if sh == nil {
		return fmt.Errorf("shard %s is not open", s.ID)
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.failed != nil {
		return sh.failed
	}
	sh.out.Reset()
	last := sh.seq
	for _, r := range b.Records {
		n := len(sh.out.Rejected)
		rec := processors.Record{Partition: sh.part, Offset: sh.ordinal, Key: []byte(r.PartitionKey), Value: r.Data, Timestamp: arrivalMS(r.Arrival)}
		if err := k.e.processGuarded(k.spec, sh.proc, "shard "+s.ID, sh.ordinal, rec, &sh.out); err != nil {
			// The processor's state is undefined: give the shard up; its
			// next owner (maybe this instance) restores it from its last
			// commit and reads the batch again.
			sh.failed = err
			return err
		}
		for i := n; i < len(sh.out.Rejected); i++ {
			sh.out.Rejected[i].Detail += " (kinesis shard " + s.ID + " sequence " + r.Seq + ")"
		}
		sh.ordinal++
		last = r.Seq
	}
	// Every rejection is one input record.
	k.accepted.Add(float64(len(b.Records) - len(sh.out.Rejected)))
	k.rejectedRecords.Add(float64(len(sh.out.Rejected)))
	if err := k.commit(ctx, sh, last, s.Lease); err != nil {
		return err
	}
	if w, ok := watermarkOf(sh.proc); ok {
		k.e.m.watermark.WithLabelValues(k.spec.Name, s.ID).Set(float64(w))
	}
	return nil
}

// End is called after the shard was read to its end: its final state stays
// in the changelog for the children. A child shard that ends before its
// first commit (no record reached it, nothing closed by idle advance)
// commits the keys its parents handed it now: its own children take them
// from its changelog, and would otherwise start without them. The consumer
// checkpoints SHARD_END, which lets the children start, only after End
// returns: an error leaves the shard to be opened and ended again.
func (k *kinesisStage) End(ctx context.Context, s kinesis.Shard, children []string) error {
	if sh := k.shard(s.ID); sh != nil {
		err := k.e.recovered(k.spec.Name, func() error {
			sh.mu.Lock()
			defer sh.mu.Unlock()
			switch {
			case sh.failed != nil:
				return sh.failed
			case sh.handoff == nil || sh.cl == nil:
				return nil
			}
			sh.out.Reset()
			return k.commit(ctx, sh, sh.seq, nil) // the consumer checkpoints SHARD_END after End
		})
		if err != nil {
			return fmt.Errorf("shard %s: commit the state its parents handed it: %w", s.ID, err)
		}
	}
	k.log.Info("shard ended", "shard", s.ID, "children", children)
	k.close(s.ID)
	return nil
}

// Lost drops the shard; a new owner restores it from the changelog.
func (k *kinesisStage) Lost(s kinesis.Shard) {
	k.log.Info("shard lost", "shard", s.ID)
	k.close(s.ID)
}

func (k *kinesisStage) close(id string) {
	k.mu.Lock()
	sh := k.shards[id]
	delete(k.shards, id)
	k.mu.Unlock()
	if sh != nil {
		sh.mu.Lock()
		sh.cl.Close()
		sh.cl = nil
		sh.mu.Unlock()
	}
	k.e.m.watermark.DeleteLabelValues(k.spec.Name, id)
}

func (k *kinesisStage) shard(id string) *shardState {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.shards[id]
}

// commit commits sh.out, the state changes and the position seq through
// the unit's commit path (unitTxn.commit), in a transaction of the shard's
// own producer; Pebble follows, then the lease (when given) checkpoints seq.
func (k *kinesisStage) commit(ctx context.Context, sh *shardState, seq string, lease *kinesis.Lease) error {
	cl := sh.cl
	if err := cl.BeginTransaction(); err != nil {
		return err
	}
	t := newUnitTxn(k.e, k.spec, k.changelog, k.log, k.em, k.e.instance+"."+sh.id+"."+strconv.FormatInt(k.started.UnixNano(), 10), &k.snapSeq,
		cl.Produce, cl.Flush)
	t.emit(ctx, &sh.out, &sh.slab)
	sh.consumed = true // every commit of a shard writes its position
	unit := unitCommit{u: &sh.unit, ref: k.unit(sh.id), src: "shard " + sh.id, progress: progressOf(sh.proc, sh.ordinal, seq)}
	committed, err := t.commit(ctx, []unitCommit{unit}, &shardPosition{cl: cl, u: &sh.unit, lease: lease, seq: seq})
	if !committed {
		if err == nil {
			err = errors.New("a record could not be written")
		}
		return fmt.Errorf("shard %s: transaction aborted (%w); the shard is restored from its last commit", sh.id, err)
	}
	sh.seq = seq
	if err != nil {
		return fmt.Errorf("shard %s: %w", sh.id, err)
	}
	return nil
}

// shardPosition commits a shard's position (positionCommitter): the
// transaction is the shard producer's own, and the sequence number is
// checkpointed in the shard's lease after it (never in it: see "The
// exactly-once unit" in the package doc), with the shard's snapshot
// position as the checkpoint's metadata.
type shardPosition struct {
	cl    *kgo.Client
	u     *unit
	lease *kinesis.Lease // nil: no checkpoint (idle advance: the position does not move)
	seq   string
}

func (p *shardPosition) end(ctx context.Context, try kgo.TransactionEndTry) (bool, error) {
	if err := p.cl.EndTransaction(ctx, try); err != nil {
		return false, err
	}
	return try == kgo.TryCommit, nil
}

func (p *shardPosition) after(ctx context.Context) error {
	if p.lease == nil {
		return nil
	}
	var err error
	if p.u.snap.valid() {
		err = p.lease.CheckpointMeta(ctx, p.seq, p.u.snap.metadata())
	} else {
		err = p.lease.Checkpoint(ctx, p.seq)
	}
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// positionInTxn: every checkpoint after the commit carries the shard's
// last snapshot.
func (p *shardPosition) positionInTxn() bool { return false }

// loadShard returns a shard's committed entries and position (restoreUnit),
// up to a barrier this owner commits first in a transaction of the shard's
// own producer (which also fences any previous owner's producer).
func (k *kinesisStage) loadShard(ctx context.Context, cl *kgo.Client, id string) (map[string][]byte, unitProgress, bool, error) {
	st, err := k.loadUnit(ctx, cl, id, true)
	if err != nil {
		return nil, st.progress, false, err
	}
	return st.entries, st.progress, st.found, nil
}

// loadUnit is loadShard with the whole unitState; with inMemory false the
// entries go to the shard's Pebble range only (a processors.StoreUser). An
// empty disk reads the changelog from the snapshot the shard's lease
// checkpoint names (its metadata when the lease was taken), when there is
// one.
//
// Restores of one shard on this instance run one at a time: each writes
// the shard's Pebble range up to its own barrier, and the two children of
// a split open together and both read their parent. Run together, the one
// with the earlier barrier could write last and move the parent's Pebble
// position back to before the other's barrier.
func (k *kinesisStage) loadUnit(ctx context.Context, cl *kgo.Client, id string, inMemory bool) (unitState, error) {
	defer k.lockUnit(id)()
	u := k.unit(id)
	return k.e.restoreUnit(ctx, u, unitIO{
		changelog: k.changelog, log: k.log.With("shard", id),
		barrier: func(ctx context.Context) (int64, error) {
			if err := cl.BeginTransaction(); err != nil {
				return 0, err
			}
			res := cl.ProduceSync(ctx, &kgo.Record{Topic: k.changelog, Partition: u.clPart, Key: keyBarrier, Value: []byte(k.e.instance)})
			if err := res.FirstErr(); err != nil {
				_ = cl.EndTransaction(context.WithoutCancel(ctx), kgo.TryAbort)
				return 0, err
			}
			if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
				return 0, fmt.Errorf("commit restore barrier: %w", err)
			}
			return res[0].Record.Offset, nil
		},
		start: func(ctx context.Context) (int64, error) {
			starts, err := kadm.NewClient(cl).ListStartOffsets(ctx, k.changelog)
			if err != nil {
				return 0, err
			}
			if so, ok := starts.Lookup(k.changelog, u.clPart); ok && so.Err == nil {
				return so.Offset, nil
			}
			return 0, nil
		},
		read: func(ctx context.Context, from, barrier int64, fn func(*kgo.Record) error) error {
			rc, err := kgo.NewClient(k.e.kafkaOpts(kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(),
				kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{k.changelog: {u.clPart: kgo.NewOffset().At(from)}}))...)
			if err != nil {
				return err
			}
			defer rc.Close()
			return readChangelogTo(ctx, rc, k.log, k.changelog, u.clPart, barrier, fn)
		},
		snapshot: func(context.Context) (snapRef, bool) {
			k.mu.Lock()
			defer k.mu.Unlock()
			return parseSnapMeta(k.snapHints[id])
		},
	}, inMemory)
}

// lockUnit locks the restore of shard id on this instance and returns
// the unlock.
func (k *kinesisStage) lockUnit(id string) func() {
	k.mu.Lock()
	l := k.restoring[id]
	if l == nil {
		l = &unitLock{}
		k.restoring[id] = l
	}
	l.users++
	k.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		k.mu.Lock()
		if l.users--; l.users == 0 {
			delete(k.restoring, id)
		}
		k.mu.Unlock()
	}
}

// unitLock serialises the restores of one shard (lockUnit).
type unitLock struct {
	mu    sync.Mutex
	users int // holders and waiters, guarded by kinesisStage.mu
}

// unit names where shard id's state lives: its Pebble range, and its keys
// on the changelog partition the shard id hashes to.
func (k *kinesisStage) unit(id string) unitRef {
	return unitRef{ns: k.spec.Name + "/" + id, clPart: k.clPartition(id), keys: unitKeys{prefix: shardPrefix(id)}, seqInPebble: true}
}

// handoff builds a child shard's first state from its parents' final state:
// the entries of the keys whose hash falls in the child's range and the
// parents' partition-wide entries merged, as the processor kind splits and
// merges them (resharderOf, processors.HandOver).
func (k *kinesisStage) handoff(ctx context.Context, cl *kgo.Client, s kinesis.Shard) (map[string][]byte, error) {
	r, err := resharderOf(k.spec)
	if err != nil {
		k.log.Error("a child shard cannot start: its parents' state cannot be split or merged", "shard", s.ID, "parents", s.Parents, "err", err)
		return nil, err
	}
	rng, err := k.ranges.get(ctx, s.ID)
	if err != nil {
		return nil, err
	}
	var parents []map[string][]byte
	for _, p := range s.Parents {
		entries, _, _, err := k.loadShard(ctx, cl, p)
		if err != nil {
			return nil, err
		}
		parents = append(parents, entries)
	}
	entries, conflicts, err := processors.HandOver(r, parents, rng.owns)
	if len(conflicts) > 0 {
		k.log.Warn("keys with state in several parent shards keep the first parent's: their records did not all carry them as partition key (key_check: false?)",
			"shard", s.ID, "parents", s.Parents, "keys", len(conflicts), "first", conflicts[0])
	}
	return entries, err
}

func (k *kinesisStage) clPartition(shardID string) int32 {
	h := fnv.New32a()
	h.Write([]byte(shardID))
	return int32(h.Sum32() % uint32(k.clParts))
}

func shardPrefix(id string) []byte { return append([]byte("s"+id), 0) }

// shardNumber is the numeric part of a shard id (shardId-000000000004 → 4).
func shardNumber(id string) int32 {
	i := strings.LastIndexByte(id, '-')
	n, err := strconv.ParseInt(id[i+1:], 10, 32)
	if err != nil {
		h := fnv.New32a()
		h.Write([]byte(id))
		return int32(h.Sum32() & 0x7fffffff)
	}
	return int32(n)
}

// shardRanges caches the hash key ranges of a stream's shards.
type shardRanges struct {
	kin    kinesis.KinesisAPI
	stream string
	mu     sync.Mutex
	byID   map[string]hashRange
}

type hashRange struct {
	lo, hi  *big.Int
	parents []string // the shard's parents the listing holds (older ones were trimmed)
}

func (r hashRange) owns(key string) bool {
	sum := md5.Sum([]byte(key))
	h := new(big.Int).SetBytes(sum[:])
	return h.Cmp(r.lo) >= 0 && h.Cmp(r.hi) <= 0
}

func newShardRanges(kin kinesis.KinesisAPI, stream string) *shardRanges {
	return &shardRanges{kin: kin, stream: stream, byID: map[string]hashRange{}}
}

func (s *shardRanges) get(ctx context.Context, id string) (hashRange, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.byID[id]; ok {
		return r, nil
	}
	var next *string
	for {
		in := &awskinesis.ListShardsInput{NextToken: next}
		if next == nil {
			in.StreamName = &s.stream
		}
		out, err := s.kin.ListShards(ctx, in)
		if err != nil {
			return hashRange{}, fmt.Errorf("list shards of %s: %w", s.stream, err)
		}
		for _, sh := range out.Shards {
			lo, ok1 := new(big.Int).SetString(*sh.HashKeyRange.StartingHashKey, 10)
			hi, ok2 := new(big.Int).SetString(*sh.HashKeyRange.EndingHashKey, 10)
			if ok1 && ok2 {
				r := hashRange{lo: lo, hi: hi}
				for _, p := range []*string{sh.ParentShardId, sh.AdjacentParentShardId} {
					if p != nil {
						r.parents = append(r.parents, *p)
					}
				}
				s.byID[*sh.ShardId] = r
			}
		}
		if out.NextToken == nil {
			break
		}
		next = out.NextToken
	}
	for id, r := range s.byID {
		r.parents = slices.DeleteFunc(r.parents, func(p string) bool { _, listed := s.byID[p]; return !listed })
		s.byID[id] = r
	}
	r, ok := s.byID[id]
	if !ok {
		return hashRange{}, errors.New("shard " + id + " not found in ListShards")
	}
	return r, nil
}
