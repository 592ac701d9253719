package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/processors"
)

// Quiet records carry a processor's QuietMarks to the rollups built from its
// candles. They are ordinary records on the output topic (not Kafka
// transaction control records), between the candles: keyed by symbol (so they land on the partition of the key's
// candles, after them), with the header QuietHeader: QuietKind and a JSON
// body that starts with quietPrefix:
//
//	{"kind":"quiet","symbol":"BTC-USD","timeframe":"1m","quiet_until":1700000300000}
//
// The body has no window (open_time/close_time), so a reader that does not
// know the record cannot mistake it for a candle: candle.ParseJSON refuses it.
// Rollup stages recognise the body itself (Kinesis and in-process topics
// have no headers); sinks and other readers skip records with the header
// or the body (IsQuietRecord).
const (
	QuietHeader = "kandle-kind"
	QuietKind   = "quiet"
)

var quietPrefix = []byte(`{"kind":"quiet",`)

// QuietRecord is the decoded body of a quiet record.
type QuietRecord struct {
	Kind       string `json:"kind"`
	Symbol     string `json:"symbol"`
	Timeframe  string `json:"timeframe"`
	QuietUntil int64  `json:"quiet_until"`
}

// appendQuiet appends the body of the quiet record of m, whose candles are of
// timeframe tf.
func appendQuiet(b []byte, tf string, m processors.QuietMark) []byte {
	b = append(b, quietPrefix...)
	b = append(b, `"symbol":`...)
	b = strconv.AppendQuote(b, m.Key)
	b = append(b, `,"timeframe":`...)
	b = strconv.AppendQuote(b, tf)
	b = append(b, `,"quiet_until":`...)
	b = strconv.AppendInt(b, m.Until, 10)
	return append(b, '}')
}

// isQuietValue reports whether a record value is a quiet record's body.
func isQuietValue(v []byte) bool { return bytes.HasPrefix(v, quietPrefix) }

// IsQuietRecord reports whether r is a quiet record (a control record of the
// output topics, not a candle): by its header, or by its body.
func IsQuietRecord(r *kgo.Record) bool {
	for _, h := range r.Headers {
		if h.Key == QuietHeader {
			return string(h.Value) == QuietKind
		}
	}
	return isQuietValue(r.Value)
}

// DecodeQuiet reads the body of a quiet record.
func DecodeQuiet(v []byte) (QuietRecord, error) {
	var q QuietRecord
	if !isQuietValue(v) {
		return q, fmt.Errorf("not a quiet record: it must start with %s", quietPrefix)
	}
	if err := json.Unmarshal(v, &q); err != nil {
		return q, fmt.Errorf("quiet record: %w", err)
	}
	if q.Symbol == "" || q.Timeframe == "" {
		return q, fmt.Errorf("quiet record: missing symbol or timeframe")
	}
	return q, nil
}

// writesQuiet reports whether s's outputs carry quiet records: only when
// rollups read them.
func (s *stageSpec) writesQuiet() bool { return len(s.rollups) > 0 }

// quietRecords calls fn with the Kafka record of every quiet mark in out, in
// order, when s writes quiet records. Call it after producing out's candles.
func (s *stageSpec) quietRecords(out *processors.Output, fn func(r *kgo.Record)) {
	if !s.writesQuiet() {
		return
	}
	tf := s.Timeframe.String()
	for _, m := range out.Quiet {
		fn(&kgo.Record{Topic: s.OutputTopic, Key: []byte(m.Key), Value: appendQuiet(nil, tf, m),
			Headers: []kgo.RecordHeader{{Key: QuietHeader, Value: []byte(QuietKind)}}})
	}
}

// quieter is what a rollup offers for quiet marks.
type quieter interface {
	Quiet(m processors.QuietMark, out *processors.Output)
}

// process hands one input record to proc: a quiet record of a rollup's input
// to Rollup.Quiet, anything else to Process. A quiet record that cannot be
// read, or is of another timeframe than the rollup reads, is dead-lettered
// like a malformed candle.
func (s *stageSpec) process(proc processor, rec processors.Record, out *processors.Output) {
	q, ok := proc.(quieter)
	if !s.Rollup || !ok || !isQuietValue(rec.Value) {
		proc.Process(rec, out)
		return
	}
	m, err := DecodeQuiet(rec.Value)
	if err == nil && m.Timeframe != s.from.String() {
		err = fmt.Errorf("quiet record of timeframe %q, this rollup reads %q: check the rollup's input topic", m.Timeframe, s.from)
	}
	if err != nil {
		out.Rejected = append(out.Rejected, processors.Rejection{Reason: processors.ReasonMalformedJSON,
			Detail: err.Error(), Key: m.Symbol, Partition: rec.Partition, Offset: rec.Offset, Value: rec.Value})
		return
	}
	q.Quiet(processors.QuietMark{Key: m.Symbol, Until: m.QuietUntil}, out)
}

// rollupsOf returns the timeframes of every rollup built from stage name's
// candles, directly or through other rollups.
func (g *graph) rollupsOf(name string) []candle.Timeframe {
	var out []candle.Timeframe
	for _, d := range g.downstream(name) {
		out = append(out, d.Timeframe)
		out = append(out, g.rollupsOf(d.Name)...)
	}
	return out
}

// quietOutput is a replay output that also writes quiet records, so rollup
// stages reading the replayed topics close quiet keys as live ones do.
type quietOutput interface {
	Quiet(stage, topic, key string, value []byte) error
}

// Quiet produces a quiet record (value from the pipeline) to topic.
func (o *TopicOutput) Quiet(_ string, topic, key string, value []byte) error {
	o.cl.Produce(context.Background(), &kgo.Record{Topic: topic, Key: []byte(key), Value: value,
		Headers: []kgo.RecordHeader{{Key: QuietHeader, Value: []byte(QuietKind)}}}, o.promise)
	return o.err
}
