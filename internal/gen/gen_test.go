package gen

import (
	"bytes"
	"encoding/json"
	"flag"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
)

func mustNew(t *testing.T, cfg Config) *Generator {
	t.Helper()
	g, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return g
}

func all(t *testing.T, cfg Config) [][2][]byte {
	t.Helper()
	g := mustNew(t, cfg)
	var out [][2][]byte
	for {
		k, v, ok := g.Next()
		if !ok {
			return out
		}
		out = append(out, [2][]byte{k, v})
	}
}

func TestDeterministic(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DupRate, cfg.MalformedRate, cfg.Disorder = 0.05, 0.05, 3*time.Second
	var a, b, c bytes.Buffer
	if _, err := WriteJSONLines(&a, mustNew(t, cfg)); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteJSONLines(&b, mustNew(t, cfg)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("same config and seed gave different bytes")
	}
	cfg.Seed++
	n, err := WriteJSONLines(&c, mustNew(t, cfg))
	if err != nil || n != cfg.Count {
		t.Fatalf("wrote %d lines (%v), want %d", n, err, cfg.Count)
	}
	if bytes.Equal(a.Bytes(), c.Bytes()) {
		t.Fatal("a different seed gave the same bytes")
	}
	if lines := bytes.Count(a.Bytes(), []byte("\n")); lines != cfg.Count {
		t.Fatalf("%d lines, want %d", lines, cfg.Count)
	}
}

type parsed struct {
	sym   string
	ts    int64
	price decimal.Decimal
	qty   decimal.Decimal
	id    int64
	side  string // "" when the stream has no side field
}

// parseTrade is a strict reader of a valid trade; malformed records fail it.
func parseTrade(v []byte, f Fields) (parsed, bool) {
	var m map[string]json.RawMessage
	want := 5
	if f.Side != "" {
		want = 6
	}
	if json.Unmarshal(v, &m) != nil || len(m) != want {
		return parsed{}, false
	}
	var p parsed
	if f.Side != "" && (json.Unmarshal(m[f.Side], &p.side) != nil || (p.side != "buy" && p.side != "sell")) {
		return parsed{}, false
	}
	var price, qty string
	if json.Unmarshal(m[f.Key], &p.sym) != nil || json.Unmarshal(m[f.Price], &price) != nil ||
		json.Unmarshal(m[f.Qty], &qty) != nil || json.Unmarshal(m[f.ID], &p.id) != nil {
		return parsed{}, false
	}
	raw, quoted := m[f.TS], false
	if len(raw) > 1 && raw[0] == '"' {
		raw, quoted = raw[1:len(raw)-1], true
	}
	var err error
	if p.ts, err = candle.ParseEventTime(raw, quoted); err != nil {
		return parsed{}, false
	}
	if p.price, err = decimal.Parse([]byte(price)); err != nil || p.price.Sign() <= 0 {
		return parsed{}, false
	}
	if p.qty, err = decimal.Parse([]byte(qty)); err != nil || p.qty.Sign() <= 0 {
		return parsed{}, false
	}
	return p, true
}

func TestStreamProperties(t *testing.T) {
	const n = 100_000
	cfg := DefaultConfig()
	cfg.Count, cfg.Span = n, time.Hour
	cfg.DupRate, cfg.MalformedRate = 0.05, 0.02
	cfg.Disorder = 2 * time.Second
	cfg.PriceDecimals, cfg.QtyDecimals = 3, 5
	cfg.StartPrice = "42000.125"
	g := mustNew(t, cfg)
	startMs, endMs := DefaultStart.UnixMilli(), DefaultStart.Add(time.Hour).UnixMilli()

	var (
		kinds    [3]int
		maxTS    = startMs
		behind   int
		lastID   = map[string]int64{}
		recent   = map[string][]string{}
		badShape = map[string]bool{}
	)
	for {
		k, v, ok := g.Next()
		if !ok {
			break
		}
		kind := g.Kind()
		kinds[kind]++
		p, valid := parseTrade(v, cfg.Fields)
		switch kind {
		case Malformed:
			if valid {
				t.Fatalf("malformed record parses as a valid trade: %s", v)
			}
			if !bytes.Contains(v, k) {
				t.Fatalf("malformed record %s does not carry its key %s", v, k)
			}
			badShape[shape(v)] = true
			continue
		case Duplicate:
			found := false
			for _, r := range recent[string(k)] {
				found = found || r == string(v)
			}
			if !found {
				t.Fatalf("duplicate %s is not a recent trade of %s", v, k)
			}
			continue
		}
		if !valid {
			t.Fatalf("invalid trade: %s", v)
		}
		if p.sym != string(k) {
			t.Fatalf("key %s, symbol %s", k, p.sym)
		}
		if p.ts < startMs || p.ts >= endMs {
			t.Fatalf("event time %d outside the span [%d, %d)", p.ts, startMs, endMs)
		}
		if p.ts < maxTS-cfg.Disorder.Milliseconds() {
			t.Fatalf("event time %d is more than %v behind %d", p.ts, cfg.Disorder, maxTS)
		}
		if p.ts < maxTS {
			behind++
		}
		maxTS = max(maxTS, p.ts)
		if p.id != lastID[p.sym]+1 {
			t.Fatalf("%s trade id %d after %d", p.sym, p.id, lastID[p.sym])
		}
		lastID[p.sym] = p.id
		if !strings.Contains(string(v), `"price":"`) || strings.Count(strings.Split(string(v), `"price":"`)[1], ".") < 1 {
			t.Fatalf("price not a fixed decimal string: %s", v)
		}
		rs := append(recent[string(k)], string(v))
		if len(rs) > historyLen {
			rs = rs[1:]
		}
		recent[string(k)] = rs
	}
	c := g.Counts()
	if c.Trades != kinds[Trade] || c.Duplicates != kinds[Duplicate] || c.Malformed != kinds[Malformed] {
		t.Fatalf("Counts %+v, saw %v", c, kinds)
	}
	if sum := kinds[0] + kinds[1] + kinds[2]; sum != n {
		t.Fatalf("%d records, want %d", sum, n)
	}
	near := func(name string, got int, rate float64) {
		if r := float64(got) / n; math.Abs(r-rate) > 0.004 {
			t.Errorf("%s rate %.4f, want %.3f ± 0.004", name, r, rate)
		}
	}
	near("duplicate", kinds[Duplicate], cfg.DupRate)
	near("malformed", kinds[Malformed], cfg.MalformedRate)
	if len(badShape) != numBad {
		t.Errorf("saw %d kinds of malformed record, want %d: %v", len(badShape), numBad, badShape)
	}
	if behind < n/10 {
		t.Errorf("only %d trades behind the stream's max event time; disorder barely happens", behind)
	}
	if len(lastID) != len(cfg.Symbols) {
		t.Errorf("trades for %d symbols, want %d", len(lastID), len(cfg.Symbols))
	}
}

// shape names which malformed input a record is.
func shape(v []byte) string {
	s := string(v)
	switch {
	case strings.HasPrefix(s, "["):
		return "array"
	case !json.Valid(v):
		return "broken"
	case strings.Contains(s, `"abc"`):
		return "price-text"
	case strings.Contains(s, `"NaN"`):
		return "nan"
	case strings.Contains(s, `"-1.5"`):
		return "negative-qty"
	case strings.Contains(s, `"yesterday"`):
		return "bad-ts"
	case !strings.Contains(s, `"price"`):
		return "missing-price"
	}
	return "unknown: " + s
}

func TestNoDisorderIsOrderedAndSpread(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Count, cfg.Span = 1000, 1000*time.Second
	recs := all(t, cfg)
	var prev int64
	for i, r := range recs {
		p, ok := parseTrade(r[1], cfg.Fields)
		if !ok {
			t.Fatalf("record %d invalid: %s", i, r[1])
		}
		// 1000 records over 1000 s: exactly one per second.
		if want := DefaultStart.UnixMilli() + int64(i)*1000; p.ts != want {
			t.Fatalf("record %d at %d, want %d", i, p.ts, want)
		}
		if p.ts < prev {
			t.Fatalf("record %d goes back in time", i)
		}
		prev = p.ts
	}
}

func TestRFC3339AndFieldNames(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Count, cfg.TimeFormat = 50, "rfc3339"
	cfg.Fields = Fields{Key: "s", TS: "time", Price: "p", Qty: "q", ID: "id"}
	cfg.Start = time.Date(2025, 3, 9, 1, 59, 0, 0, time.FixedZone("x", -5*3600))
	cfg.Span = time.Minute
	for i, r := range all(t, cfg) {
		p, ok := parseTrade(r[1], cfg.Fields)
		if !ok {
			t.Fatalf("record %d invalid: %s", i, r[1])
		}
		if i == 0 && !strings.Contains(string(r[1]), `"time":"2025-03-09T06:59:00.000Z"`) {
			t.Fatalf("first record %s: want a UTC RFC 3339 time with ms", r[1])
		}
		if p.ts < cfg.Start.UnixMilli() || p.ts >= cfg.Start.Add(time.Minute).UnixMilli() {
			t.Fatalf("record %d time outside the span: %s", i, r[1])
		}
	}
}

func TestUnboundedAndRate(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Count, cfg.Rate = 0, 4 // 250 ms apart in event time too
	g := mustNew(t, cfg)
	if g.Interval() != 250*time.Millisecond {
		t.Fatalf("Interval %v, want 250ms", g.Interval())
	}
	var last parsed
	for i := range 50_000 {
		_, v, ok := g.Next()
		if !ok {
			t.Fatalf("unbounded generator stopped at %d", i)
		}
		last, _ = parseTrade(v, cfg.Fields)
	}
	if want := DefaultStart.UnixMilli() + 49_999*250; last.ts != want {
		t.Fatalf("record 49999 at %d, want %d", last.ts, want)
	}
	if (Config{}).Interval() != 0 {
		t.Fatal("rate 0 should have no interval")
	}
}

func TestPricesAreExactAndPositive(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Count, cfg.Symbols, cfg.StartPrice, cfg.PriceDecimals = 20_000, []string{"PENNY"}, "0.05", 2
	min := decimal.MustParse("0.01")
	for _, r := range all(t, cfg) {
		p, ok := parseTrade(r[1], cfg.Fields)
		if !ok || p.price.Cmp(min) < 0 {
			t.Fatalf("bad price in %s", r[1])
		}
		s := string(r[1])
		price := s[strings.Index(s, `"price":"`)+9:]
		price = price[:strings.IndexByte(price, '"')]
		if i := strings.IndexByte(price, '.'); i < 0 || len(price)-i-1 != 2 {
			t.Fatalf("price %q does not have exactly 2 decimals", price)
		}
	}
}

func TestNewRejects(t *testing.T) {
	for name, mut := range map[string]func(*Config){
		"no symbols":        func(c *Config) { c.Symbols = nil },
		"empty symbol":      func(c *Config) { c.Symbols = []string{"A", ""} },
		"negative count":    func(c *Config) { c.Count = -1 },
		"negative rate":     func(c *Config) { c.Rate = -1 },
		"NaN rate":          func(c *Config) { c.Rate = math.NaN() },
		"dup rate > 1":      func(c *Config) { c.DupRate = 1.5 },
		"rates sum > 1":     func(c *Config) { c.DupRate, c.MalformedRate = 0.6, 0.6 },
		"bad time format":   func(c *Config) { c.TimeFormat = "unix" },
		"price text":        func(c *Config) { c.StartPrice = "abc" },
		"price negative":    func(c *Config) { c.StartPrice = "-1" },
		"price too precise": func(c *Config) { c.StartPrice = "1.234" },
		"price too large":   func(c *Config) { c.StartPrice = "100000000000000000000" },
		"decimals":          func(c *Config) { c.PriceDecimals = 13 },
		"empty field":       func(c *Config) { c.Fields.Price = "" },
		"same fields":       func(c *Config) { c.Fields.Qty = c.Fields.Price },
		"negative span":     func(c *Config) { c.Span = -time.Second },
	} {
		cfg := DefaultConfig()
		mut(&cfg)
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
}

func TestRegisterFlags(t *testing.T) {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	fs.VisitAll(func(f *flag.Flag) {
		if f.Usage == "" {
			t.Errorf("flag -%s has no help", f.Name)
		}
	})
	err := fs.Parse([]string{
		"-symbols", "AAA, BBB", "-count", "7", "-rate", "2.5", "-start", "2025-01-02T03:04:05Z",
		"-span", "1m", "-seed", "99", "-start-price", "1.5", "-price-decimals", "4", "-qty-decimals", "1",
		"-disorder", "3s", "-dup-rate", "0.1", "-malformed-rate", "0.2", "-time-format", "rfc3339",
		"-field-key", "k", "-field-ts", "t", "-field-price", "p", "-field-qty", "q", "-field-id", "i", "-field-side", "",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Symbols: []string{"AAA", "BBB"}, Count: 7, Rate: 2.5, Start: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		Span: time.Minute, Seed: 99, StartPrice: "1.5", PriceDecimals: 4, QtyDecimals: 1, Disorder: 3 * time.Second,
		DupRate: 0.1, MalformedRate: 0.2, TimeFormat: "rfc3339", Fields: Fields{"k", "t", "p", "q", "i", ""},
	}
	got, _ := json.Marshal(cfg)
	exp, _ := json.Marshal(want)
	if !bytes.Equal(got, exp) {
		t.Fatalf("flags gave\n%s\nwant\n%s", got, exp)
	}
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n != 19 {
		t.Errorf("%d flags, want one per field (19)", n)
	}
	if _, err := New(cfg); err != nil {
		t.Fatalf("config from flags: %v", err)
	}
	fs2 := flag.NewFlagSet("gen", flag.ContinueOnError)
	fs2.SetOutput(new(bytes.Buffer))
	c2 := DefaultConfig()
	c2.RegisterFlags(fs2)
	if err := fs2.Parse([]string{"-start", "yesterday"}); err == nil {
		t.Error("-start yesterday: want an error")
	}
	if err := fs2.Parse([]string{"-start", "now"}); err != nil || time.Since(c2.Start) > time.Minute {
		t.Errorf("-start now: %v, %v", c2.Start, err)
	}
}

func BenchmarkNext(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Count, cfg.DupRate, cfg.MalformedRate, cfg.Disorder = 0, 0.01, 0.001, time.Second
	g, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		g.Next()
	}
}

// The default stream carries an aggressor side by the tick rule: a trade
// that raises its symbol's price is a buy, one that lowers it a sell.
func TestSideByTickRule(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Count = 2000
	last := map[string]decimal.Decimal{}
	sides := map[string]int{}
	for i, r := range all(t, cfg) {
		p, ok := parseTrade(r[1], cfg.Fields)
		if !ok {
			t.Fatalf("record %d invalid: %s", i, r[1])
		}
		sides[p.side]++
		if prev, seen := last[p.sym]; seen {
			if c := p.price.Cmp(prev); (c > 0 && p.side != "buy") || (c < 0 && p.side != "sell") {
				t.Fatalf("record %d: price %s after %s is a %s", i, p.price, prev, p.side)
			}
		}
		last[p.sym] = p.price
	}
	if sides["buy"] < 500 || sides["sell"] < 500 {
		t.Fatalf("sides %v: want both, often", sides)
	}
	cfg.Fields.Side = ""
	for i, r := range all(t, cfg) {
		if strings.Contains(string(r[1]), "side") {
			t.Fatalf("record %d has a side without a side field: %s", i, r[1])
		}
	}
}
