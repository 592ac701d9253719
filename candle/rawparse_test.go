package candle

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/kandle/kandle/decimal"
)

// general decodes b the slow way: encoding/json and the same checks.
func general(b []byte) (Candle, error) {
	var c Candle
	sym, tf, err := parseGeneral(b, &c)
	if err == nil {
		err = checkParsed(sym, tf, &c)
	}
	if err != nil {
		return Candle{}, err
	}
	c.Symbol, c.Timeframe = string(sym), string(tf)
	return c, nil
}

// randDigits returns n random decimal digits, the first not 0 when lead.
func randDigits(rng *rand.Rand, n int, lead bool) string {
	var sb strings.Builder
	for i := range n {
		d := rng.IntN(10)
		if i == 0 && lead && d == 0 {
			d = 1 + rng.IntN(9)
		}
		sb.WriteByte(byte('0' + d))
	}
	return sb.String()
}

// randDecimal is a number with up to intDigits before the point and up to
// places after it; zero is frequent, as in gap candles.
func randDecimal(rng *rand.Rand, intDigits, places int) string {
	if rng.IntN(8) == 0 {
		return "0"
	}
	s := "0"
	if n := rng.IntN(intDigits + 1); n > 0 {
		s = randDigits(rng, n, true)
	}
	if p := rng.IntN(places + 1); p > 0 {
		s += "." + randDigits(rng, p, false)
	}
	return s
}

// variedCandles are candles as rollups meet them: narrow and wide volumes,
// decimals of 1 to 38 digits, gap and traded windows, names that need JSON
// escapes (which take the encoding/json path) and names that do not.
func variedCandles(n int) []Candle {
	rng := rand.New(rand.NewPCG(14, 3))
	syms := []string{"BTC-USDT", "SYM0042USDT", "ETH/USD", "TOKEN/é€", `a"b`, `back\slash`, "x\u2028y", "日本", "K"}
	tfs := []string{"1m", "5m", "15m", "1h", "4h", "1d", "1w", "1M", "1m@Asia/Seoul"}
	out := make([]Candle, 0, n)
	for i := range n {
		open := rng.Int64N(1 << 42)
		c := Candle{Symbol: syms[i%len(syms)], Timeframe: tfs[rng.IntN(len(tfs))],
			OpenTime: open, CloseTime: open + 1 + rng.Int64N(1<<31),
			Open: decimal.MustParse(randDecimal(rng, 20, 18)), High: decimal.MustParse(randDecimal(rng, 20, 18)),
			Low: decimal.MustParse(randDecimal(rng, 20, 18)), Close: decimal.MustParse(randDecimal(rng, 20, 18)),
			Trades: rng.Int64N(1 << 40), Gap: rng.IntN(3) == 0}
		if rng.IntN(3) == 0 { // wide: up to 36 places, or beyond the 128-bit range
			c.Volume = decimal.MustParseSum(randDecimal(rng, 40, 36))
			c.QuoteVolume = decimal.MustParseSum(randDecimal(rng, 60, 36))
		} else {
			c.Volume = decimal.MustParseSum(randDecimal(rng, 12, 18))
			c.QuoteVolume = decimal.MustParseSum(randDecimal(rng, 20, 18))
		}
		if rng.IntN(2) == 0 { // a series with a side mapping
			c.Taker = true
			c.TakerBuyVolume = decimal.MustParseSum(randDecimal(rng, 40, 36))
			c.TakerBuyQuoteVolume = decimal.MustParseSum(randDecimal(rng, 20, 18))
		}
		if !c.Gap && rng.IntN(2) == 0 { // trade ids: numbers, or any text
			ids := []string{"1", "18446744073709551615", "abc-7", "日本"}
			c.FirstTradeID, c.LastTradeID = ids[rng.IntN(len(ids))], ids[rng.IntN(len(ids))]
			if i%97 == 0 {
				c.LastTradeID = `q"uote` // an escape: the encoding/json path
			}
		}
		out = append(out, c)
	}
	return out
}

// reshape writes c's JSON in other valid forms: members reordered, spaces,
// an extra "final" member, decimals as JSON numbers, a duplicated member.
func reshape(c *Candle, form int) []byte {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(c.AppendJSON(nil), &m); err != nil {
		panic(err)
	}
	keys := []string{"symbol", "timeframe", "open_time", "close_time", "open", "high", "low", "close", "volume", "quote_volume", "trades", "gap"}
	for _, opt := range []string{"taker_buy_base_volume", "taker_buy_quote_volume", "first_trade_id", "last_trade_id"} {
		if _, ok := m[opt]; ok {
			keys = append(keys, opt)
		}
	}
	var b bytes.Buffer
	b.WriteByte('{')
	sep := ","
	if form == 1 {
		sep = ", "
	}
	for i := range keys {
		k := keys[i]
		if form == 0 {
			k = keys[len(keys)-1-i]
		}
		if i > 0 {
			b.WriteString(sep)
		}
		v := m[k]
		if form == 3 && (k == "open" || k == "volume") {
			v = v[1 : len(v)-1] // a JSON number
		}
		fmt.Fprintf(&b, "%q:%s", k, v)
	}
	switch form {
	case 2:
		b.WriteString(`,"final":true`)
	case 4:
		b.WriteString(`,"gap":false,"trades":7`) // the last of a duplicated member wins
	}
	b.WriteByte('}')
	return b.Bytes()
}

// The allocation-free decoder of rollup stages (ParseJSONRaw, the hand-
// written fast path) reads every valid JSON candle exactly as encoding/json
// does, and rejects what it rejects: candles from AppendJSON with narrow and
// wide decimals, the same candles reshaped, quiet records (no window),
// truncated and mutated records.
func TestParseJSONRawMatchesGeneral(t *testing.T) {
	var inputs [][]byte
	fast := 0
	for i, c := range variedCandles(3000) {
		enc := c.AppendJSON(nil)
		inputs = append(inputs, enc, reshape(&c, i%5))
		var scratch Candle
		if _, _, ok := parseFast(enc, &scratch); ok {
			fast++
		}
		for cut := 1; cut < len(enc); cut += 1 + i%17 {
			inputs = append(inputs, enc[:cut])
		}
		mut := bytes.Clone(enc)
		mut[i%len(mut)] ^= byte(1 << (i % 8))
		inputs = append(inputs, mut)
	}
	inputs = append(inputs,
		[]byte(`{"kind":"quiet","symbol":"BTC-USDT","timeframe":"1m","quiet_until":1700000300000}`),
		[]byte(`{"symbol":"BTC-USDT","timeframe":"1m","quiet_until":1700000300000}`),
		[]byte(`{"symbol":"X","timeframe":"1m","open_time":5,"close_time":5}`),
		[]byte(`{"symbol":"","timeframe":"1m","open_time":5,"close_time":6}`),
		[]byte(`{"symbol":"X","timeframe":"1m","open_time":5,"close_time":6,"open":null}`),
		[]byte(`{"symbol":"X","timeframe":"1m","open_time":5,"close_time":6,"volume":"1e300"}`),
		[]byte(`{"symbol":"X","timeframe":"1m","open_time":5,"close_time":6,"final":{"a":1}}`),
		[]byte(`{"Symbol":"X","timeframe":"1m","open_time":5,"close_time":6}`),
		[]byte("{\"symbol\":\"A\xff\",\"timeframe\":\"1m\",\"open_time\":0,\"close_time\":1}"),
		[]byte(`{"symbol":"A\u0001","timeframe":"1m","open_time":0,"close_time":1}`),
		// The taker volumes come in pairs; ids are strings.
		[]byte(`{"symbol":"X","timeframe":"1m","open_time":5,"close_time":6,"taker_buy_base_volume":"1"}`),
		[]byte(`{"symbol":"X","timeframe":"1m","open_time":5,"close_time":6,"taker_buy_quote_volume":"1"}`),
		[]byte(`{"symbol":"X","timeframe":"1m","open_time":5,"close_time":6,"taker_buy_base_volume":"0","taker_buy_quote_volume":"0"}`),
		[]byte(`{"symbol":"X","timeframe":"1m","open_time":5,"close_time":6,"first_trade_id":7}`),
		[]byte(`{"symbol":"X","timeframe":"1m","open_time":5,"close_time":6,"first_trade_id":"7","last_trade_id":"9"}`),
		[]byte(`[]`), []byte(`{}`), []byte(``), []byte(`null`))
	if fast < 3000*6/9-70 { // the names without escapes: 6 of 9 (less a few escaped ids)
		t.Fatalf("only %d of 3000 encoded candles took the fast path", fast)
	}
	compared := 0
	for _, in := range inputs {
		var got Candle
		sym, tf, err := ParseJSONRaw(in, &got)
		if !json.Valid(in) {
			// Invalid JSON is not compared (the fast path reads a little
			// more leniently, e.g. "+5"), but it must be refused or read
			// into a candle that passes the checks.
			if err == nil && (len(sym) == 0 || len(tf) == 0 || got.CloseTime <= got.OpenTime) {
				t.Errorf("ParseJSONRaw(%q) accepted a candle without a window or names", in)
			}
			continue
		}
		compared++
		want, werr := general(in)
		if (err != nil) != (werr != nil) {
			t.Fatalf("ParseJSONRaw(%s): err %v, encoding/json: err %v", in, err, werr)
		}
		if err != nil {
			continue
		}
		got.Symbol, got.Timeframe = string(sym), string(tf)
		if !got.Equal(&want) || !bytes.Equal(got.AppendJSON(nil), want.AppendJSON(nil)) {
			t.Fatalf("ParseJSONRaw(%s)\n = %+v\nencoding/json\n = %+v", in, got, want)
		}
		if viaParse, err := ParseJSON(in); err != nil || !viaParse.Equal(&want) {
			t.Fatalf("ParseJSON(%s) = %+v, %v", in, viaParse, err)
		}
	}
	if compared < 6000 {
		t.Fatalf("only %d valid inputs compared", compared)
	}
}

// Reading a candle of the common shape allocates nothing; ParseJSON adds
// only its two strings.
func TestParseJSONRawAllocations(t *testing.T) {
	c := Candle{Symbol: "SYM0042USDT", Timeframe: "15m", OpenTime: 1767225600000, CloseTime: 1767226500000,
		Open: decimal.MustParse("65000.12345678"), High: decimal.MustParse("65010.5"), Low: decimal.MustParse("64990.00000001"),
		Close: decimal.MustParse("65001.25"), Volume: decimal.MustParseSum("1234.56789012"), QuoteVolume: decimal.MustParseSum("80246812.12345678"),
		Trades: 1234567}
	in := c.AppendJSON(nil)
	var got Candle
	if n := testing.AllocsPerRun(100, func() {
		if _, _, err := ParseJSONRaw(in, &got); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("ParseJSONRaw made %.0f allocations, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseJSON(in) }); n > 2 {
		t.Errorf("ParseJSON made %.0f allocations, want at most 2 (symbol and timeframe)", n)
	}
}

func BenchmarkParseJSONRaw(b *testing.B) {
	c := Candle{Symbol: "BTC-USD", Timeframe: "1m", OpenTime: 1767225600000, CloseTime: 1767225660000,
		Open: decimal.MustParse("65000.1"), High: decimal.MustParse("65010"), Low: decimal.MustParse("64990.5"),
		Close: decimal.MustParse("65001"), Volume: decimal.MustParseSum("12.3456"), QuoteVolume: decimal.MustParseSum("802468.123456"), Trades: 321}
	in := c.AppendJSON(nil)
	var got Candle
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := ParseJSONRaw(in, &got); err != nil {
			b.Fatal(err)
		}
	}
}
