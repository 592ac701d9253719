package processors

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// MetricsConfig configures a MultiMetric reader.
type MetricsConfig struct {
	Key, Time      string   // record fields (dotted paths) of the device id and event time
	Values         []string // metric fields (dotted paths), each its own series
	Symbols        []string // optional whitelist of devices
	MaxRecordBytes int
	// KeyCheck rejects (key_mismatch) a reading whose record key is not its
	// device id, as DecoderConfig.KeyCheck does for trades.
	KeyCheck bool
}

// MetricKeySep joins a device and a metric into a series key: "d1#temperature".
const MetricKeySep = "#"

// MultiMetric feeds the candle aggregator one series per metric of a
// reading: a record {"device":"d1","ts":…,"temperature":21.5,"humidity":40}
// becomes the readings d1#temperature = 21.5 and d1#humidity = 40, each
// with its own candles (and rollups). Values keep their exact decimal text.
// A metric missing from a reading is skipped for that metric only; a
// reading with none of them is rejected (missing_field); a metric that is
// not a positive number is rejected with reason invalid_price and the
// metric named in the detail, while the reading's other metrics count.
//
// The single-value path does not pass through here: a source without
// values keeps the aggregator's own decoder (BenchmarkAggregatorCore).
type MultiMetric struct {
	*Aggregator
	key, ts   []string
	values    [][]string
	names     []string
	whitelist map[string]bool
	maxSize   int
	keyCheck  bool
	buf       []byte
	sub       Output
}

// NewMultiMetric returns a multi-metric reader over a fresh aggregator of
// cfg (its Decoder is replaced by one for the per-metric records).
func NewMultiMetric(mc MetricsConfig, cfg CandleConfig, clock Clock) (*MultiMetric, error) {
	if len(mc.Values) == 0 {
		return nil, errors.New("multi-metric: no values listed")
	}
	if mc.Key == "" || mc.Time == "" {
		return nil, errors.New("multi-metric: the key and time fields must be named")
	}
	dec, err := NewDecoder(DecoderConfig{Fields: Fields{Key: "k", Time: "t", Price: "v"}})
	if err != nil {
		return nil, err
	}
	cfg.Decoder, cfg.Dedupe = dec, false // readings have no ids
	a, err := NewAggregator(cfg, clock)
	if err != nil {
		return nil, err
	}
	m := &MultiMetric{Aggregator: a, key: strings.Split(mc.Key, "."), ts: strings.Split(mc.Time, "."), maxSize: mc.MaxRecordBytes, keyCheck: mc.KeyCheck}
	for _, v := range mc.Values {
		path := strings.Split(v, ".")
		m.values, m.names = append(m.values, path), append(m.names, v)
	}
	if len(mc.Symbols) > 0 {
		m.whitelist = map[string]bool{}
		for _, s := range mc.Symbols {
			m.whitelist[s] = true
		}
	}
	return m, nil
}

// Process splits one reading into its metrics' series.
func (m *MultiMetric) Process(rec Record, out *Output) {
	obj, rawKey, ok := readReading(rec, m.maxSize, m.key, out)
	if !ok {
		return
	}
	var dev string
	if json.Unmarshal(rawKey, &dev) != nil || dev == "" || strings.Contains(dev, MetricKeySep) {
		reject(out, rec, Rejection{Reason: ReasonMissingField, Detail: fmt.Sprintf("field %q must be a non-empty string without %q", strings.Join(m.key, "."), MetricKeySep)})
		return
	}
	if m.whitelist != nil && !m.whitelist[dev] {
		reject(out, rec, Rejection{Reason: ReasonUnknownKey, Key: dev, Detail: fmt.Sprintf("device %q is not in the symbols list", dev)})
		return
	}
	if m.keyCheck && string(rec.Key) != dev {
		reject(out, rec, readingKeyMismatch(rec.Key, m.key, dev))
		return
	}
	rawTS, ok := lookup(obj, m.ts)
	if !ok {
		reject(out, rec, Rejection{Reason: ReasonMissingField, Key: dev, Detail: fmt.Sprintf("field %q is missing", strings.Join(m.ts, "."))})
		return
	}
	found := 0
	for i, path := range m.values {
		raw, ok := lookup(obj, path)
		if !ok {
			continue // this metric only
		}
		found++
		b := appendStr(append(m.buf[:0], `{"k":`...), dev+MetricKeySep+m.names[i])
		b = append(append(b, `,"t":`...), rawTS...)
		b = append(append(b, `,"v":`...), raw...)
		m.buf = append(b, '}')
		m.sub.Reset()
		m.sub.Candles, m.sub.Quiet = out.Candles, out.Quiet
		m.Aggregator.Process(Record{Partition: rec.Partition, Offset: rec.Offset, Value: m.buf, Timestamp: rec.Timestamp}, &m.sub)
		out.Candles, out.Quiet = m.sub.Candles, m.sub.Quiet
		if len(m.sub.Rejected) == 0 {
			continue
		}
		r := m.sub.Rejected[0]
		r.Value, r.Key = rec.Value, dev
		switch r.Reason {
		case ReasonInvalidPrice:
			r.Detail = fmt.Sprintf("metric %q: %s", m.names[i], strings.Replace(r.Detail, `"v"`, fmt.Sprintf("%q", m.names[i]), 1))
			out.Rejected = append(out.Rejected, r)
		default: // time, future, late: the same for every metric of the reading
			r.Detail = strings.Replace(r.Detail, `"t"`, fmt.Sprintf("%q", strings.Join(m.ts, ".")), 1)
			out.Rejected = append(out.Rejected, r)
			return
		}
	}
	if found == 0 {
		reject(out, rec, Rejection{Reason: ReasonMissingField, Key: dev, Detail: "none of the metrics " + strings.Join(m.names, ", ") + " is present"})
	}
}

// Metrics returns the metric names in order.
func (m *MultiMetric) Metrics() []string { return slices.Clone(m.names) }
