// Package processors turns trades into candles: the semantics of
// docs/contract.md (the candle contract), as pure code.
//
// The model is one processor per input partition. Keys (symbols) live in one
// partition, so an Aggregator owns every key it sees and needs no
// coordination: it decodes each record (a hand-written JSON scanner, no
// reflection), validates it, counts it into the key's open window, and
// tracks the partition's watermark W = max event time − lateness. When W
// passes a window's close the window is final and its candle is emitted
// exactly once (with a revision horizon, later revisions of it follow:
// see Revisions below); gap filling emits flat candles for windows without
// trades.
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
// Revisions (CandleConfig.ReviseWithin = H, off at 0: then nothing below
// applies and the output is what it was without the option):
//
//   - A window is revisable while it closes after W − H. A trade late for
//     its window (close ≤ W) but inside the horizon updates the window;
//     older, it is rejected as late, the detail naming the horizon. Windows
//     that closed before the horizon was turned on (state written without
//     one, restored with one) are not revisable: a trade for them is late.
//   - Changes to closed windows are held pending, in the state, and go out
//     when the watermark next moves (a record raising the max event time,
//     or the live idle advance), before the finals of that move: one
//     revision per changed window however many trades changed it, keys in
//     key order, each key's windows in window order. A window whose candle
//     went out is emitted again with Rev one higher; a window that never had
//     a candle (no gap fill, a silence, a key first seen late) with rev 0,
//     possibly after later windows of its key. Revisions are therefore a
//     function of the input (and of the live idle advance).
//   - The latest revision of every window inside the horizon is the candle
//     of aggregating the same records with no trade late: gap fill and
//     max_idle are recomputed from the oldest kept window. Gap candles are
//     flat at the previous close and are revised when it changes, up to the
//     next window with trades; a late trade that moves a key's last trade
//     later extends its run of gap candles (rev 0 for the new ones), also
//     past a run that had ended, the key's gap filling going on from the
//     watermark. QuietMarks already sent stand: a rollup then gets
//     sub-candles (rev 0 or higher) for parents it closed.
//   - Dedupe also sees the ids of the kept windows: a late duplicate is
//     rejected as duplicate. An on-time trade is checked against the open
//     windows only, as without a horizon.
//   - A cancel (candle.ActionCancel) or correction (ActionCorrect) names a
//     trade by its id: the id finds the trade, the record's event time
//     need not be the trade's (feeds stamp a cancel with the time of the
//     cancel message). The window of the record's event time is looked at
//     first, then the key's other windows a take-back may change, newest
//     first: its open windows and its closed windows inside the horizon
//     (not a window that was open when the horizon was turned on: its
//     earlier trades are not kept). The first that holds the id, or
//     cancelled it, answers; with dedupe each window's id set rules it out
//     at once, without it a closed window whose range of numeric ids
//     cannot hold the id is skipped and the others' kept trades scanned. The search reads
//     the state only, which a restore brings back whole, so a replay and a
//     restarted run find the same window. A take-back never moves the
//     watermark. The trade is removed, or its price and quantity replaced
//     keeping its place in the arrival order, and its window is recomputed
//     from its kept trades (high, low, open, close, volumes, count, first
//     and last ids); a closed window is revised at the next watermark move
//     like a late trade's. No id or no horizon: unknown_trade. No window
//     holds the id: beyond_horizon when the window of the record's event
//     time closed outside the horizon (or was open when the horizon was
//     turned on), else unknown_trade. A cancel of a trade already
//     cancelled, or a correction to the price and quantity it already
//     has: duplicate, nothing changes. The decoder
//     says which records take back a trade (candle.Trade.Action); their
//     other fields are validated as a trade's, and a cancel's price and
//     quantity are not used. A closed window left with no trades is
//     emitted again as a gap candle, flat at the previous close
//     (at its own last close when the key has no earlier candle), with gap
//     fill on or off: a candle that went out is never withdrawn. An open
//     window left with no trades is dropped (a repeated cancel then finds
//     no trade: unknown_trade).
//   - A key is freed only once its kept windows have passed the horizon.
//     Kept windows belong to their key in a Kinesis split or merge.
//   - A horizon turned off again (state written with one, restored with
//     none): the kept windows and trade logs leave the state as the
//     watermark moves; late trades are late again.
//   - The aggregator counts what it revised for metrics: RevisionCounts.
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
