// Package gen makes a deterministic synthetic trade stream for demos, tests
// and benchmarks.
//
// The same Config (and seed) always yields the same bytes, so a test can
// regenerate its input instead of storing it, and a benchmark measures the
// same work every run. Besides clean trades the stream can carry the faults
// kandle must survive: out-of-order event times (Disorder), verbatim
// duplicates (DupRate) and malformed records (MalformedRate).
//
// Prices follow a random walk in integer ticks and are written as exact
// decimal strings; no float touches a price or a quantity.
package gen

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/kandle/kandle/decimal"
)

// DefaultStart is the first event time when Config.Start is zero: a fixed
// instant, so that output does not depend on the wall clock.
var DefaultStart = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// Fields names the JSON fields of a trade. Side "" writes no aggressor
// side; else each trade carries "buy" or "sell" by the tick rule: a trade
// that moves its symbol's price up was bought by the taker, one that moves
// it down sold, an unchanged price alternates.
type Fields struct {
	Key, TS, Price, Qty, ID, Side string
}

// Config describes a stream. Start from DefaultConfig: zero values are taken
// literally where they make sense (0 decimals, no duplicates).
type Config struct {
	Symbols []string
	// Count is the number of records (every kind counts); 0 is unbounded.
	Count int
	// Rate is the wanted records per second; 0 is as fast as possible. The
	// generator does not sleep: pacing is the caller's job (Interval).
	Rate float64
	// Start is the first event time (zero: DefaultStart).
	Start time.Time
	// Span spreads the event times of Count records evenly over
	// [Start, Start+Span). With Count 0 or Span 0, event times advance by
	// Interval per record (1 ms when Rate is 0).
	Span time.Duration
	Seed uint64
	// StartPrice is every symbol's first price, a decimal string with at
	// most PriceDecimals places.
	StartPrice                 string
	PriceDecimals, QtyDecimals int
	// Disorder is the largest amount a trade's event time may lag the
	// stream's (never before Start).
	Disorder time.Duration
	// DupRate and MalformedRate are the probabilities (0..1, sum ≤ 1) that a
	// record re-emits a recent trade of the same symbol verbatim or is one
	// of the malformed inputs.
	DupRate, MalformedRate float64
	// TimeFormat is "ms" (epoch milliseconds) or "rfc3339".
	TimeFormat string
	Fields     Fields
}

// DefaultConfig is a small crypto-like stream: 4 symbols, 10k trades over
// ten minutes, prices to 2 places and quantities to 4.
func DefaultConfig() Config {
	return Config{
		Symbols:       []string{"BTC-USD", "ETH-USD", "SOL-USD", "ADA-USD"},
		Count:         10_000,
		Span:          10 * time.Minute,
		Seed:          1,
		StartPrice:    "100",
		PriceDecimals: 2,
		QtyDecimals:   4,
		TimeFormat:    "ms",
		Fields:        Fields{Key: "symbol", TS: "ts", Price: "price", Qty: "qty", ID: "trade_id", Side: "side"},
	}
}

// Interval is the pause between records that gives Rate (0 when Rate is 0).
func (c Config) Interval() time.Duration {
	if c.Rate <= 0 {
		return 0
	}
	return time.Duration(float64(time.Second) / c.Rate)
}

// Kind says what a record is.
type Kind uint8

const (
	Trade     Kind = iota // a fresh, valid trade
	Duplicate             // a verbatim copy of a recent trade of the same symbol
	Malformed             // one of the bad inputs
)

func (k Kind) String() string {
	switch k {
	case Trade:
		return "trade"
	case Duplicate:
		return "duplicate"
	default:
		return "malformed"
	}
}

// Counts tallies the records made so far by kind.
type Counts struct{ Trades, Duplicates, Malformed int }

// historyLen is how many recent trades per symbol a duplicate is drawn
// from: near enough that the copy lands in a still-open window.
const historyLen = 8

// maxUnits bounds a price or quantity in ticks so a walk step never
// overflows int64.
const maxUnits = 1e15

type symbolState struct {
	key     []byte // the symbol, shared by all its records
	quoted  []byte // the symbol as a JSON string
	price   int64  // in ticks of 10^-PriceDecimals
	nextID  int64
	history [][]byte
	hnext   int
}

// Generator makes the records of one Config. It is not safe for concurrent
// use.
type Generator struct {
	cfg     Config
	rng     *rand.Rand
	syms    []symbolState
	startMs int64
	spanMs  int64 // > 0: spread Count records over it
	stepMs  int64 // otherwise: fixed step per record (may be 0 at high rates)
	stepNs  int64
	disMs   int64
	names   [6][]byte // `"field":` prefixes: key, ts, price, qty, id, side
	i       int
	kind    Kind
	counts  Counts
}

// New checks cfg and returns a generator at the first record.
func New(cfg Config) (*Generator, error) {
	if len(cfg.Symbols) == 0 {
		return nil, errors.New("gen: no symbols: set Symbols (flag -symbols BTC-USD,ETH-USD)")
	}
	if cfg.Count < 0 {
		return nil, fmt.Errorf("gen: count %d: want 0 (unbounded) or more", cfg.Count)
	}
	if cfg.Rate < 0 || cfg.Rate != cfg.Rate {
		return nil, fmt.Errorf("gen: rate %v: want 0 (as fast as possible) or a positive number", cfg.Rate)
	}
	if cfg.Span < 0 || cfg.Disorder < 0 {
		return nil, errors.New("gen: span and disorder must not be negative")
	}
	for _, r := range []float64{cfg.DupRate, cfg.MalformedRate} {
		if !(r >= 0 && r <= 1) {
			return nil, fmt.Errorf("gen: rate %v: dup and malformed rates are probabilities in 0..1", r)
		}
	}
	if cfg.DupRate+cfg.MalformedRate > 1 {
		return nil, fmt.Errorf("gen: dup rate %v + malformed rate %v exceed 1", cfg.DupRate, cfg.MalformedRate)
	}
	if cfg.PriceDecimals < 0 || cfg.PriceDecimals > 12 || cfg.QtyDecimals < 0 || cfg.QtyDecimals > 12 {
		return nil, errors.New("gen: price and qty decimals must be 0..12")
	}
	switch cfg.TimeFormat {
	case "", "ms":
		cfg.TimeFormat = "ms"
	case "rfc3339":
	default:
		return nil, fmt.Errorf("gen: time format %q: want ms or rfc3339", cfg.TimeFormat)
	}
	f := cfg.Fields
	names := []string{f.Key, f.TS, f.Price, f.Qty, f.ID, f.Side}
	seen := map[string]bool{}
	for i, n := range names {
		if (n == "" && i < 5) || (n != "" && seen[n]) {
			return nil, fmt.Errorf("gen: field names %q must be distinct and non-empty (but for side)", names)
		}
		seen[n] = true
	}
	if cfg.StartPrice == "" {
		cfg.StartPrice = "100"
	}
	start, err := ticks(cfg.StartPrice, cfg.PriceDecimals)
	if err != nil {
		return nil, err
	}
	if cfg.Start.IsZero() {
		cfg.Start = DefaultStart
	}

	g := &Generator{
		cfg:     cfg,
		rng:     rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		startMs: cfg.Start.UnixMilli(),
		disMs:   cfg.Disorder.Milliseconds(),
	}
	for i, n := range names {
		q, _ := json.Marshal(n) // a string always marshals
		g.names[i] = append(q, ':')
	}
	if cfg.Count > 0 && cfg.Span > 0 {
		g.spanMs = cfg.Span.Milliseconds()
	} else if iv := cfg.Interval(); iv > 0 {
		g.stepNs = int64(iv)
	} else {
		g.stepMs = 1
	}
	g.syms = make([]symbolState, len(cfg.Symbols))
	for i, s := range cfg.Symbols {
		if s == "" {
			return nil, errors.New("gen: empty symbol in Symbols")
		}
		q, _ := json.Marshal(s)
		g.syms[i] = symbolState{key: []byte(s), quoted: q, price: start, nextID: 1}
	}
	return g, nil
}

// ticks parses a decimal string into an integer count of 10^-places.
func ticks(s string, places int) (int64, error) {
	d, err := decimal.Parse([]byte(s))
	if err != nil {
		return 0, fmt.Errorf("gen: start price %q: %w", s, err)
	}
	if d.Sign() <= 0 {
		return 0, fmt.Errorf("gen: start price %q must be positive", s)
	}
	div := uint64(1)
	for range decimal.Scale - places {
		div *= 10
	}
	hi, lo := d.Raw()
	if hi >= div {
		return 0, fmt.Errorf("gen: start price %q is too large", s)
	}
	q, r := bits.Div64(hi, lo, div)
	if r != 0 {
		return 0, fmt.Errorf("gen: start price %q has more than %d decimal places (raise -price-decimals)", s, places)
	}
	if q >= maxUnits {
		return 0, fmt.Errorf("gen: start price %q is too large for %d decimal places", s, places)
	}
	return int64(q), nil
}

// Interval is the pause between records that gives the configured rate.
func (g *Generator) Interval() time.Duration { return g.cfg.Interval() }

// Kind is the kind of the record the last Next returned.
func (g *Generator) Kind() Kind { return g.kind }

// Counts tallies the records made so far.
func (g *Generator) Counts() Counts { return g.counts }

// Next returns the next record: key is the symbol, value the JSON body. ok
// is false after Count records. The returned slices must not be modified
// (duplicates share them).
func (g *Generator) Next() (key, value []byte, ok bool) {
	if g.cfg.Count > 0 && g.i >= g.cfg.Count {
		return nil, nil, false
	}
	s := &g.syms[g.rng.IntN(len(g.syms))]
	ts := g.baseMs()
	g.i++
	u := g.rng.Float64()
	switch {
	case u < g.cfg.MalformedRate:
		g.kind, value = Malformed, g.malformed(s, ts)
		g.counts.Malformed++
	case u < g.cfg.MalformedRate+g.cfg.DupRate && len(s.history) > 0:
		g.kind, value = Duplicate, s.history[g.rng.IntN(len(s.history))]
		g.counts.Duplicates++
	default:
		g.kind, value = Trade, g.trade(s, ts)
		g.counts.Trades++
	}
	return s.key, value, true
}

// baseMs is the undisturbed event time of record g.i.
func (g *Generator) baseMs() int64 {
	i := uint64(g.i)
	switch {
	case g.spanMs > 0:
		hi, lo := bits.Mul64(uint64(g.spanMs), i)
		q, _ := bits.Div64(hi, lo, uint64(g.cfg.Count)) // i < Count, so q < span
		return g.startMs + int64(q)
	case g.stepNs > 0:
		hi, lo := bits.Mul64(uint64(g.stepNs), i)
		q, _ := bits.Div64(hi, lo, uint64(time.Millisecond)) // hi < 10^6 for any reachable i
		return g.startMs + int64(q)
	default:
		return g.startMs + g.stepMs*int64(i)
	}
}

func (g *Generator) trade(s *symbolState, ts int64) []byte {
	if g.disMs > 0 {
		ts = max(g.startMs, ts-g.rng.Int64N(g.disMs+1))
	}
	// Random walk: up to ±0.1% per trade, at least one tick, never below one.
	r := g.rng.Int64N(21) - 10
	d := s.price * r / 10_000
	if d == 0 {
		d = r / max(1, abs(r))
	}
	s.price = min(max(s.price+d, 1), maxUnits)
	qty := g.rng.Int64N(10*pow10(g.cfg.QtyDecimals)) + 1

	b := make([]byte, 0, 112)
	b = g.head(b, s, ts)
	b = append(b, ',')
	b = g.field(b, 2)
	b = appendFixed(b, s.price, g.cfg.PriceDecimals)
	b = append(b, "\","...)
	b = g.field(b, 3)
	b = appendFixed(b, qty, g.cfg.QtyDecimals)
	b = append(b, "\","...)
	b = append(b, g.names[4]...)
	b = strconv.AppendInt(b, s.nextID, 10)
	if g.cfg.Fields.Side != "" { // the tick rule, drawing nothing from rng (streams stay as they were)
		b = append(b, ',')
		b = append(b, g.names[5]...)
		if r > 0 || (r == 0 && s.nextID%2 == 0) {
			b = append(b, `"buy"`...)
		} else {
			b = append(b, `"sell"`...)
		}
	}
	b = append(b, '}')
	s.nextID++
	if len(s.history) < historyLen {
		s.history = append(s.history, b)
	} else {
		s.history[s.hnext] = b
		s.hnext = (s.hnext + 1) % historyLen
	}
	return b
}

// head appends `{"key":"SYM","ts":TS`.
func (g *Generator) head(b []byte, s *symbolState, ts int64) []byte {
	b = append(b, '{')
	b = append(b, g.names[0]...)
	b = append(b, s.quoted...)
	b = append(b, ',')
	b = append(b, g.names[1]...)
	if g.cfg.TimeFormat == "rfc3339" {
		b = append(b, '"')
		b = time.UnixMilli(ts).UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
		return append(b, '"')
	}
	return strconv.AppendInt(b, ts, 10)
}

// field appends `"name":"` for field n.
func (g *Generator) field(b []byte, n int) []byte {
	return append(append(b, g.names[n]...), '"')
}

// Malformed inputs, one of each kind a decoder must reject. None carries a
// trade id, so a rejected record can never shadow a real one.
const (
	badBrokenJSON = iota
	badArray
	badMissingPrice
	badPriceText
	badNegativeQty
	badTS
	badNaN
	numBad
)

func (g *Generator) malformed(s *symbolState, ts int64) []byte {
	price := appendFixed(nil, s.price, g.cfg.PriceDecimals)
	b := make([]byte, 0, 96)
	switch g.rng.IntN(numBad) {
	case badBrokenJSON:
		b = g.head(b, s, ts)
		b = append(b, ',')
		b = g.field(b, 2)
		return append(b, price[:len(price)/2+1]...) // cut mid-value
	case badArray:
		b = append(b, '[')
		b = append(b, s.quoted...)
		b = append(b, ',')
		b = strconv.AppendInt(b, ts, 10)
		b = append(b, ",\""...)
		b = append(b, price...)
		return append(b, "\",\"1\"]"...)
	case badMissingPrice:
		b = g.head(b, s, ts)
		b = append(b, ',')
		b = g.field(b, 3)
		return append(b, "1\"}"...)
	case badPriceText:
		return g.withPriceQty(g.head(b, s, ts), []byte("abc"), "1")
	case badNegativeQty:
		return g.withPriceQty(g.head(b, s, ts), price, "-1.5")
	case badTS:
		b = append(b, '{')
		b = append(b, g.names[0]...)
		b = append(b, s.quoted...)
		b = append(b, ',')
		b = append(b, g.names[1]...)
		b = append(b, "\"yesterday\""...)
		return g.withPriceQty(b, price, "1")
	default: // badNaN
		return g.withPriceQty(g.head(b, s, ts), []byte("NaN"), "1")
	}
}

func (g *Generator) withPriceQty(b, price []byte, qty string) []byte {
	b = append(b, ',')
	b = g.field(b, 2)
	b = append(b, price...)
	b = append(b, "\","...)
	b = g.field(b, 3)
	b = append(b, qty...)
	return append(b, "\"}"...)
}

// appendFixed appends v/10^places with exactly places decimals.
func appendFixed(b []byte, v int64, places int) []byte {
	if places == 0 {
		return strconv.AppendInt(b, v, 10)
	}
	p := pow10(places)
	b = strconv.AppendInt(b, v/p, 10)
	b = append(b, '.')
	var tmp [24]byte
	frac := strconv.AppendInt(tmp[:0], v%p+p, 10) // leading 1 keeps the zeros
	return append(b, frac[1:]...)
}

func pow10(n int) int64 {
	p := int64(1)
	for range n {
		p *= 10
	}
	return p
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}
