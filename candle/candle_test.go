package candle

import (
	"strings"
	"testing"
	"time"

	"github.com/kandle/kandle/decimal"
)

func ms(s string) int64 {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UnixMilli()
}

func utc(v int64) string { return time.UnixMilli(v).UTC().Format(time.RFC3339) }

func TestWindows(t *testing.T) {
	ny, _ := time.LoadLocation("America/New_York")
	seoul, _ := time.LoadLocation("Asia/Seoul")
	for _, tc := range []struct {
		tf        string
		loc       *time.Location
		at        string
		open, end string
	}{
		{"1m", nil, "2026-11-23T10:07:59Z", "2026-11-23T10:07:00Z", "2026-11-23T10:08:00Z"},
		{"5m", nil, "2026-11-23T10:05:00Z", "2026-11-23T10:05:00Z", "2026-11-23T10:10:00Z"},
		{"4h", nil, "2026-11-23T03:59:59Z", "2026-11-23T00:00:00Z", "2026-11-23T04:00:00Z"},
		{"1d", nil, "2026-11-23T23:59:59Z", "2026-11-23T00:00:00Z", "2026-11-24T00:00:00Z"},
		{"1w", nil, "2026-11-29T23:00:00Z", "2026-11-23T00:00:00Z", "2026-11-30T00:00:00Z"}, // Mon..Sun
		{"1M", nil, "2026-02-14T00:00:00Z", "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"},
		{"1d", seoul, "2026-11-23T14:59:59Z", "2026-11-22T15:00:00Z", "2026-11-23T15:00:00Z"},
		{"1m", seoul, "1969-12-31T23:59:30Z", "1969-12-31T23:59:00Z", "1970-01-01T00:00:00Z"},
		// DST in New York: 2026-03-08 is 23 hours long, 2026-11-01 is 25.
		{"1d", ny, "2026-03-08T12:00:00Z", "2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z"},
		{"1d", ny, "2026-11-01T12:00:00Z", "2026-11-01T04:00:00Z", "2026-11-02T05:00:00Z"},
		{"1w", ny, "2026-11-01T12:00:00Z", "2026-10-26T04:00:00Z", "2026-11-02T05:00:00Z"},
		{"1M", seoul, "2026-11-30T16:00:00Z", "2026-11-30T15:00:00Z", "2026-12-31T15:00:00Z"},
	} {
		tf, err := ParseTimeframe(tc.tf, tc.loc)
		if err != nil {
			t.Fatal(err)
		}
		open := tf.Start(ms(tc.at))
		if utc(open) != tc.open || utc(tf.End(open)) != tc.end {
			t.Errorf("%s in %v at %s: [%s, %s), want [%s, %s)", tc.tf, tc.loc, tc.at,
				utc(open), utc(tf.End(open)), tc.open, tc.end)
		}
	}
}

func TestParseTimeframeErrors(t *testing.T) {
	for _, s := range []string{"", "m", "0m", "-1m", "5x", "2w", "3M", "1.5h"} {
		if _, err := ParseTimeframe(s, nil); err == nil {
			t.Errorf("ParseTimeframe(%q) accepted", s)
		}
	}
}

func TestNests(t *testing.T) {
	seoul, _ := time.LoadLocation("Asia/Seoul")
	ny, _ := time.LoadLocation("America/New_York")
	kolkata, _ := time.LoadLocation("Asia/Kolkata")
	for _, tc := range []struct {
		sub, sup string
		loc      *time.Location
		ok       bool
		why      string
	}{
		{"1m", "5m", nil, true, ""}, {"5m", "15m", nil, true, ""}, {"15m", "1h", nil, true, ""},
		{"1h", "4h", nil, true, ""}, {"4h", "1d", nil, true, ""}, {"1d", "1w", nil, true, ""},
		{"1d", "1M", nil, true, ""}, {"1m", "1M", nil, true, ""},
		{"5m", "7m", nil, false, "not a multiple"}, {"1h", "1h", nil, false, "not a multiple"},
		{"1w", "1M", nil, false, "Monday"},
		{"4h", "1d", seoul, false, "15:00 UTC"}, {"1h", "1d", seoul, true, ""},
		{"1h", "1d", ny, true, ""}, {"4h", "1d", ny, false, "not a 4h boundary"},
		{"1h", "1d", kolkata, false, "boundary"}, {"30m", "1d", kolkata, true, ""},
		{"1d", "1w", seoul, true, ""}, {"1d", "3d", ny, true, ""}, {"2d", "1w", nil, false, ""},
	} {
		sub, _ := ParseTimeframe(tc.sub, tc.loc)
		sup, _ := ParseTimeframe(tc.sup, tc.loc)
		err := Nests(sub, sup)
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), tc.why)) {
			t.Errorf("Nests(%s, %s, %v) = %v, want ok=%v containing %q", tc.sub, tc.sup, tc.loc, err, tc.ok, tc.why)
		}
	}
}

func TestJSONRoundTrip(t *testing.T) {
	c := Candle{Symbol: `BTC/"USDT"`, Timeframe: "1m", OpenTime: 60000, CloseTime: 120000,
		Open: decimal.MustParse("1.5"), High: decimal.MustParse("2"), Low: decimal.MustParse("0.1"),
		Close: decimal.MustParse("1"), Volume: decimal.MustParseSum("1"), QuoteVolume: decimal.MustParseSum("1.23"),
		Trades: 10, Gap: false}
	b := c.AppendJSON(nil)
	want := `{"symbol":"BTC/\"USDT\"","timeframe":"1m","open_time":60000,"close_time":120000,"open":"1.5","high":"2","low":"0.1","close":"1","volume":"1","quote_volume":"1.23","trades":10,"gap":false}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	back, err := ParseJSON(b)
	if err != nil || back != c {
		t.Fatalf("round trip: %+v %v", back, err)
	}
}

// The taker volumes and trade ids are written when the series has them and
// read back exactly; a candle without them writes none of their members.
func TestJSONTakerAndIDs(t *testing.T) {
	c := Candle{Symbol: "BTC", Timeframe: "1m", OpenTime: 60000, CloseTime: 120000,
		Open: decimal.MustParse("2"), High: decimal.MustParse("2"), Low: decimal.MustParse("1"),
		Close: decimal.MustParse("1"), Volume: decimal.MustParseSum("0.3"), QuoteVolume: decimal.MustParseSum("0.4"),
		Trades: 2, Taker: true, TakerBuyVolume: decimal.MustParseSum("0.1"),
		TakerBuyQuoteVolume: decimal.MustParseSum("0.000000000000000001000000000000000001"),
		FirstTradeID:        "100", LastTradeID: `x"7`}
	want := `{"symbol":"BTC","timeframe":"1m","open_time":60000,"close_time":120000,"open":"2","high":"2","low":"1","close":"1",` +
		`"volume":"0.3","quote_volume":"0.4","taker_buy_base_volume":"0.1","taker_buy_quote_volume":"0.000000000000000001000000000000000001",` +
		`"trades":2,"first_trade_id":"100","last_trade_id":"x\"7","gap":false}`
	b := c.AppendJSON(nil)
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	back, err := ParseJSON(b)
	if err != nil || !back.Equal(&c) {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	// A gap candle of a series with a side mapping: zero taker volumes, no ids.
	gap := Candle{Symbol: "BTC", Timeframe: "1m", OpenTime: 60000, CloseTime: 120000, Gap: true, Taker: true}
	if got := string(gap.AppendJSON(nil)); !strings.Contains(got, `"taker_buy_base_volume":"0","taker_buy_quote_volume":"0"`) || strings.Contains(got, "trade_id") {
		t.Fatalf("gap candle JSON %s", got)
	}
	plain := Candle{Symbol: "BTC", Timeframe: "1m", OpenTime: 60000, CloseTime: 120000}
	if got := string(plain.AppendJSON(nil)); strings.Contains(got, "taker") || strings.Contains(got, "trade_id") {
		t.Fatalf("candle without a side mapping or ids: %s", got)
	}
}

// TestJSONRev: rev is absent at 0 (a first final reads as rev 0), written
// after gap otherwise, and both parsers read it back.
func TestJSONRev(t *testing.T) {
	c := Candle{Symbol: "BTC", Timeframe: "1m", OpenTime: 60000, CloseTime: 120000,
		Open: decimal.MustParse("2"), High: decimal.MustParse("2"), Low: decimal.MustParse("1"),
		Close: decimal.MustParse("1"), Volume: decimal.MustParseSum("0.3"), QuoteVolume: decimal.MustParseSum("0.4"), Trades: 2}
	if got := string(c.AppendJSON(nil)); strings.Contains(got, "rev") {
		t.Fatalf("rev 0 is written: %s", got)
	}
	c.Rev = 4294967295
	b := c.AppendJSON(nil)
	if !strings.HasSuffix(string(b), `"gap":false,"rev":4294967295}`) {
		t.Fatalf("rev not last: %s", b)
	}
	back, err := ParseJSON(b)
	if err != nil || !back.Equal(&c) {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	spaced := strings.ReplaceAll(string(b), ",", ", ") // the encoding/json path
	back, err = ParseJSON([]byte(spaced))
	if err != nil || back.Rev != c.Rev {
		t.Fatalf("general path: %+v %v", back, err)
	}
	for _, bad := range []string{`"rev":-1`, `"rev":"1"`, `"rev":4294967296`} {
		in := strings.Replace(string(b), `"rev":4294967295`, bad, 1)
		if _, err := ParseJSON([]byte(in)); err == nil {
			t.Errorf("%s: accepted", in)
		}
	}
	c.Rev = 0
	back.Rev = 1
	if back.Equal(&c) {
		t.Fatal("Equal ignores rev")
	}
}

// Merge sums the taker volumes exactly and takes the first id of the first
// non-gap sub-candle and the last id of the last non-gap one.
func TestMergeTakerAndIDs(t *testing.T) {
	d, s := decimal.MustParse, decimal.MustParseSum
	subs := []Candle{
		{Open: d("5"), High: d("5"), Low: d("5"), Close: d("5"), Gap: true, Taker: true},
		{Open: d("5"), High: d("6"), Low: d("4"), Close: d("6"), Volume: s("0.1"), QuoteVolume: s("0.6"), Trades: 1,
			Taker: true, TakerBuyVolume: s("0.1"), TakerBuyQuoteVolume: s("0.6"), FirstTradeID: "10", LastTradeID: "10"},
		{Open: d("6"), High: d("7"), Low: d("6"), Close: d("7"), Volume: s("0.2"), QuoteVolume: s("1.3"), Trades: 2,
			Taker: true, TakerBuyVolume: s("0.2"), TakerBuyQuoteVolume: s("0.000000000000000000000000000000000001"), FirstTradeID: "11", LastTradeID: "12"},
		{Open: d("7"), High: d("7"), Low: d("7"), Close: d("7"), Gap: true, Taker: true},
	}
	acc := NewWindow("BTC", "5m", 0, 300000)
	nonGap := false
	for i := range subs {
		nonGap = Merge(&acc, &subs[i], nonGap)
	}
	FlattenGap(&acc, nonGap)
	if !acc.Taker || acc.TakerBuyVolume.String() != "0.3" || acc.TakerBuyQuoteVolume.String() != "0.600000000000000000000000000000000001" ||
		acc.FirstTradeID != "10" || acc.LastTradeID != "12" || acc.Gap {
		t.Fatalf("merged %+v", acc)
	}
	gaps := NewWindow("BTC", "5m", 0, 300000)
	nonGap = false
	for _, i := range []int{0, 3} {
		nonGap = Merge(&gaps, &subs[i], nonGap)
	}
	FlattenGap(&gaps, nonGap)
	if !gaps.Gap || !gaps.Taker || !gaps.TakerBuyVolume.IsZero() || gaps.FirstTradeID != "" || gaps.LastTradeID != "" {
		t.Fatalf("all-gap merge %+v", gaps)
	}
	// One sub-candle without taker volumes (written before the source mapped
	// its side): the longer candle has none rather than a part.
	part := NewWindow("BTC", "5m", 0, 300000)
	old := subs[1]
	old.Taker, old.TakerBuyVolume, old.TakerBuyQuoteVolume = false, decimal.Sum{}, decimal.Sum{}
	nonGap = Merge(&part, &old, false)
	Merge(&part, &subs[2], nonGap)
	if part.Taker || !part.TakerBuyVolume.IsZero() || part.FirstTradeID != "10" || part.LastTradeID != "12" {
		t.Fatalf("merge with a sub-candle without taker volumes: %+v", part)
	}
}

func TestParseEventTime(t *testing.T) {
	if v, err := ParseEventTime([]byte("1700000000123"), false); err != nil || v != 1700000000123 {
		t.Fatal(v, err)
	}
	if v, err := ParseEventTime([]byte("2026-11-23T10:00:00.5+09:00"), true); err != nil || utc(v) != "2026-11-23T01:00:00Z" || v%1000 != 500 {
		t.Fatal(v, err)
	}
	for _, bad := range []string{"", "-5", "1.5", "yesterday", "1e12"} {
		if _, err := ParseEventTime([]byte(bad), true); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

// The hand-written decoder and encoding/json agree on every shape; odd
// shapes take the encoding/json path.
func TestParseJSONShapes(t *testing.T) {
	c := Candle{Symbol: "ETH", Timeframe: "5m", OpenTime: 300000, CloseTime: 600000,
		Open: decimal.MustParse("2000.5"), High: decimal.MustParse("2001"), Low: decimal.MustParse("1999.25"),
		Close: decimal.MustParse("2000"), Volume: decimal.MustParseSum("3.5"), QuoteVolume: decimal.MustParseSum("7001.75"), Trades: 4, Gap: true}
	for _, in := range []string{
		string(c.AppendJSON(nil)),
		`{ "symbol": "ETH", "timeframe": "5m", "open_time": 300000, "close_time": 600000, "open": "2000.5", "high": "2001", "low": "1999.25", "close": "2000", "volume": "3.5", "quote_volume": "7001.75", "trades": 4, "gap": true }`,
		`{"symbol":"ETH","timeframe":"5m","open_time":300000,"close_time":600000,"open":"2000.5","high":"2001","low":"1999.25","close":"2000","volume":"3.5","quote_volume":"7001.75","trades":4,"gap":true,"final":true}`,
		`{"gap":true,"trades":4,"quote_volume":"7001.75","volume":"3.5","close":"2000","low":"1999.25","high":"2001","open":"2000.5","close_time":600000,"open_time":300000,"timeframe":"5m","symbol":"E\u0054H"}`,
	} {
		got, err := ParseJSON([]byte(in))
		if err != nil || got != c {
			t.Errorf("ParseJSON(%s) = %+v, %v", in, got, err)
		}
	}
	for _, bad := range []string{`{}`, `[]`, `{"symbol":"X","timeframe":"1m","open_time":5,"close_time":5}`, `{"symbol":"X"`, `{"open":"abc"}`} {
		if _, err := ParseJSON([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

func BenchmarkParseJSON(b *testing.B) {
	b.ReportAllocs()
	c := Candle{Symbol: "BTC-USD", Timeframe: "1m", OpenTime: 1767225600000, CloseTime: 1767225660000,
		Open: decimal.MustParse("65000.1"), High: decimal.MustParse("65010"), Low: decimal.MustParse("64990.5"),
		Close: decimal.MustParse("65001"), Volume: decimal.MustParseSum("12.3456"), QuoteVolume: decimal.MustParseSum("802468.123456"), Trades: 321}
	in := c.AppendJSON(nil)
	for b.Loop() {
		if _, err := ParseJSON(in); err != nil {
			b.Fatal(err)
		}
	}
}

// A candle's JSON is one allocation (output topics carry one per closed
// candle; a second one per candle showed in the sparse end-to-end profile).
func TestAppendJSONOneAllocation(t *testing.T) {
	c := Candle{Symbol: "SYM0042USDT", Timeframe: "15m", OpenTime: 1767225600000, CloseTime: 1767226500000,
		Open: decimal.MustParse("65000.12345678"), High: decimal.MustParse("65010.5"), Low: decimal.MustParse("64990.00000001"),
		Close: decimal.MustParse("65001.25"), Volume: decimal.MustParseSum("1234.56789012"), QuoteVolume: decimal.MustParseSum("80246812.12345678"),
		Trades: 1234567, Gap: false}
	if n := testing.AllocsPerRun(100, func() { _ = c.AppendJSON(nil) }); n != 1 {
		t.Errorf("AppendJSON made %.0f allocations, want 1 (%d bytes)", n, len(c.AppendJSON(nil)))
	}
}

func BenchmarkAppendJSON(b *testing.B) {
	c := Candle{Symbol: "BTC-USD", Timeframe: "1m", OpenTime: 1767225600000, CloseTime: 1767225660000,
		Open: decimal.MustParse("65000.1"), High: decimal.MustParse("65010"), Low: decimal.MustParse("64990.5"),
		Close: decimal.MustParse("65001"), Volume: decimal.MustParseSum("12.3456"), QuoteVolume: decimal.MustParseSum("802468.123456"), Trades: 321}
	b.ReportAllocs()
	for b.Loop() {
		_ = c.AppendJSON(nil)
	}
}
