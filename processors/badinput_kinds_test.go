package processors

import (
	"fmt"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
)

// TestBadInputSameForEveryKind: a trade (candles), a multi-metric reading
// and a silence reading with the same bad key or time are rejected with the
// same reason code, and the same detail for keys: one decoding path for
// keys, times and bad input, whatever the kind. A key with a control
// character never reaches the silence timers (no level fires for it).
func TestBadInputSameForEveryKind(t *testing.T) {
	tf, _ := candle.ParseTimeframe("10s", nil)
	newKinds := func(t *testing.T, symbols []string) map[string]Processor {
		dec, err := NewDecoder(DecoderConfig{Fields: Fields{Key: "device", Time: "ts", Price: "temperature"}, Symbols: symbols, MaxRecordBytes: 200, KeyCheck: true})
		if err != nil {
			t.Fatal(err)
		}
		agg, err := NewAggregator(CandleConfig{Timeframe: tf, Decoder: dec}, FixedClock{})
		if err != nil {
			t.Fatal(err)
		}
		mm, err := NewMultiMetric(MetricsConfig{Key: "device", Time: "ts", Values: []string{"temperature"}, Symbols: symbols, MaxRecordBytes: 200, KeyCheck: true},
			CandleConfig{Timeframe: tf}, FixedClock{})
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[string]Processor{"candles": agg, "multi-metric": mm}
		if symbols == nil { // silence has no symbols list
			sil, err := NewSilence(SilenceConfig{Levels: []SilenceLevel{{Name: "l1", After: time.Second}}, Key: "device", Time: "ts", MaxRecordBytes: 200, KeyCheck: true}, FixedClock{})
			if err != nil {
				t.Fatal(err)
			}
			kinds["silence"] = sil
		}
		return kinds
	}
	const ts = `"2026-01-15T10:00:05Z"`
	cases := []struct {
		name, key, value string
		want             Reason
	}{
		{"control character", "dev\x01ctl", `{"device":"dev\u0001ctl","ts":` + ts + `,"temperature":1}`, ReasonInvalidKey},
		{"DEL", "dev\x7f", `{"device":"dev\u007f","ts":` + ts + `,"temperature":1}`, ReasonInvalidKey},
		{"raw control byte", "a\tb", "{\"device\":\"a\tb\",\"ts\":" + ts + `,"temperature":1}`, ReasonMalformedJSON},
		{"lone surrogate", "dev\xed\xa0\x80", `{"device":"dev\ud800","ts":` + ts + `,"temperature":1}`, ReasonInvalidKey},
		{"replacement character", "dev\ufffd", `{"device":"dev\ufffd","ts":` + ts + `,"temperature":1}`, ReasonInvalidKey},
		{"empty key", "", `{"device":"","ts":` + ts + `,"temperature":1}`, ReasonMissingField},
		{"boolean key", "true", `{"device":true,"ts":` + ts + `,"temperature":1}`, ReasonMissingField},
		{"no key", "", `{"ts":` + ts + `,"temperature":1}`, ReasonMissingField},
		{"no time", "d1", `{"device":"d1","temperature":1}`, ReasonMissingField},
		{"unreadable time", "d1", `{"device":"d1","ts":"15/01/2026 10:00","temperature":1}`, ReasonInvalidTS},
		{"boolean time", "d1", `{"device":"d1","ts":true,"temperature":1}`, ReasonInvalidTS},
		{"escaped time", "d1", `{"device":"d1","ts":"2026-01-15T10:00:05\u005a","temperature":1}`, ""},
		{"numeric key", "42", `{"device":42,"ts":` + ts + `,"temperature":1}`, ""},
		{"escaped key", "d/1", `{"device":"d\/1","ts":` + ts + `,"temperature":1}`, ""},
		{"escaped key and time", "d\x01", `{"device":"d\u0001","ts":"2026-01-15T10:00:05\u005a","temperature":1}`, ReasonInvalidKey},
		{"key mismatch", "d2", `{"device":"d1","ts":` + ts + `,"temperature":1}`, ReasonKeyMismatch},
		{"not an object", "d1", `[1]`, ReasonNotObject},
		{"malformed", "d1", `{"device":`, ReasonMalformedJSON},
		{"oversized", "d1", fmt.Sprintf(`{"device":"d1","ts":%s,"temperature":1,"pad":%q}`, ts, make([]byte, 200)), ReasonOversized},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			details := map[string]string{}
			for kind, p := range newKinds(t, nil) {
				var out Output
				p.Process(Record{Key: []byte(c.key), Value: []byte(c.value), Timestamp: 1768471205000}, &out)
				if sil, ok := p.(*Silence); ok {
					sil.AdvanceTo(1768471205000+time.Hour.Milliseconds(), &out)
				}
				var got Reason
				if len(out.Rejected) > 0 {
					got = out.Rejected[0].Reason
					details[kind] = out.Rejected[0].Detail
				}
				if len(out.Rejected) > 1 || got != c.want {
					t.Errorf("%s: rejected %+v, want reason %q", kind, out.Rejected, c.want)
				}
				if c.want != "" && len(out.Events) > 0 {
					t.Errorf("%s: a rejected reading made events %q", kind, out.Events)
				}
			}
			if c.want == ReasonInvalidKey && (details["candles"] != details["silence"] || details["candles"] != details["multi-metric"]) {
				t.Errorf("details differ: %q", details)
			}
		})
	}
	// unknown_key: the symbols list holds for readings as for trades.
	for kind, p := range newKinds(t, []string{"d1"}) {
		var out Output
		p.Process(Record{Key: []byte("d9"), Value: []byte(`{"device":"d9","ts":` + ts + `,"temperature":1}`)}, &out)
		if len(out.Rejected) != 1 || out.Rejected[0].Reason != ReasonUnknownKey {
			t.Errorf("%s: unlisted key: %+v", kind, out.Rejected)
		}
	}
}
