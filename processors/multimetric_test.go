package processors

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
)

func newTestMulti(t *testing.T) *MultiMetric {
	t.Helper()
	tf, err := candle.ParseTimeframe("1m", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMultiMetric(MetricsConfig{Key: "device", Time: "ts", Values: []string{"temperature", "humidity", "battery"}},
		CandleConfig{Timeframe: tf, Lateness: 2 * time.Second, GapFill: true, MaxIdle: 24 * time.Hour}, FixedClock{T: baseDay})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestMultiMetricSeries: each metric is its own series keyed device#metric
// with exact decimals; a missing metric is skipped for that metric only; a
// non-numeric metric is dead-lettered with the metric named while the
// reading's other metrics still count.
func TestMultiMetricSeries(t *testing.T) {
	m := newTestMulti(t)
	var out Output
	ts := baseDay.UnixMilli()
	for i, r := range []string{
		`{"device":"d1","ts":%d,"temperature":21.1,"humidity":"40","battery":0.1}`,
		`{"device":"d1","ts":%d,"temperature":21.2,"battery":0.1}`,                 // no humidity
		`{"device":"d1","ts":%d,"temperature":"warm","humidity":41,"battery":0.1}`, // bad temperature
		`{"device":"d1","ts":%d}`, // no metric at all
	} {
		m.Process(Record{Offset: int64(i), Value: fmt.Appendf(nil, r, ts+int64(i)*1000)}, &out)
	}
	if len(out.Rejected) != 2 {
		t.Fatalf("rejections %+v, want the bad temperature and the empty reading", out.Rejected)
	}
	if r := out.Rejected[0]; r.Reason != ReasonInvalidPrice || r.Offset != 2 || r.Key != "d1" || !strings.Contains(r.Detail, `metric "temperature"`) || !strings.Contains(string(r.Value), "warm") {
		t.Errorf("bad metric rejection = %+v", r)
	}
	if r := out.Rejected[1]; r.Reason != ReasonMissingField || r.Offset != 3 {
		t.Errorf("empty reading rejection = %+v", r)
	}
	m.Process(Record{Offset: 9, Value: fmt.Appendf(nil, `{"device":"d1","ts":%d,"temperature":1}`, ts+70_000)}, &out)
	got := map[string]candle.Candle{}
	for _, c := range out.Candles {
		got[c.Symbol] = c
	}
	want := map[string]struct{ open, close, volume, quote string }{
		"d1#temperature": {"21.1", "21.2", "2", "42.3"},
		"d1#humidity":    {"40", "41", "2", "81"},
		"d1#battery":     {"0.1", "0.1", "3", "0.3"},
	}
	for key, w := range want {
		c, ok := got[key]
		if !ok {
			t.Errorf("no candle for %s; got %v", key, out.Candles)
			continue
		}
		if c.Open.String() != w.open || c.Close.String() != w.close || c.Volume.String() != w.volume || c.QuoteVolume.String() != w.quote {
			t.Errorf("%s = o %s c %s v %s q %s, want %+v", key, c.Open, c.Close, c.Volume, c.QuoteVolume, w)
		}
	}
	if len(got) != 3 {
		t.Errorf("candles for %d series, want 3: %v", len(got), out.Candles)
	}
}

// TestMultiMetricBadTimeOnce: a reading whose time is bad is rejected once,
// not once per metric.
func TestMultiMetricBadTimeOnce(t *testing.T) {
	m := newTestMulti(t)
	var out Output
	m.Process(Record{Value: []byte(`{"device":"d1","ts":"soon","temperature":1,"humidity":2}`)}, &out)
	if len(out.Rejected) != 1 || out.Rejected[0].Reason != ReasonInvalidTS || !strings.Contains(out.Rejected[0].Detail, `"ts"`) {
		t.Fatalf("rejections %+v, want one invalid_ts naming ts", out.Rejected)
	}
}

// TestMultiMetricKeyCheck: with KeyCheck a reading is accepted only when its
// record key is its device id (not the device#metric series key); a missing
// or different key is key_mismatch, once per reading, and counts nowhere.
func TestMultiMetricKeyCheck(t *testing.T) {
	tf, err := candle.ParseTimeframe("1m", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMultiMetric(MetricsConfig{Key: "device", Time: "ts", Values: []string{"temperature", "humidity"}, KeyCheck: true},
		CandleConfig{Timeframe: tf, Lateness: 2 * time.Second, GapFill: true, MaxIdle: 24 * time.Hour}, FixedClock{T: baseDay})
	if err != nil {
		t.Fatal(err)
	}
	var out Output
	ts := baseDay.UnixMilli()
	for i, key := range [][]byte{[]byte("d1"), []byte("d2"), nil, []byte("d1#temperature")} {
		m.Process(Record{Offset: int64(i), Key: key, Value: fmt.Appendf(nil, `{"device":"d1","ts":%d,"temperature":%d,"humidity":40}`, ts+int64(i), 20+i)}, &out)
	}
	if len(out.Rejected) != 3 {
		t.Fatalf("rejections %+v, want 3 key_mismatch (d2, none, the series key)", out.Rejected)
	}
	for i, r := range out.Rejected {
		if r.Reason != ReasonKeyMismatch || r.Offset != int64(i+1) || r.Key != "d1" {
			t.Errorf("rejection %d = %+v, want key_mismatch of offset %d", i, r, i+1)
		}
	}
	m.Process(Record{Offset: 9, Key: []byte("d1"), Value: fmt.Appendf(nil, `{"device":"d1","ts":%d,"temperature":1,"humidity":1}`, ts+70_000)}, &out)
	for _, c := range out.Candles {
		if c.Trades != 1 || c.Open.String() != map[string]string{"d1#temperature": "20", "d1#humidity": "40"}[c.Symbol] {
			t.Errorf("candle %s: trades %d open %s, want only the keyed reading", c.Symbol, c.Trades, c.Open)
		}
	}
	if len(out.Candles) != 2 {
		t.Errorf("%d candles, want one per metric: %v", len(out.Candles), out.Candles)
	}
}
