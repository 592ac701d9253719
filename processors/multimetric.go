package processors

import (
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
	dec    readingDecoder
	values [][]string
	names  []string
	buf    []byte
	sub    Output
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
	m := &MultiMetric{Aggregator: a, dec: newReadingDecoder(mc.Key, mc.Time, mc.Symbols, mc.MaxRecordBytes, mc.KeyCheck)}
	for _, v := range mc.Values {
		path := strings.Split(v, ".")
		m.values, m.names = append(m.values, path), append(m.names, v)
	}
	return m, nil
}

// Process splits one reading into its metrics' series.
func (m *MultiMetric) Process(rec Record, out *Output) {
	rd, ok := m.dec.decode(rec, out)
	if !ok {
		return
	}
	dev := rd.id
	if strings.Contains(dev, MetricKeySep) {
		reject(out, rec, Rejection{Reason: ReasonMissingField, Key: dev, Detail: fmt.Sprintf("field %q must not contain %q (it joins a device and a metric)", m.dec.keyName, MetricKeySep)})
		return
	}
	found := 0
	for i, path := range m.values {
		raw, ok := lookup(rd.obj, path)
		if !ok {
			continue // this metric only
		}
		found++
		b := appendStr(append(m.buf[:0], `{"k":`...), dev+MetricKeySep+m.names[i])
		b = append(append(b, `,"t":`...), rd.rawTS...)
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
		default: // future, late: the same for every metric of the reading
			r.Detail = strings.Replace(r.Detail, `"t"`, fmt.Sprintf("%q", m.dec.tsName), 1)
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
