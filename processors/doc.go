// Package processors turns trades into candles: the semantics of
// docs/contract.md (the candle contract), as pure code.
//
// The model is one processor per input partition. Keys (symbols) live in one
// partition, so an Aggregator owns every key it sees and needs no
// coordination: it decodes each record (a hand-written JSON scanner, no
// reflection), validates it, counts it into the key's open window, and
// tracks the partition's watermark W = max event time − lateness. When W
// passes a window's close the window is final and its candle is emitted
// exactly once; gap filling emits flat candles for windows without trades.
// A Rollup builds higher timeframes from the closed candles of a lower one,
// key by key, as they come back from an output topic.
//
// Keys live in one partition: with DecoderConfig.KeyCheck a record whose
// Record.Key (Kafka record key, Kinesis partition key) is not its key field
// is rejected as key_mismatch. A key gets gap candles for at most MaxIdle
// after its last trade; then its run ends and its state is freed, and a
// later trade starts a new run without filling the silence. With
// CandleConfig.Rollups the aggregator first emits QuietMarks at the rollup
// window boundaries that still hold the key's last candles, as the
// watermark reaches them; Rollup.Quiet closes those windows exactly as
// direct aggregation closes them (rollup equals direct also for quiet keys)
// and frees the key. Without gap fill a key is quiet between any two of its
// windows with a rollup boundary in between, so its marks come then too.
//
// A Silence processor watches devices instead: it emits an event (not a
// candle) when a device has sent nothing for a level's delay, measured on
// the partition's ingestion clock, and a recovered event when it reports
// again. A MultiMetric reader splits readings with several value fields
// into one candle series per metric. All of them implement Processor; so
// does a new kind of processor, which a kind registered in the topology
// builds per partition (engine.ProcessorKind). Readings (silence,
// multi-metric) go through the trade decoder's rules for keys, times and
// bad input, with its reason codes (a key with a control character is
// invalid_key whatever reads it).
//
// Each kind also says how its state follows a Kinesis split or merge: a
// Resharder tells which record key every state entry belongs to and how
// the partition-wide entries of several parent shards merge (watermarks
// and ingestion clocks never go back); HandOver builds a child shard's
// state from its parents' with it, the same way for every kind.
//
// The watermark is stored with the partition's state and never goes back:
// restored under a longer lateness it holds still until the max event time
// less the new lateness passes it, so no emitted window reopens (lateness,
// max_idle, idle_timeout and max_future decide from now on and may change
// on existing state). With the build tag invariants (package
// internal/invariant) the processors check that, and that per key a window
// is emitted final once, in order.
//
// Everything here is single-goroutine and deterministic: no I/O, no
// goroutines, no time.Now (internal/archtest fails on a wall-clock call
// outside SystemClock). Time comes from the records and from an injected
// Clock (the future guard, and the idle advance in live mode only). That is
// what makes exactly-once work: the engine checkpoints the state entries
// reported by Changes together with the input offset, a new owner Restores
// them, and re-processing the rest of the input yields exactly the candles an
// uninterrupted run would have produced. The same property lets a replay from
// an offset reproduce history.
package processors
