// Package engine runs a topology: it wires sources, processors and sinks
// into stages and drives them against Kafka (or in process, for replay and
// `kandle test`).
//
// # Stages
//
// Every processor of the topology is one stage (except fused rollups, which
// run in the stage of the processor they read: see "Fused chains"): a
// consumer group reading the
// processor's input topic (a source topic, or the output topic of the
// processor it rolls up) and writing closed candles (a silence processor:
// its events, keyed by device) to its output topic,
// rejected records to the dead-letter topic, and its state changes to a
// compacted changelog topic. Each input partition gets its own processor
// instance, so keys and watermarks never cross partitions; the partitions
// one poll returns are processed and produced concurrently (one goroutine
// per partition, up to GOMAXPROCS), while restores and commits stay on the
// stage's own goroutine. Sinks are stages
// too: a consumer group per sink that reads output topics and writes to the
// external store.
//
// # The exactly-once unit
//
// Exactly-once work has one unit, whatever the source: the processor of
// one Kafka input partition or of one Kinesis shard, with its committed
// state (unit.go). The unit is the only exactly-once code path of the
// engine; the sources differ only in how their position is committed. A
// unit owns:
//
//   - its changelog key layout (unitKeys): a prefix, then 'p' and the
//     processor's entry key for a state entry (nil value: deleted), 'o'
//     for its progress, 's' for its snapshot markers. A Kafka partition's
//     prefix is empty (changelog partition = input partition); a shard's
//     is "s", its id and a 0 byte (shards hash onto shared changelog
//     partitions). Restore barriers "b" belong to the changelog partition;
//   - its progress record (unitProgress): where its source resumes (the
//     next input offset, or the shard's record count and last sequence
//     number) and its watermark;
//   - its restore (restoreUnit): Pebble, then the changelog from Pebble's
//     position — or, with no usable local state, from its last committed
//     snapshot or the changelog's start — up to a barrier it appends
//     first; every entry read goes to Pebble too. The processor then gets
//     its state (Engine.startProcessor): in memory, or, for a
//     processors.StoreUser, as the unit's Pebble range;
//   - its running state between commits (unit): processor, output, the
//     snapshot bookkeeping and a handoff not yet committed;
//   - its emission (emitter, through unitTxn.emit): candles, events and
//     quiet records to the output topic, rejections to the dead-letter
//     topic, with metrics;
//   - its commit (unitTxn.commit), the same for every source: in the
//     transaction that holds its emissions, its state changes (after a
//     snapshot of its whole state when one is due, snapshot.go) and its
//     progress record go to the changelog; the transaction ends; only if
//     it committed are the changes and the changelog position written to
//     Pebble, and only then does a source that commits its position after
//     the transaction do so.
//
// What the commit leaves to the source is one small interface,
// positionCommitter: how the transaction ends (end) and whether the
// position commits in it or after it (after). stage.go (Kafka) runs the
// partitions of a stage in one kgo.GroupTransactSession: its end commits
// the input offsets inside the transaction (KIP-447), with each
// partition's snapshot position as their metadata, and after does
// nothing. kinesis.go runs each shard with its own transactional producer
// (transactional id <group>.<stage>.<shard>, so a new owner fences the old
// one with its first barrier): its end (shardPosition) only ends that
// producer's transaction, and after checkpoints the sequence number in the
// lease table, with the snapshot position as the checkpoint's metadata.
// Everything else in the two drivers is assignment or leases, fetching,
// and opening the transaction.
//
// Why a checkpoint after the transaction is safe: the changelog, not the
// lease, is the source of truth. The transaction commits the shard's
// outputs, state and progress record ('o', holding the sequence number)
// atomically; a restore reads the progress from the changelog and resumes
// after that sequence number. The order is: transaction committed, then
// Pebble, then the checkpoint. If the process dies after the commit and
// before the checkpoint, the lease is behind: the next owner still resumes
// from the changelog's position (the lease checkpoint is used only when the
// changelog holds nothing of the shard), so no record is processed twice.
// A checkpoint is never ahead of a commit, since it is written after it.
// The snapshot position it carries is therefore always one of a committed
// snapshot, or an older one; either is a valid start (below), and a marker
// that is no longer there sends the restore to the changelog's start. An
// idle advance does not move the position and writes no checkpoint.
//
// A Kinesis child shard (a split or merge) starts from its parents' final
// state: the consumer lets a child's lease be taken only once every
// parent's lease is checkpointed SHARD_END, which a parent's owner writes
// after End, after the parent's last commit; a child that ends before its
// first commit commits what it was handed in End, so its own children find
// it. The child reads each parent with a barrier of its own producer; the
// two children of a split open together, and the restores of one shard on
// an instance take turns, so the parent's Pebble position only grows.
//
// A new source plugs in as a driver: it maps its units onto unitRef (a
// Pebble namespace and partition, a changelog partition and a key prefix)
// and keeps a unit for each; gives restoreUnit its unitIO (how to write a
// barrier, read the changelog partition and find a committed snapshot
// position) and hands the result to Engine.startProcessor; feeds records
// to the processor through Engine.processGuarded; and for each
// transaction makes a unitTxn over its transactional producer, emits with
// it and calls unitTxn.commit with a positionCommitter of its own. It
// writes no changelog record, Pebble entry or snapshot itself.
//
// # Processor kinds
//
// A stage builds the processor of each input partition with its kind
// (kinds.go): the built-in candles (multi-metric readings included),
// rollup and silence, or a kind registered in topology.Registry.Processors
// whose value implements ProcessorKind. NewProcessor gets a Partition: the
// processor's settings, its source and decoder config, its timeframe, the
// timeframe it reads and the rollup timeframes it marks quiet. Stages,
// replay and `kandle test` handle any kind alike: candles go to the output
// topic and the rollups reading it, events (a kind whose facts say its
// output is not candles) go to the output topic and event sinks.
//
// # Quiet records
//
// When a key's run of candles ends (max_idle; without gap fill, also when
// its next window opens after a rollup boundary), the candle processor emits
// quiet marks at the boundaries of the rollup timeframes built from it
// (graph.go gives it all of them, direct and indirect). A stage writes each
// mark to its output topic after the candles of the same batch, as a quiet
// record: key = symbol (so it lands on the partition of the key's candles,
// after them), header kandle-kind: quiet, and the body
//
//	{"kind":"quiet","symbol":"BTC","timeframe":"1m","quiet_until":1767226200000}
//
// which has no window, so candle.ParseJSON refuses it. A rollup stage hands
// quiet records to Rollup.Quiet (it recognises the body, since in-process
// topics have no headers), which closes the key's open window as direct
// aggregation would, deletes its state, and passes the mark on to the next
// rollup. Live Kafka and Kinesis stages write them in the same transaction
// as the candles; the in-process Pipeline (replay, `kandle test`) feeds them
// to the rollups in the same order, and replay to topics writes them too.
// Sinks and the demo table skip them (IsQuietRecord). Only stages that
// rollups read write quiet records.
//
// # Fused chains
//
// A rollup that reads the output of another processor with the same key
// and the same partition count — a rollup of a candles processor whose
// Kafka source checks that record keys are symbols (key_check), or a
// rollup of such a rollup, its input topic with as many partitions as the
// upstream's input — runs fused (fuse.go): not as a consumer group of its
// own, but in the stage of the first processor of its chain, one more
// unit on each of that stage's input partitions, in the same transaction.
// What the upstream unit emits (Output.Candles, then Output.Quiet, the
// order a reader of the output topic gets them in) goes straight into the
// fused processor — candles as values through Rollup.Take (the checks,
// state and output of Process on their JSON, without building and parsing
// it; a candle whose JSON would not read back as it is goes through
// Process as its JSON), quiet marks through Rollup.Quiet — and what that
// emits into the processors fused into it. Every level's candles and quiet records are still produced to
// its output topic, so sinks and other readers see no difference. A
// processor opts out with fuse: false; processors whose keys or partition
// counts differ (a Kinesis source's shards, an output topic with another
// partition count, a source without key_check) read their topic as
// before. The engine refuses to start when the partition counts on the
// brokers differ for a fused pair, and when --only names a fused processor
// without the stage it runs in. The rule assumes the source's producers
// partition by the record key with Kafka's default partitioner, as
// kandle's own output topics do: key p of the input then lands on
// partition p of every output topic of the chain.
//
// State stays per processor: a fused unit has its own Pebble range
// (namespace: its name) and its own changelog topic and keys, written in
// the stage's transaction (unitTxn.commit takes units of several
// changelogs); its snapshots' positions ride on the stage's offset commit
// as extra lines of the metadata ("fused <name> <offset> <token>").
// Its progress record holds its position on its input topic as if it had
// read it: the offset after the last record the transaction wrote to its
// input partition (known once the transaction's records are flushed, just
// before its progress records are produced), so its committed state
// always matches a point of its input topic. Its consumer group is not
// joined: `kandle offsets` shows the processor as fused into its stage,
// with the position its changelog holds, and refuses to reset it; `kandle
// plan` has a RUNS column; kandle_processor_fused says which processors
// run fused, and their records, candles, snapshots and panics are counted
// under their own names.
//
// Switching fusion on a running deployment keeps the state (it is in no
// fingerprint), with one rule: stop every instance, then start them all
// with the new topology (`kandle plan` says so). A rolling restart would
// run the processor fused on new instances and as a stage on old ones,
// two writers of one changelog. After a full stop:
//
//   - fusing: the processor's state is restored from its own changelog;
//     its progress is its position on its input topic (the offset its
//     stage consumed up to, not its group's committed offsets, which are
//     no longer used). Before the stage takes new input, the fused unit
//     reads its input partition from that position to the last stable
//     offset — what its upstream wrote that it had not read yet; nothing
//     else writes there, since the upstream's unit is being restored right
//     here — and produces what that emits in the unit's first
//     transaction; the processors fused into it then take that output
//     from memory after reading their own backlog. Nothing is lost, and
//     nothing is taken twice (the Rollup also rejects a sub-candle
//     closing at or before its last one as duplicate);
//   - unfusing: the processor's stage restores its changelog, whose
//     progress record is its position on its input topic, and skips the
//     records before it, whatever its group last committed.
//
// Replay and `kandle test` (the in-process Pipeline) need no fusion: they
// already hand each stage's candles and quiet records to its rollups in
// memory, in the order of the in-process output topics, which is the
// order a fused chain feeds them; their output is the same either way.
// Kinesis stages are never fused: shards are not partitions, so a rollup
// of a Kinesis candles processor reads its Kafka output topic.
//
// # Exactly-once protocol (Kafka → Kafka)
//
// A processor stage is a kgo.GroupTransactSession. Every commit interval it
// does, in this order:
//
//  1. produce the candles, events and dead letters of the records it
//     processed (and of the ticks: idle advance, silence levels coming due);
//  2. produce each changed state entry to the changelog partition equal to the
//     input partition, plus an entry holding the next input offset;
//  3. commit the transaction, which also commits the consumed input offsets
//     (KIP-447: a fenced or rebalanced member cannot commit). A transaction
//     that consumed nothing (only candles idle advance closed) commits the
//     unchanged offsets instead, so it gets the same generation check;
//  4. only then write the same state entries, the changelog offset and the
//     input offset to Pebble in one atomic batch.
//
// If the transaction aborts (rebalance, fencing, timeout, broker error), no
// output, state entry or offset of it is visible to read-committed readers;
// the stage drops its in-memory processors and rebuilds, from Pebble plus
// the changelog, those of the partitions the group still assigns to it, and
// the session rewinds to the committed offsets. What is owned is the set the
// group callbacks keep (assigned adds, revoked and lost remove), not a queue
// of moves: a partition revoked while a transaction aborts is never restored,
// processed, emitted or committed by this instance again (no ghost owner).
// kgo's transact session skips a revoke (or a loss) that comes before the
// session's End of an earlier one, so the callbacks can miss a partition
// going away; when the group then assigns it to us again (or assigns again
// one whose revoke the stage has not acted on yet), the partition we still
// hold is stale (another member may have committed it meanwhile), so its
// state is dropped and restored like any assigned partition
// (liveStage.regain).
//
// If ending the transaction fails and the abort after it fails too (a
// timeout, a coordinator that already aborted it on its own), the
// producer's state is unknown: its transaction may be open, aborted or
// even committed. The stage then drops its clients (supervise, recover.go)
// and is built again after a backoff; the new producer's InitProducerID
// under the same transactional id ends whatever the old one left open, and
// the restore below reads exactly what was committed. The same path takes
// a fenced producer, a broker error the stage cannot get past and a
// recovered panic: kandle run exits only for configuration errors or a
// signal. A panic in a processor is recovered where the processor is
// called and only aborts the transaction (the partitions are rebuilt from
// the last commit); a record that panicked its processor twice is
// dead-lettered with reason internal_error instead of processed again.
//
// If the process dies between 3 and 4, Pebble is behind the changelog. On
// restart — and whenever a partition is assigned — the stage loads Pebble's
// entries for the partition, then reads the changelog from the offset Pebble
// recorded up to a barrier record it appends first (so an aborted or still
// open transaction at the tail cannot make it wait forever), applying every
// committed entry. It stops at the first record at or past the barrier's
// offset, whatever it is, so a barrier that compaction removed (a later
// restore wrote another) cannot make it wait either. The result is exactly
// the state that was committed with the group's offsets. A new owner with an
// empty disk reads the changelog from the partition's last committed
// snapshot (below), so recovery time is bounded by the live state, not by
// history, even where the changelog is never compacted. Pebble can never be
// ahead of Kafka because it is written after the commit; when Pebble's recorded
// changelog offset is below the changelog's start or past its end (a
// compacted, truncated or recreated changelog), the partition's local state
// is dropped and rebuilt from the changelog alone. Kafka partitions and
// Kinesis shards share this restore (restoreUnit).
//
// # Changelog snapshots
//
// A changelog holds every version of every key written since it was
// created until the broker compacts it, and compaction never touches the
// active segment (1 GiB or 7 days by default; the dev broker and kfake never
// compact at all). So kandle does not rely on it: a stage partition
// snapshots its state into its own changelog (snapshot.go). When the
// changelog records it wrote since its last snapshot exceed twice its live
// state entries (at least 1000), its next transaction that consumes input
// (but not the first commit after a restore, which carries a takeover's
// first output) writes, on the changelog partition and in this order, a
// marker record (key "s", value a token unique to the snapshot), every
// committed state entry that the transaction does not change (read from
// Pebble, which holds the state of the last commit), the transaction's
// changes, and the progress record "o". Entries deleted before the snapshot
// are simply not in it, so a deleted key cannot come back.
//
// Where the snapshot starts (the marker's offset, which the producer knows
// before EndTxn, and its token) goes into the metadata string of the input
// partition's TxnOffsetCommit (kgo.PreTxnCommitFnContext; proveMembership
// restates it too), so it is committed exactly when the snapshot and the
// offsets are: a snapshot in an aborted transaction is invisible to
// read-committed readers and its position is never committed. Every later
// commit of the partition carries the position on (a commit without it
// would forget it). A restore with no usable local state reads the
// committed position with the group's offsets and reads the changelog from
// there to its barrier: the snapshot, then everything committed after it.
// Any committed snapshot is a valid start, since it holds the whole state
// its transaction committed; so a stale read of the position (an older
// snapshot) costs time, never correctness. The first record read must be
// the marker with the token; if it is not (the changelog was recreated,
// compaction removed the marker because a later snapshot wrote another, or
// the position came from an offset commit whose transaction then aborted,
// so its marker is invisible), the restore reads the changelog from its
// start instead. Compaction
// otherwise only removes versions that a later record of the same key
// replaces, which the read from the snapshot sees too. The cost: at most
// one snapshot record per two change records (write amplification ≤ 1.5),
// and a restore reads at most about three times the live state plus one
// transaction's changes. Restores with local state (Pebble) read the tail
// after Pebble's position as before.
//
// Kinesis shards snapshot the same way, with their own marker key (their
// prefix and 's') on the changelog partition they share with other shards;
// a shard's snapshot position travels as the metadata of its lease
// checkpoint, written after the transaction (see "The exactly-once unit"
// for why that is enough).
//
// A processor that implements processors.StoreUser (the silence processor)
// is not loaded into memory at all, on a Kafka partition or a Kinesis
// shard alike: the changelog tail goes into Pebble only, and the processor
// then reads its unit's Pebble range through UseStore (procstore.go),
// holding just the entries changed since the last commit. Since Pebble is
// written after each commit, the range it reads is always the committed
// state; a failed read makes the unit abort before it commits anything
// computed without it. A child shard's handed-over state, not committed
// yet, is put in its Pebble range without a position: a restore before the
// child's first commit drops it and hands over again.
//
// At start the engine creates each changelog with as many partitions as its
// input topic has on the broker, and refuses to run when an existing
// changelog is not compacted or has fewer partitions, or when the session
// timeout is outside the brokers' allowed range.
//
// # Idle advance
//
// In live mode a quiet partition's watermark advances with the wall clock
// (its processor's Tick), so quiet markets get their candles. Only a truly
// idle partition does: nothing received for idle_timeout of this process's
// wall time, counted from the partition's restore at the earliest (the
// processor does not restore wall-clock facts from the changelog), and
// caught up — its position (control records included) equals the end
// offset the broker reports right then. A partition found behind restarts
// its idle clock (ResetIdle): after a failover, a restart, a slow fetch or
// with a backlog, its records, not the clock, move its watermark, so live
// with faults equals replay. A partition the group coordinator no longer lists in
// this member's assignment is dropped before it could advance, even when
// no revoke reached the stage (kgo's transact session skips the revoke
// callback while an earlier revoke waits for the session's End): a ghost
// owner never closes another member's windows. A Kinesis shard is caught up when its last
// read returned MillisBehindLatest 0; a shard's idle advance whose
// transaction fails is counted, logged and retried from the shard's
// rebuilt state.
//
// Sinks are at-least-once with idempotent writes: a sink stage flushes the
// store before committing its offsets.
//
// # State fingerprints
//
// The state of a processor means something only under the settings it was
// built with: its timeframe and zone, dedupe, gap_fill, the record fields
// and input it decodes, and for a rollup the whole chain it is built from
// (topology.Fingerprint lists them; every other setting is compatible). The
// rules lateness and max_idle are listed too, as compatible changes: they
// decide from now on (the aggregator stores its watermark, which never goes
// back). Before any stage starts, Run compares the fingerprint of each
// processor it runs with the one recorded on the brokers, in the compacted
// topic <name>.fingerprints (key: processor name; see fingerprint.go):
//
//   - none recorded (a new processor, or state from before fingerprints):
//     the current one is recorded;
//   - equal: nothing to do;
//   - only compatible changes (rules, a rollup removed, a record of an
//     older version): the current one is recorded, carrying the lateness
//     of a version 1 record (topology.Fingerprint.Legacy), which the
//     processors get as processors.CandleConfig.StateLateness to restore
//     the watermark of partition entries written before it was stored;
//   - different, and the processor has state (a changelog record or a
//     committed input offset): Run fails with ErrIncompatibleState, naming
//     each processor and changed setting and what to do (undo the edit,
//     rename the processor for fresh state, or reset it by deleting its
//     changelog topic and consumer group). Nothing was consumed, produced or
//     recorded, so undoing the edit simply runs on;
//   - different, without state (the operator reset it): the new one is
//     recorded.
//
// Pebble keeps the fingerprint its local state of each stage was written
// under (state.Store.Fingerprint). Local state under an incompatible
// fingerprint — or with none — is dropped before the stages start (a
// compatible change only records the new one), so restore reads the
// changelog from its start instead of mixing a stale cache into it. The
// check runs before restore, so a restored partition always matches the
// topology it runs under. `kandle plan` reads the same records to show, per
// processor, whether a new topology keeps, rebuilds or drops its state.
//
// # Replay
//
// Replay reads a bounded range without a consumer group: the end offsets
// are the last stable offsets when it starts, and it reads every partition
// up to them however long fetches take. A read-committed consumer cannot
// tell "slow" from "nothing visible left" (an aborted transaction whose
// marker lies past the end offsets is filtered out, and nothing else comes),
// so after a few quiet seconds replay asks the partition leader directly with
// a read-committed fetch from its position (replay_probe.go): records or
// markers before the end mean wait; only aborted batches up to the end mean
// the partition is done. Brokers that do not answer at all for
// ReplayOptions.Timeout fail the replay; it never returns a partial result
// as if complete.
package engine
