package processors

import (
	"github.com/kandle/kandle/internal/clock"

	"github.com/kandle/kandle/candle"
)

// Reason is a stable code saying why a record was rejected. Reason codes are
// part of the dead-letter contract: never rename one.
type Reason string

// The reason codes of docs/contract.md → "Bad input".
const (
	ReasonMalformedJSON Reason = "malformed_json"
	ReasonNotObject     Reason = "not_object"
	ReasonMissingField  Reason = "missing_field"
	ReasonInvalidPrice  Reason = "invalid_price"
	ReasonInvalidQty    Reason = "invalid_qty"
	ReasonInvalidTS     Reason = "invalid_ts"
	// ReasonInvalidSide: the source maps an aggressor side field and the
	// record's value is neither side (see Fields.Side, Fields.BuyerMaker).
	ReasonInvalidSide Reason = "invalid_side"
	ReasonOversized   Reason = "oversized"
	ReasonUnknownKey  Reason = "unknown_key"
	ReasonKeyMismatch Reason = "key_mismatch"
	ReasonInvalidKey  Reason = "invalid_key" // invalid UTF-8 or a control character in the key
	ReasonLate        Reason = "late"
	ReasonDuplicate   Reason = "duplicate"
	ReasonFuture      Reason = "future"
	// ReasonInvalidAction: the source maps an action field and the
	// record's value is not one of its documented values.
	ReasonInvalidAction Reason = "invalid_action"
	// ReasonUnknownTrade: a cancel or correction names a trade id that no
	// window inside the revision horizon holds (or the processor keeps no
	// revision horizon).
	ReasonUnknownTrade Reason = "unknown_trade"
	// ReasonBeyondHorizon: a cancel or correction for a window that closed
	// longer ago than the revision horizon.
	ReasonBeyondHorizon Reason = "beyond_horizon"
	// ReasonInternalError: the processor panicked on the record twice; the
	// engine skips it so that one record cannot stop its partition.
	ReasonInternalError Reason = "internal_error"
)

// Reasons lists every reason code (for metrics and docs).
var Reasons = []Reason{ReasonMalformedJSON, ReasonNotObject, ReasonMissingField, ReasonInvalidPrice,
	ReasonInvalidQty, ReasonInvalidTS, ReasonInvalidSide, ReasonOversized, ReasonUnknownKey, ReasonInvalidKey, ReasonKeyMismatch, ReasonLate, ReasonDuplicate, ReasonFuture,
	ReasonInvalidAction, ReasonUnknownTrade, ReasonBeyondHorizon, ReasonInternalError}

// Record is one input record and where it came from.
type Record struct {
	Partition int32
	Offset    int64
	// Key is the record's partition key: the Kafka record key, or the
	// Kinesis partition key. With DecoderConfig.KeyCheck it must equal the
	// record's key field (nil never does). Rollups ignore it.
	Key   []byte
	Value []byte
	// Timestamp is the record's ingestion time in Unix ms (the Kafka record
	// timestamp, the Kinesis approximate arrival time); 0 when unknown. Only
	// time-driven processors (silence) read it.
	Timestamp int64
}

// Rejection is a record that changed no candle, with the reason why. The
// engine writes it to the dead-letter topic.
type Rejection struct {
	Reason    Reason
	Detail    string // human-readable context, e.g. `price "abc" is not a number`
	Key       string // the record's key when it was readable
	Partition int32
	Offset    int64
	Value     []byte // the original record (not copied: valid until the next poll)
}

// Output collects what processing produced. The caller reads and resets it.
type Output struct {
	Candles  []candle.Candle // closed candles, each key's in window order
	Events   []Event         // other outputs (silence alerts), in emission order
	Rejected []Rejection
	// Quiet marks, for the rollups built from these candles: deliver them
	// (Rollup.Quiet) after every candle of the same Output.
	Quiet []QuietMark
}

// QuietMark says that Key, which went quiet (its run of candles ended
// after max_idle, or without gap fill it has no window open before Until),
// has every candle opening before Until emitted: a rollup closes its open
// window of Key if it ends by Until, as direct aggregation closes it, and
// frees Key's state when nothing is left open.
type QuietMark struct {
	Key   string
	Until int64 // Unix ms, a window boundary of a rollup timeframe
}

// Event is an output record that is not a candle: a JSON object written to
// the processor's output topic with Key as the record key, in the same
// transaction as the candles, state and input offsets.
type Event struct {
	Key   string
	Value []byte // a JSON object; owned by the Output until Reset
}

// Reset empties o, keeping its capacity.
func (o *Output) Reset() {
	o.Candles, o.Events, o.Rejected, o.Quiet = o.Candles[:0], o.Events[:0], o.Rejected[:0], o.Quiet[:0]
}

// Processor is what the engine runs for one input partition: a candle
// aggregator, a rollup or a silence timer processor. It is single-goroutine
// and deterministic given its input, restored state and Clock.
type Processor interface {
	// Process handles one input record, appending what it produced to out.
	Process(rec Record, out *Output)
	// Tick lets time-driven work happen without input (live mode). The
	// engine calls it only while the partition is caught up with its input.
	Tick(out *Output)
	// ResetIdle says the partition is behind its input (a backlog, a slow
	// fetch): time-driven work must not count the quiet time so far.
	ResetIdle()
	// Changes reports the state entries changed since the last call (val
	// nil = deleted); the engine checkpoints them with the input offsets.
	Changes(fn func(key, val []byte))
	// Restore loads one checkpointed entry into a fresh processor.
	Restore(key, val []byte) error
	// Active calls fn with the open candles changed since the last call
	// (live charts); processors without candles do nothing.
	Active(fn func(c *candle.Candle))
}

// Clock tells the wall time. Processors never read time.Now themselves: live
// runs pass the system clock, replays and tests a fixed one.
type Clock = clock.Clock

// FixedClock is a Clock that always says T (replay: the time it started).
type FixedClock = clock.Fixed

// SystemClock is the wall clock.
type SystemClock = clock.System
