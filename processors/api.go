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
	ReasonInvalidKey    Reason = "invalid_key" // invalid UTF-8 or a control character in the key
	ReasonLate          Reason = "late"
	ReasonDuplicate     Reason = "duplicate"
	ReasonFuture        Reason = "future"
)

// Reasons lists every reason code (for metrics and docs).
var Reasons = []Reason{ReasonMalformedJSON, ReasonNotObject, ReasonMissingField, ReasonInvalidPrice,
	ReasonInvalidQty, ReasonInvalidTS, ReasonOversized, ReasonUnknownKey, ReasonInvalidKey, ReasonLate, ReasonDuplicate, ReasonFuture}

// Record is one input record and where it came from.
type Record struct {
	Partition int32
	Offset    int64
	Value     []byte
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
}

// Reset empties o, keeping its capacity.
func (o *Output) Reset() { o.Candles, o.Rejected = o.Candles[:0], o.Rejected[:0] }

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
