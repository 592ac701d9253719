package candle

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/kandle/kandle/decimal"
)

// strictJSON decodes b with encoding/json into a generic value and fails
// unless b is valid JSON.
func strictJSON(t *testing.T, b []byte) map[string]any {
	t.Helper()
	if !json.Valid(b) {
		t.Fatalf("not valid JSON: %q", b)
	}
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("encoding/json cannot read %q: %v", b, err)
	}
	return m
}

// Every symbol, whatever its bytes, is written as a JSON string a strict
// parser reads; valid UTF-8 reads back unchanged, and invalid bytes are
// escaped (not replaced by U+FFFD) so two different symbols stay different.
func TestAppendJSONStringStrict(t *testing.T) {
	for _, s := range []string{"BTC", "a\"b\\c", "\x00\x01\x1f\x7f", "tab\there\nnl\r", "\u2028\u2029", "é€😀",
		"\xff", "\xc3", "\xed\xa0\x80", "ok\xffok"} {
		b := AppendJSONString(nil, s)
		var got string
		if !json.Valid(b) || json.Unmarshal(b, &got) != nil {
			t.Fatalf("AppendJSONString(%q) = %s: not a JSON string", s, b)
		}
		if utf8.ValidString(s) && got != s {
			t.Errorf("AppendJSONString(%q) reads back as %q", s, got)
		}
		if !utf8.ValidString(s) && bytes.ContainsRune([]byte(got), utf8.RuneError) {
			t.Errorf("AppendJSONString(%q) replaced invalid bytes with U+FFFD: %q", s, got)
		}
	}
	if a, b := AppendJSONString(nil, "\xff"), AppendJSONString(nil, "\xfe"); bytes.Equal(a, b) {
		t.Errorf("two different invalid symbols merged: %s", a)
	}
}

// Wide volumes (more than 18 places, beyond 128 bits) survive the wire
// format both ways, through the fast decoder and through encoding/json.
func TestJSONWideVolumes(t *testing.T) {
	c := Candle{Symbol: "TOKEN/é\"€", Timeframe: "1m", OpenTime: 60000, CloseTime: 120000,
		Open: decimal.MustParse("0.000000000000000001"), High: decimal.MustParse("8356.7124"),
		Low: decimal.MustParse("0.000000000000000001"), Close: decimal.MustParse("8356.7124"),
		Volume:      decimal.MustParseSum("340282366920938463463.374607431768211454"),
		QuoteVolume: decimal.MustParseSum("515399.785058469582700587000000000000000001"), Trades: 2}
	b := c.AppendJSON(nil)
	m := strictJSON(t, b)
	if m["quote_volume"] != c.QuoteVolume.String() || m["symbol"] != c.Symbol {
		t.Fatalf("encoding/json reads %v from %s", m, b)
	}
	got, err := ParseJSON(b)
	if err != nil || !got.Equal(&c) {
		t.Fatalf("ParseJSON(%s) = %+v, %v", b, got, err)
	}
	var viaStd Candle
	if err := json.Unmarshal(b, &viaStd); err != nil || !viaStd.Equal(&c) {
		t.Fatalf("json.Unmarshal(%s) = %+v, %v", b, viaStd, err)
	}
}

// A candle whose symbol or timeframe is not printable UTF-8 is refused:
// kandle never writes one, and reading it would merge or garble names.
func TestParseJSONRejectsBadNames(t *testing.T) {
	for _, in := range []string{
		`{"symbol":"A\u0001","timeframe":"1m","open_time":0,"close_time":1}`,
		"{\"symbol\":\"A\x01\",\"timeframe\":\"1m\",\"open_time\":0,\"close_time\":1}",
		"{\"symbol\":\"A\xff\",\"timeframe\":\"1m\",\"open_time\":0,\"close_time\":1}",
		`{"symbol":"A\ud800","timeframe":"1m","open_time":0,"close_time":1}`,
		`{"symbol":"A","timeframe":"1m\u0000","open_time":0,"close_time":1}`,
		"{\"symbol\":\"A\",\"timeframe\":\"\x81\",\"close_time\":1}",
	} {
		if c, err := ParseJSON([]byte(in)); err == nil {
			t.Errorf("ParseJSON(%q) accepted %+v", in, c)
		}
	}
}

// FuzzParseJSON is the candle decoder of rollup stages: it never panics,
// and whatever it accepts is written back as valid JSON that decodes to
// the same candle.
func FuzzParseJSON(f *testing.F) {
	c := Candle{Symbol: "BTC-USD", Timeframe: "1m", OpenTime: 60000, CloseTime: 120000,
		Open: decimal.MustParse("1.5"), High: decimal.MustParse("2"), Low: decimal.MustParse("0.1"),
		Close: decimal.MustParse("1"), Volume: decimal.MustParseSum("3"), QuoteVolume: decimal.MustParseSum("0.0000000000000000000001"), Trades: 3}
	f.Add(c.AppendJSON(nil))
	f.Add([]byte(`{"symbol":"E\u0054H","timeframe":"5m","open_time":300000,"close_time":600000,"open":"1","high":"1","low":"1","close":"1","volume":"0","quote_volume":"0","trades":0,"gap":true,"final":true}`))
	f.Add([]byte(`{"symbol":"X","timeframe":"1m","open_time":5,"close_time":5}`))
	f.Add([]byte(`{"symbol":"X","timeframe":"1m","open_time":0,"close_time":1,"volume":"1e300"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := ParseJSON(b)
		if err != nil {
			return
		}
		out := got.AppendJSON(nil)
		strictJSON(t, out)
		back, err := ParseJSON(out)
		if err != nil || !back.Equal(&got) {
			t.Fatalf("%s → %s → %+v, %v", b, out, back, err)
		}
	})
}

// FuzzParseEventTime: epoch milliseconds and RFC 3339 agree with the
// standard library, and nothing panics.
func FuzzParseEventTime(f *testing.F) {
	for _, s := range []string{"1767225600000", "0", "2026-01-01T00:00:00Z", "2026-01-01T09:00:00.123+09:00",
		"99999999999999999", "12345678", "-5", "2026-13-01T00:00:00Z", "1e3"} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, raw []byte, quoted bool) {
		ms, err := ParseEventTime(raw, quoted)
		if err != nil {
			return
		}
		if v, ok := ParseEpochMillis(raw); ok {
			if v != ms || v < 0 {
				t.Fatalf("%q: epoch ms %d, ParseEventTime %d", raw, v, ms)
			}
			return
		}
		if !quoted {
			t.Fatalf("%q accepted unquoted but is not epoch ms", raw)
		}
		tm, err := time.Parse(time.RFC3339Nano, string(raw))
		if err != nil || tm.UnixMilli() != ms {
			t.Fatalf("%q: ParseEventTime %d, time.Parse %v %v", raw, ms, tm, err)
		}
	})
}
