package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/processors"
)

// liveStage runs one processor stage as a member of its consumer group,
// committing outputs, state and offsets in one transaction per interval.
type liveStage struct {
	spec      *stageSpec
	e         *Engine
	log       *slog.Logger
	changelog string
	group     string // consumer group id
	txnID     string // transactional id
	sess      *kgo.GroupTransactSession
	restoreCl *kgo.Client
	admin     *kadm.Client
	live      []LivePublisher

	inputTopicID [16]byte // for proveMembership, looked up on first use

	accepted, rejectedRecords prometheus.Counter // resolved once: the per-batch path does no label lookups

	parts map[int32]*partState // restored partitions (loop goroutine only)

	evMu     sync.Mutex     // guards what the group callbacks record
	owned    map[int32]bool // the partitions the group gave us, as the callbacks last said
	assigned []int32        // moves since the last handleEvents (for the log)
	revoked  []int32
	// regained are partitions the group assigned while we still held them,
	// or before handleEvents dropped them after a revoke (see regain):
	// their state is stale, handleEvents restores them.
	regained []int32

	idleTimeout time.Duration // the processor's idle_timeout; 0: no idle advance (or a rollup)
	lastProbe   time.Time     // when the end offsets were last asked for (idle advance)
	// groupAssigned is this member's partitions of the input as the group
	// coordinator last described them (idle advance), and when.
	groupAssigned   map[int32]bool
	groupAssignedAt time.Time

	inTxn    bool
	txnStart time.Time
	txn      *unitTxn     // the open transaction's records, changes and snapshots; its commit
	snapSeq  atomic.Int64 // snapshots made (their tokens)
	out      processors.Output

	slab  outSlab      // records and bytes of what idle advance produces
	work  []partWork   // processFetches' partitions, kept between polls
	units []unitCommit // commit: the partitions' parts, kept between commits

	chain []*fusedStage // the processors fused into this stage (fuse.go), parents first
}

type partState struct {
	unit             // consumed: processed input (or a transaction marker) since the last commit
	src       string // "partition <n>", for logs and the panic book
	nextInput int64
	touched   bool // produced live updates since the last Active pass
	// chain holds the partition's units of the fused processors, as
	// liveStage.chain lists them.
	chain []*fusedUnit

	// quietSince is the wall time (the engine's clock) since which this
	// process has received nothing for the partition and not seen it behind
	// its input; it starts at the restore. See idleAdvance.
	quietSince time.Time
}

func newLiveStage(e *Engine, spec *stageSpec) (*liveStage, error) {
	s := &liveStage{spec: spec, e: e, log: e.log.With("stage", spec.Name),
		changelog: e.g.changelogTopic(spec.Name), parts: map[int32]*partState{},
		live: e.live[spec.Name], owned: map[int32]bool{},
		accepted:        e.m.records.WithLabelValues(spec.Name, "accepted"),
		rejectedRecords: e.m.records.WithLabelValues(spec.Name, "rejected")}
	if !spec.Rollup && spec.Processor != nil {
		s.idleTimeout = spec.Processor.IdleTimeout
	}
	group := e.g.groupID(spec.Name)
	txnID := group + "." + e.instance
	s.group, s.txnID = group, txnID
	opts := []kgo.Opt{
		e.clientID(),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(spec.InputTopic),
		kgo.TransactionalID(txnID),
		kgo.TransactionTimeout(e.txnTimeout),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Control records (transaction markers) are delivered so the stage
		// knows its true position: idle advance needs position == end offset.
		kgo.KeepControlRecords(),
		kgo.RequireStableFetchOffsets(),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.RecordPartitioner(outputPartitioner(append([]string{s.changelog}, e.fusedChangelogs(spec)...), windowTopics(spec))),
		kgo.SessionTimeout(e.sessionTimeout),
		kgo.RebalanceTimeout(e.sessionTimeout + e.txnTimeout),
		kgo.ProducerLinger(0),
		kgo.WithLogger(kgoLogger(s.log)),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			s.evMu.Lock()
			s.assigned = append(s.assigned, m[spec.InputTopic]...)
			for _, p := range m[spec.InputTopic] {
				if s.owned[p] || slices.Contains(s.revoked, p) {
					// Held, or gone since the last handleEvents, which
					// has not dropped its state yet.
					s.regained = append(s.regained, p)
				}
				s.owned[p] = true
			}
			s.evMu.Unlock()
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			if h := e.dropRevokeHook; h != nil && h(spec.Name) {
				return
			}
			s.disown(m[spec.InputTopic])
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { s.disown(m[spec.InputTopic]) }),
	}
	sess, err := kgo.NewGroupTransactSession(e.kafkaOpts(append(opts, e.member()...)...)...)
	if err != nil {
		return nil, fmt.Errorf("stage %s: kafka client: %w", spec.Name, err)
	}
	rc, err := kgo.NewClient(e.kafkaOpts(kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0), kgo.WithLogger(kgoLogger(s.log)))...)
	if err != nil {
		sess.Close()
		return nil, fmt.Errorf("stage %s: kafka restore client: %w", spec.Name, err)
	}
	s.sess, s.restoreCl, s.admin = sess, rc, kadm.NewClient(rc)
	s.txn = newUnitTxn(e, spec, s.changelog, s.log, &emitter{e: e, spec: spec, input: spec.InputTopic, log: s.log},
		e.instance+"."+strconv.FormatInt(time.Now().UnixNano(), 10), &s.snapSeq, sess.Produce, sess.Client().Flush)
	s.initChain()
	return s, nil
}

// disown records partitions the group took away: from now on nothing is
// restored, processed, emitted or committed for them.
func (s *liveStage) disown(ps []int32) {
	s.evMu.Lock()
	defer s.evMu.Unlock()
	s.revoked = append(s.revoked, ps...)
	for _, p := range ps {
		delete(s.owned, p)
	}
}

// owns reports whether the group has given us partition p.
func (s *liveStage) owns(p int32) bool {
	s.evMu.Lock()
	defer s.evMu.Unlock()
	return s.owned[p]
}

// changelogPartitioner sends changelog records to the partition set on the
// record (the input partition) and everything else by key hash (murmur2,
// like Kafka's default), so output topics are partitioned by symbol.
//
// more are further changelogs (of the processors fused into a stage).
func changelogPartitioner(changelog string, more ...string) kgo.Partitioner {
	return outputPartitioner(append([]string{changelog}, more...), nil)
}

// outputPartitioner sends records of the topics in manual (changelogs) to
// the partition set on the record, and everything else by key hash
// (murmur2, like Kafka's default). On the topics in byWindow (the output
// topics of stages with a revision horizon) a candle's key is
// symbol@open_time (appendWindowKey) and only its symbol is hashed, so a
// window key lands on the partition its bare symbol would: the partition
// of the symbol's other windows, of its quiet records (keyed by the bare
// symbol, told apart by their header) and of its trades, which fused
// rollups rely on.
func outputPartitioner(manual, byWindow []string) kgo.Partitioner {
	byKey := kgo.StickyKeyPartitioner(nil)
	manualP := kgo.ManualPartitioner()
	return kgo.BasicConsistentPartitioner(func(topic string) func(*kgo.Record, int) int {
		if slices.Contains(manual, topic) {
			return manualP.ForTopic(topic).Partition
		}
		if slices.Contains(byWindow, topic) {
			return windowPartition
		}
		return byKey.ForTopic(topic).Partition
	})
}

// windowPartition is the partition of a record on an output topic keyed by
// window: Kafka's murmur2 partition of the key's symbol part for a candle,
// of the whole key for a record with headers (a quiet record, keyed by the
// bare symbol even when that symbol looks like a window key).
func windowPartition(r *kgo.Record, n int) int {
	key := r.Key
	if len(r.Headers) == 0 {
		key = windowKeySymbol(key)
	}
	return int(murmur2(key)&0x7fffffff) % n
}

// windowTopics lists the output topics of spec and the processors fused
// into it whose candles are keyed by window (a revision horizon).
func windowTopics(spec *stageSpec) []string {
	var out []string
	for _, s := range append([]*stageSpec{spec}, spec.chain()...) {
		if s.byWindow() {
			out = append(out, s.OutputTopic)
		}
	}
	return out
}

// byWindow reports whether s keys its candle records by window
// (symbol@open_time) rather than by symbol: when it has a revision horizon,
// so a compacted output topic keeps the newest revision of every window.
func (s *stageSpec) byWindow() bool { return s.ReviseWithin > 0 }

// murmur2 is Kafka's default partitioner hash (the Java client's
// Utils.murmur2, the one kgo.StickyKeyPartitioner(nil) uses; kgo does not
// export it). TestWindowPartitionIsSymbols checks the two agree.
func murmur2(b []byte) uint32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	h := seed ^ uint32(len(b))
	for len(b) >= 4 {
		k := uint32(b[3])<<24 + uint32(b[2])<<16 + uint32(b[1])<<8 + uint32(b[0])
		b = b[4:]
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch len(b) {
	case 3:
		h ^= uint32(b[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(b[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(b[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}

// run processes until ctx ends, then commits what is open and leaves the group.
// Every way out leaves the group: a stop that lands mid-restore or mid-commit
// must not leave a member behind that holds its partitions until the session
// timeout.
func (s *liveStage) run(ctx context.Context) error {
	defer s.restoreCl.Close()
	err := s.loop(ctx)
	if ctx.Err() != nil { // stopping: errors caused by the cancellation do not count
		if err != nil && !errors.Is(err, context.Canceled) {
			s.log.Warn("error while stopping", "err", err)
		}
		return s.shutdown()
	}
	s.leave() // a failed stage does not commit; its open transaction aborts
	return err
}

func (s *liveStage) loop(ctx context.Context) error {
	interval := s.e.commitInterval
	for {
		if ctx.Err() != nil {
			return nil
		}
		if err := s.handleEvents(ctx); err != nil {
			return err
		}
		pollCtx, cancel := context.WithTimeout(ctx, interval)
		fetches := s.sess.PollFetches(pollCtx)
		cancel()
		if fetches.IsClientClosed() {
			return nil
		}
		fetches.EachError(func(t string, p int32, err error) {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return
			}
			s.log.Warn("fetch error", "topic", t, "partition", p, "err", err)
		})
		if err := s.handleEvents(ctx); err != nil {
			return err
		}
		if err := s.processFetches(ctx, fetches); err != nil {
			if !errors.Is(err, errProcessorPanic) {
				return err
			}
			// The panicking processor's state is undefined: abort, and
			// rebuild every partition from its last commit.
			if err := s.abort(ctx); err != nil {
				return err
			}
			continue
		}
		if err := s.idleAdvance(ctx); err != nil {
			return err
		}
		for p, ps := range s.parts {
			if w, ok := watermarkOf(ps.proc); ok {
				s.e.m.watermark.WithLabelValues(s.spec.Name, strconv.Itoa(int(p))).Set(float64(w))
			}
		}
		s.publishActive()
		s.e.health.turn(s.spec.Name, s.sess.Client(), fetches)
		if s.inTxn && time.Since(s.txnStart) >= interval {
			if err := s.commit(ctx); err != nil {
				return err
			}
		}
	}
}

// partWork is the input of one partition in one poll, in fetch order.
type partWork struct {
	ps   *partState
	recs [][]*kgo.Record
}

// processFetches processes what one poll returned. Partitions are
// independent (each has its own processor, output and slab, and a key's
// candles come from the one partition that holds it), so when several have
// records they are processed and produced concurrently, one goroutine per
// partition up to GOMAXPROCS: a stage reading a busy multi-partition topic
// uses every core instead of one. Restores, the transaction's begin and
// everything after (idle advance, commit) stay on the loop's goroutine.
func (s *liveStage) processFetches(ctx context.Context, fetches kgo.Fetches) error {
	work := s.work[:0]
	defer func() {
		clear(work)
		s.work = work[:0]
	}()
	var procErr error
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		if procErr != nil || len(fp.Records) == 0 {
			return
		}
		if !s.owns(fp.Partition) {
			return // revoked since it was fetched: never processed here again
		}
		ps, err := s.part(ctx, fp.Partition)
		if err == nil {
			err = s.begin() // consumed offsets commit in a transaction even when nothing is emitted
		}
		if err != nil {
			procErr = err
			return
		}
		for i := range work { // a partition can come in more than one fetch of a poll
			if work[i].ps == ps {
				work[i].recs = append(work[i].recs, fp.Records)
				return
			}
		}
		work = append(work, partWork{ps: ps, recs: [][]*kgo.Record{fp.Records}})
	})
	if procErr != nil {
		return procErr
	}
	workers := min(len(work), runtime.GOMAXPROCS(0))
	if workers <= 1 {
		for i := range work {
			if err := s.processPart(ctx, work[i].ps, work[i].recs); err != nil {
				return err
			}
		}
		return nil
	}
	var (
		next  atomic.Int32
		wg    sync.WaitGroup
		errMu sync.Mutex
	)
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(work) {
					return
				}
				// A panic here (not the processor's: processGuarded takes
				// those) must not take the process down from a goroutine
				// nobody recovers: it aborts and rebuilds like one.
				if err := s.e.recovered(s.spec.Name, func() error { return s.processPart(ctx, work[i].ps, work[i].recs) }); err != nil {
					errMu.Lock()
					procErr = cmp.Or(procErr, err)
					errMu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return procErr
}

// processPart processes the records of one partition in order and
// produces what they emit (the transaction is open). It touches only ps,
// its output and slab, and what is safe for concurrent use (the client,
// metrics, the logger), so processFetches may run it for several
// partitions at once.
func (s *liveStage) processPart(ctx context.Context, ps *partState, batches [][]*kgo.Record) error {
	ps.out.Reset()
	n, control := 0, false
	for _, recs := range batches {
		for _, r := range recs {
			if r.Offset < ps.nextInput {
				continue // already reflected in the restored state
			}
			ps.nextInput = r.Offset + 1
			if r.Attrs.IsControl() {
				control = true // a transaction marker: no data, but the position moves past it
				continue
			}
			rec := processors.Record{Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp.UnixMilli()}
			if err := s.e.processGuarded(s.spec, ps.proc, ps.src, r.Offset, rec, &ps.out); err != nil {
				return err
			}
			n++
		}
	}
	if n > 0 || control {
		ps.consumed = true
		ps.quietSince = s.e.clock.Now()
	}
	if n > 0 {
		ps.touched = true
		// Every rejection is one input record.
		s.accepted.Add(float64(n - len(ps.out.Rejected)))
		s.rejectedRecords.Add(float64(len(ps.out.Rejected)))
	}
	s.txn.emit(ctx, &ps.out, &ps.slab)
	return s.feedChain(ctx, ps, &ps.out)
}

// probeEvery bounds how often a stage with quiet partitions asks the broker
// for its input's end offsets.
const probeEvery = 250 * time.Millisecond

// idleAdvance lets quiet partitions advance their watermarks by the wall
// clock, but only those that are truly idle: nothing received for
// idle_timeout of this process's wall time (counted from the restore at
// the earliest) and caught up with the input, i.e. the position equals the
// end offset the broker reports now. A partition that is behind (a backlog
// after a failover or restart, a slow fetch, records in flight) restarts
// its idle clock instead, so it never advances by the wall clock.
func (s *liveStage) idleAdvance(ctx context.Context) error {
	if s.idleTimeout <= 0 {
		return nil
	}
	now := s.e.clock.Now()
	var due []int32
	for p, ps := range s.parts {
		if now.Sub(ps.quietSince) >= s.idleTimeout {
			due = append(due, p)
		}
	}
	if len(due) == 0 || time.Since(s.lastProbe) < probeEvery {
		return nil
	}
	s.lastProbe = time.Now()
	pctx, cancel := context.WithTimeout(ctx, s.e.sessionTimeout)
	ends, err := s.admin.ListEndOffsets(pctx, s.spec.InputTopic)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		s.e.m.idleErrors.WithLabelValues(s.spec.Name, "probe").Inc()
		s.log.Warn("cannot tell whether quiet partitions are caught up (list end offsets failed); not advancing them by the wall clock", "err", err)
		return nil
	}
	mine, err := s.assignedByGroup(ctx)
	if err != nil {
		// No positive answer (rebalancing, a broker that describes groups
		// otherwise): the revokes we saw and the commit's generation check
		// decide, as always.
		s.log.Debug("cannot read this member's assignment from the group coordinator", "err", err)
	}
	slices.Sort(due)
	for _, p := range due {
		if mine != nil && !mine[p] {
			// The group gave p to another member, but no revoke reached
			// us: kgo's transact session skips the revoke callback while
			// an earlier revoke waits for the session's End, which an idle
			// stage may not call for a while. An idle advance here would
			// emit the new owner's candles a second time.
			s.log.Warn("the group no longer assigns this partition to this member, though no revoke was seen; dropping it", "partition", p)
			s.disown([]int32{p})
			continue
		}
		ps := s.parts[p]
		o, ok := ends.Lookup(s.spec.InputTopic, p)
		if !ok || o.Err != nil {
			continue // unknown: no advance
		}
		if ps.nextInput < o.Offset {
			// Behind: records we have not received yet exist. Their time
			// decides the watermark, not the wall clock.
			ps.proc.ResetIdle()
			ps.quietSince = now
			continue
		}
		s.out.Reset()
		ps.proc.Tick(&s.out)
		if len(s.out.Candles) > 0 {
			ps.touched = true
		}
		if err := s.emit(ctx); err != nil {
			return err
		}
		if s.inTxn {
			if err := s.feedChain(ctx, ps, &s.out); err != nil {
				return err
			}
		}
	}
	return nil
}

// assignedByGroup returns this member's partitions of the input as the
// group coordinator describes them, asking at most once a second. An error
// (the coordinator unreachable, the group rebalancing, this member unknown
// to it) means the coordinator gave no positive answer.
func (s *liveStage) assignedByGroup(ctx context.Context) (map[int32]bool, error) {
	if s.groupAssigned != nil && time.Since(s.groupAssignedAt) < time.Second {
		return s.groupAssigned, nil
	}
	s.groupAssigned = nil
	member, _ := s.sess.Client().GroupMetadata()
	dctx, cancel := context.WithTimeout(ctx, s.e.sessionTimeout)
	defer cancel()
	groups, err := s.admin.DescribeGroups(dctx, s.group)
	if err != nil {
		return nil, fmt.Errorf("describe group %s: %w", s.group, err)
	}
	g, ok := groups[s.group]
	switch {
	case !ok:
		return nil, fmt.Errorf("describe group %s: no answer for it", s.group)
	case g.Err != nil:
		return nil, fmt.Errorf("describe group %s: %w", s.group, g.Err)
	case g.State != "Stable":
		return nil, fmt.Errorf("group %s is %s", s.group, g.State)
	}
	for _, m := range g.Members {
		if m.MemberID != member {
			continue
		}
		mine := map[int32]bool{}
		if c, ok := m.Assigned.AsConsumer(); ok {
			for _, t := range c.Topics {
				if t.Topic == s.spec.InputTopic {
					for _, p := range t.Partitions {
						mine[p] = true
					}
				}
			}
		}
		s.groupAssigned, s.groupAssignedAt = mine, time.Now()
		return mine, nil
	}
	return nil, fmt.Errorf("group %s does not list this member (%s)", s.group, member)
}

func watermarkOf(p processor) (int64, bool) {
	if a, ok := p.(interface{ Watermark() (int64, bool) }); ok {
		return a.Watermark()
	}
	return 0, false
}

// handleEvents makes the restored partitions the ones the group gave us:
// it drops the revoked and lost ones and restores the others (newly
// assigned, or dropped by an aborted transaction). The owned set, not a
// queue of moves, decides: a partition revoked while a transaction aborted
// is never restored again.
func (s *liveStage) handleEvents(ctx context.Context) error {
	s.evMu.Lock()
	revoked, assigned, regained := s.revoked, s.assigned, s.regained
	s.revoked, s.assigned, s.regained = nil, nil, nil
	owned := make([]int32, 0, len(s.owned))
	for p := range s.owned {
		owned = append(owned, p)
	}
	s.evMu.Unlock()
	s.regain(regained)
	for p := range s.parts {
		if !s.owns(p) {
			delete(s.parts, p)
			s.e.m.watermark.DeleteLabelValues(s.spec.Name, strconv.Itoa(int(p)))
		}
	}
	for _, p := range revoked {
		s.e.m.watermark.DeleteLabelValues(s.spec.Name, strconv.Itoa(int(p)))
	}
	slices.Sort(owned)
	for _, p := range owned {
		if _, err := s.part(ctx, p); err != nil {
			return err
		}
	}
	if len(revoked)+len(assigned) > 0 {
		s.e.health.moved(s.spec.Name, s.spec.InputTopic, revoked)
		s.log.Info("partitions moved", "assigned", assigned, "revoked", revoked, "owned", len(s.parts))
		s.e.m.owned.WithLabelValues(s.spec.Name).Set(float64(len(s.parts)))
	}
	return nil
}

// regain drops the state of partitions the group assigned to us while we
// still held them. The group never assigns a member a partition it has: it
// took them away and gave them back, and either we did not see them go
// (kgo's transact session skips a revoke, or a loss, that comes before the
// session's End of an earlier one) or we saw it only since the last
// handleEvents, which would find them owned again and keep their state.
// Meanwhile another member may have owned them and committed: the state we
// hold is from before its commits, and counting the input from the
// group's offsets onto it would lose the input that member counted and
// write state entries over its own (dedupe id chunks of a window the key
// entry we hold does not count, which no restore accepts once the window
// closes). They are restored from the changelog instead, like any
// assigned partition. Only their state is dropped: the open transaction
// holds no input of theirs (kgo stopped fetching them when they went, and
// a transaction open then aborts at its End, which saw the revoke), and
// aborting it here would lose input of the other partitions — the poll
// this runs after already returned records past the ones the abort would
// make us read again.
func (s *liveStage) regain(regained []int32) {
	var stale []int32
	for _, p := range regained {
		if _, ok := s.parts[p]; ok && !slices.Contains(stale, p) {
			stale = append(stale, p)
		}
	}
	if len(stale) == 0 {
		return
	}
	slices.Sort(stale)
	s.log.Warn("the group gave back partitions this member still held (a revoke it missed, or one it has not acted on yet); restoring them from the changelog, as another member may have committed them meanwhile",
		"partitions", stale, "in_transaction", s.inTxn)
	for _, p := range stale {
		delete(s.parts, p)
	}
}

// part returns the state of partition p, restoring it first if needed.
func (s *liveStage) part(ctx context.Context, p int32) (*partState, error) {
	if ps, ok := s.parts[p]; ok {
		return ps, nil
	}
	start := time.Now()
	ps, n, err := s.restore(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("stage %s: restore partition %d: %w", s.spec.Name, p, err)
	}
	ps.quietSince = s.e.clock.Now() // the idle clock starts at the restore, never before
	s.parts[p] = ps
	s.e.m.restoreSecs.WithLabelValues(s.spec.Name).Observe(time.Since(start).Seconds())
	s.e.m.restored.WithLabelValues(s.spec.Name).Add(float64(n))
	s.log.Debug("partition restored", "partition", p, "changelog_records", n, "next_input", ps.nextInput, "took", time.Since(start))
	return ps, nil
}

// restore rebuilds partition p from Pebble plus the changelog tail (see the
// package doc). It returns the number of changelog records read.
func (s *liveStage) restore(ctx context.Context, p int32) (*partState, int, error) {
	name := s.spec.Name
	proc, err := s.spec.newProcessor(true, s.e.clock)
	if err != nil {
		return nil, 0, err
	}
	// A StoreUser reads its state from Pebble once the changelog tail is
	// in; everything else is restored into memory from entries.
	ref := unitRef{ns: name, part: p, clPart: p}
	st, err := s.e.restoreUnit(ctx, ref, s.partIO(p, s.changelog, ""), !inStore(proc))
	if err != nil {
		return nil, 0, err
	}
	if err := s.e.startProcessor(proc, ref, st.entries); err != nil {
		return nil, 0, fmt.Errorf("%w (read from %s)", err, st.source())
	}
	ps := &partState{unit: unit{proc: proc, sinceSnap: int64(st.records), liveKeys: len(st.entries), snap: st.snap},
		src: "partition " + strconv.Itoa(int(p)), nextInput: st.progress.next}
	n, err := s.restoreChain(ctx, ps, p)
	if err != nil {
		return nil, 0, err
	}
	return ps, st.records + n, nil
}

// partIO is how restoreUnit reads the unit of input partition p whose
// changelog is changelog: the stage's own (fused "") or that of the fused
// processor named fused.
func (s *liveStage) partIO(p int32, changelog, fused string) unitIO {
	return unitIO{
		changelog: changelog, log: s.log,
		barrier: func(ctx context.Context) (int64, error) {
			res := s.restoreCl.ProduceSync(ctx, &kgo.Record{Topic: changelog, Partition: p, Key: keyBarrier, Value: []byte(s.e.instance)})
			if err := res.FirstErr(); err != nil {
				return 0, err
			}
			return res[0].Record.Offset, nil
		},
		start: func(ctx context.Context) (int64, error) {
			starts, err := s.admin.ListStartOffsets(ctx, changelog)
			if err != nil {
				return 0, err
			}
			if so, ok := starts.Lookup(changelog, p); ok && so.Err == nil {
				return so.Offset, nil
			}
			return 0, nil
		},
		read: func(ctx context.Context, from, barrier int64, fn func(*kgo.Record) error) error {
			return s.readTopic(ctx, changelog, p, from, barrier, fn)
		},
		// Every commit of ours carries the snapshot positions on with the
		// group's offset.
		snapshot: func(ctx context.Context) (snapRef, bool) { return s.committedSnapshot(ctx, p, fused) },
	}
}

// readTopic reads partition p of topic (a changelog, or the input of a
// fused processor) from offset from up to the barrier (readChangelogTo),
// calling fn with every committed record.
func (s *liveStage) readTopic(ctx context.Context, topic string, p int32, from, barrier int64, fn func(*kgo.Record) error) error {
	if from > barrier {
		return nil
	}
	s.restoreCl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(from)}})
	defer s.restoreCl.RemoveConsumePartitions(map[string][]int32{topic: {p}})
	return readChangelogTo(ctx, s.restoreCl, s.log, topic, p, barrier, fn)
}

// emit produces s.out's candles and dead letters in the open transaction
// (beginning one if needed).
func (s *liveStage) emit(ctx context.Context) error {
	if len(s.out.Candles) == 0 && len(s.out.Rejected) == 0 && len(s.out.Events) == 0 && len(s.out.Quiet) == 0 {
		return nil
	}
	if err := s.begin(); err != nil {
		return err
	}
	s.txn.emit(ctx, &s.out, &s.slab)
	return nil
}

func (s *liveStage) begin() error {
	if s.inTxn {
		return nil
	}
	if err := s.sess.Begin(); err != nil {
		return fmt.Errorf("stage %s: begin transaction: %w", s.spec.Name, err)
	}
	s.inTxn, s.txnStart = true, time.Now()
	return nil
}

// publishActive hands changed open candles to the live publishers.
func (s *liveStage) publishActive() {
	for _, ps := range s.parts {
		if len(s.live) == 0 {
			break
		}
		if !ps.touched {
			continue
		}
		ps.touched = false
		ps.proc.Active(func(c *candle.Candle) {
			for _, lp := range s.live {
				lp.Active(*c)
			}
		})
	}
	s.publishChain()
}

// commit ends the open transaction through the unit's commit path
// (unitTxn.commit): state changes and progress go to the changelog, then
// everything commits atomically with the input offsets, then Pebble
// follows.
func (s *liveStage) commit(ctx context.Context) error {
	units := s.units[:0]
	for p, ps := range s.parts {
		units = append(units, unitCommit{u: &ps.unit, ref: unitRef{ns: s.spec.Name, part: p, clPart: p}, src: ps.src,
			progress: progressOf(ps.proc, ps.nextInput, "")})
		units = s.chainUnits(ctx, units, p, ps)
	}
	committed, err := s.txn.commit(ctx, units, s)
	if committed {
		s.chainCommitted(units)
	}
	clear(units)
	s.units = units[:0]
	if err != nil {
		return fmt.Errorf("stage %s: %w", s.spec.Name, err)
	}
	return nil
}

// end ends the open transaction with try (positionCommitter: the consumed
// offsets commit inside it, each with its partition's snapshot position as
// metadata) and reports whether it committed. When it did not, every
// partition is dropped: handleEvents rebuilds the ones the group still
// gives us from Pebble + changelog, which hold the last commit (a
// partition revoked meanwhile is not rebuilt: no ghost owner). An error
// means the producer is fenced, or its transaction could be neither ended
// nor aborted: its state is unknown (the next Begin would fail with
// "already in a transaction"), so the stage must drop its clients and be
// rebuilt (supervise).
func (s *liveStage) end(ctx context.Context, try kgo.TransactionEndTry) (bool, error) {
	ctx = s.withSnapMetadata(ctx)
	consumed := false
	for _, ps := range s.parts {
		consumed = consumed || ps.consumed
	}
	if try == kgo.TryCommit && !consumed {
		if err := s.proveMembership(ctx); err != nil {
			s.log.Warn("a transaction without input could not prove group membership; aborting it (a rebalance moved our partitions, or we were paused past the session timeout)", "err", err)
			try = kgo.TryAbort
		}
	}
	committed, err := s.endTxn(ctx, try)
	if err != nil && !isFatalTxnErr(err) && !isFencedProducer(err) {
		// franz-go keeps the transaction open when EndTxn fails (e.g. a
		// zombie that was fenced while paused); the documented cure is an
		// abort retry, which resets the producer. Without it the next
		// Begin fails with "already in a transaction".
		aborted := false
		for range 3 {
			_, aerr := s.endTxn(ctx, kgo.TryAbort)
			if aerr == nil {
				aborted = true
				break
			}
			if isFatalTxnErr(aerr) || isFencedProducer(aerr) {
				err = aerr
				break
			}
			s.log.Warn("abort after a failed end of transaction failed; retrying", "err", aerr)
		}
		if aborted {
			err = nil // the transaction is aborted: rebuild the partitions, keep the client
		} else if !isFatalTxnErr(err) && !isFencedProducer(err) {
			err = fmt.Errorf("%w: %w", errTxnUnknown, err)
		}
	}
	s.inTxn = false
	if err == nil && committed {
		return true, nil
	}
	if err == nil && try == kgo.TryCommit {
		// GroupTransactSession aborts, without an error, a commit asked
		// during a rebalance (as at start-up, while the group settles).
		s.log.Info("transaction aborted: the group rebalanced during it; rebuilding state from the last commit")
	} else {
		s.log.Info("transaction aborted; rebuilding state from the last commit", "err", err)
	}
	clear(s.parts)
	if err != nil {
		return false, fmt.Errorf("end transaction: %w", err)
	}
	return false, nil
}

// after: the offsets committed inside the transaction (positionCommitter).
func (s *liveStage) after(context.Context) error { return nil }

// positionInTxn: a snapshot counts once its position is in the offset
// commit (positionCommitter).
func (s *liveStage) positionInTxn() bool { return true }

// errTxnUnknown: a transaction could be neither committed nor aborted, so
// the producer's state is unknown; only a new client can go on.
var errTxnUnknown = errors.New("the transaction could not be ended nor aborted")

// endTxn ends the session's transaction (a hook for fault-injection tests
// when e.endTxnHook is set).
func (s *liveStage) endTxn(ctx context.Context, try kgo.TransactionEndTry) (bool, error) {
	if h := s.e.endTxnHook; h != nil {
		return h(ctx, s.sess, try)
	}
	return s.sess.End(ctx, try)
}

// abort aborts the open transaction (if any) and drops every partition, to
// be rebuilt from the last commit.
func (s *liveStage) abort(ctx context.Context) error {
	if !s.inTxn {
		clear(s.parts)
		return nil
	}
	if err := s.txn.abort(ctx, s); err != nil {
		return fmt.Errorf("stage %s: %w", s.spec.Name, err)
	}
	return nil
}

func cloneOrNil(v []byte) []byte {
	if v == nil {
		return nil
	}
	return append([]byte(nil), v...)
}

// isFatalTxnErr reports errors after which the session cannot continue.
func isFatalTxnErr(err error) bool {
	return errors.Is(err, kgo.ErrClientClosed)
}

// stopGrace bounds each step of a graceful stop: ending the open
// transaction (it is aborted after that), then leaving the group. While the
// group waits for a dead member's session to expire, End blocks on a
// heartbeat and Close on the in-flight JoinGroup; unbounded, SIGTERM took
// 2×transaction timeout plus 15s.
const stopGrace = 5 * time.Second

// endContext bounds ending a transaction: 2× the transaction timeout, ctx's
// deadline if sooner, and stopGrace once ctx is canceled (a stop must not
// wait for a stuck commit, and aborting is always safe).
func (e *Engine) endContext(ctx context.Context) (context.Context, context.CancelFunc) {
	limit := time.Now().Add(2 * e.txnTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(limit) {
		limit = dl
	}
	endCtx, cancel := context.WithDeadline(context.WithoutCancel(ctx), limit)
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(stopGrace)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-endCtx.Done():
		}
	})
	return endCtx, func() { stop(); cancel() }
}

// shutdown commits the open transaction and leaves the group, each within stopGrace.
func (s *liveStage) shutdown() error {
	var err error
	if s.inTxn {
		ctx, cancel := context.WithTimeout(context.Background(), stopGrace)
		err = s.commit(ctx)
		cancel()
	}
	s.leave()
	return err
}

// leave closes the session, which leaves the group, waiting at most stopGrace.
func (s *liveStage) leave() {
	done := make(chan struct{})
	go func() { s.sess.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(stopGrace):
		s.log.Warn("leaving the group took too long; closing anyway (the group reassigns our partitions after the session timeout)")
	}
}

// PartitionProgress is what a stage's changelog says about one input partition at
// its last commit: the next input offset and the event-time watermark.
type PartitionProgress struct {
	NextInput    int64
	Watermark    int64
	HasWatermark bool
}

// DecodeProgress reads the value of a changelog progress record ("o").
func DecodeProgress(v []byte) (PartitionProgress, bool) {
	p, ok := decodeUnitProgress(v)
	return PartitionProgress{NextInput: p.next, Watermark: p.wm, HasWatermark: p.hasWM}, ok
}
