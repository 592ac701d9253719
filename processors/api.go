package processors

import (
	"time"

	"github.com/kandle/kandle/candle"
)

// Reason is a stable code saying why a record was rejected. Reason codes are
// part of the dead-letter contract: never rename one.
type Reason string

// The reason codes of DESIGN.md → Bad input.
const (
	ReasonMalformedJSON Reason = "malformed_json"
	ReasonNotObject     Reason = "not_object"
	ReasonMissingField  Reason = "missing_field"
	ReasonInvalidPrice  Reason = "invalid_price"
	ReasonInvalidQty    Reason = "invalid_qty"
	ReasonInvalidTS     Reason = "invalid_ts"
	ReasonOversized     Reason = "oversized"
	ReasonUnknownKey    Reason = "unknown_key"
	ReasonKeyMismatch   Reason = "key_mismatch"
	ReasonLate          Reason = "late"
	ReasonDuplicate     Reason = "duplicate"
	ReasonFuture        Reason = "future"
)

// Reasons lists every reason code (for metrics and docs).
var Reasons = []Reason{ReasonMalformedJSON, ReasonNotObject, ReasonMissingField, ReasonInvalidPrice,
	ReasonInvalidQty, ReasonInvalidTS, ReasonOversized, ReasonUnknownKey, ReasonKeyMismatch, ReasonLate, ReasonDuplicate, ReasonFuture}

// Record is one input record and where it came from.
type Record struct {
	Partition int32
	Offset    int64
	// Key is the record's partition key: the Kafka record key, or the
	// Kinesis partition key. With DecoderConfig.KeyCheck it must equal the
	// record's key field (nil never does). Rollups ignore it.
	Key   []byte
	Value []byte
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
	Rejected []Rejection
	// Quiet marks, for the rollups built from these candles: deliver them
	// (Rollup.Quiet) after every candle of the same Output.
	Quiet []QuietMark
}

// QuietMark says that Key, which went quiet (its run of candles ended
// after max_idle), has every candle opening before Until emitted: a rollup
// closes its open window of Key if it ends by Until, as direct aggregation
// closes it, and frees Key's state when nothing is left open.
type QuietMark struct {
	Key   string
	Until int64 // Unix ms, a window boundary of a rollup timeframe
}

// Reset empties o, keeping its capacity.
func (o *Output) Reset() {
	o.Candles, o.Rejected, o.Quiet = o.Candles[:0], o.Rejected[:0], o.Quiet[:0]
}

// Clock tells the wall time. Processors never read time.Now themselves: live
// runs pass the system clock, replays and tests a fixed one.
type Clock interface{ Now() time.Time }

// FixedClock is a Clock that always says T (replay: the time it started).
type FixedClock struct{ T time.Time }

// Now returns c.T.
func (c FixedClock) Now() time.Time { return c.T }

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }
