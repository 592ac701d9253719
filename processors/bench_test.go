package processors

import (
	"fmt"
	"math/big"
	"math/bits"
	"math/rand/v2"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
)

// benchTrades returns n Binance-style trade records over 1000 symbols, in
// event-time order with a few ms of jitter.
func benchTrades(n int) [][]byte {
	recs, _ := benchKeyedTrades(n)
	return recs
}

// benchKeyedTrades is benchTrades with each record's key (its symbol).
func benchKeyedTrades(n int) (recs, keys [][]byte) {
	rng := rand.New(rand.NewPCG(1, 2))
	recs, keys = make([][]byte, n), make([][]byte, n)
	ts := baseDay.UnixMilli()
	for i := range recs {
		ts++ // 1000 trades per second of event time: 1m windows close as the stream runs
		sym := rng.IntN(1000)
		recs[i] = fmt.Appendf(nil, `{"e":"trade","E":%d,"s":"SYM%04dUSDT","t":%d,"p":"%d.%02d","q":"0.%05d","T":%d,"m":%t,"M":true}`,
			ts+3, sym, 100000000+i, 100+rng.IntN(60000), rng.IntN(100), 1+rng.IntN(99999), ts-rng.Int64N(5), rng.IntN(2) == 0)
		keys[i] = fmt.Appendf(nil, "SYM%04dUSDT", sym)
	}
	return recs, keys
}

// benchDecoder decodes benchTrades, with the key check on (as shipped).
func benchDecoder(tb testing.TB) *Decoder {
	d, err := NewDecoder(DecoderConfig{Fields: Fields{Key: "s", Time: "T", Price: "p", Qty: "q", ID: "t"}, KeyCheck: true})
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// BenchmarkDecode measures the JSON scanner and validation of one trade.
func BenchmarkDecode(b *testing.B) { benchDecode(b, benchDecoder(b), benchTrades(1<<14)) }

// benchDecode decodes recs (a power of two of them) round robin with d,
// reporting bytes, allocations and the CPU time per record.
func benchDecode(b *testing.B, d *Decoder, recs [][]byte) {
	var t candle.Trade
	var bytes int64
	for _, r := range recs {
		bytes += int64(len(r))
	}
	b.SetBytes(bytes / int64(len(recs)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	for i := range b.N {
		if rej, ok := d.Decode(recs[i&(len(recs)-1)], &t); !ok {
			b.Fatal(rej.Detail)
		}
	}
	reportRate(b, cpu)
}

// BenchmarkAggregatorCore measures decode + dedupe + window update (and the
// closes of 1m windows as event time moves) for ~1000 symbols on one core,
// with the shipped key check, at the engine's cadence: a checkpoint
// (Changes) every benchCommitTrades trades and a live scan (Active) every
// benchPollTrades.
// docs/performance.md holds it within 1.5× of BenchmarkAggregatorCoreLimit's
// CPU per trade, measured in the same run (make bench-core).
func BenchmarkAggregatorCore(b *testing.B) {
	recs, keys := benchKeyedTrades(1 << 18)
	benchAggregator(b, recs, keys, benchCommitTrades)
}

// BenchmarkAggregatorCoreEvery1024 is BenchmarkAggregatorCore with a
// checkpoint every 1024 trades (the core benchmark's cadence before
// 2026-11-27): with 1000 symbols nearly every trade then writes its key's
// entry and an id chunk. It shows what a much shorter commit interval, or
// a much slower stream, costs per trade.
func BenchmarkAggregatorCoreEvery1024(b *testing.B) {
	recs, keys := benchKeyedTrades(1 << 18)
	benchAggregator(b, recs, keys, benchPollTrades)
}

// The core benchmarks' cadence. The engine checkpoints a partition once
// per transaction (commit_interval, 25 ms by default): 25,000 trades at
// 1 M trades/s. It scans the live candles once per poll of its input, when
// live publishers are attached; 1024 trades is a small poll (a 1 MiB fetch
// of these records holds ~6,000).
const (
	benchCommitTrades = 25_000
	benchPollTrades   = 1024
)

// BenchmarkAggregatorCoreWide is the same with 18-decimal token trades:
// every price × qty needs more than 18 places, so every quote volume is a
// wide (arbitrary-precision) sum. Exact, and slower than the common case.
func BenchmarkAggregatorCoreWide(b *testing.B) {
	recs, keys := benchWideTrades(1 << 18)
	benchAggregator(b, recs, keys, benchCommitTrades)
}

// benchWideTrades is benchKeyedTrades with 18-decimal prices and quantities.
func benchWideTrades(n int) (recs, keys [][]byte) {
	rng := rand.New(rand.NewPCG(1, 2))
	recs, keys = make([][]byte, n), make([][]byte, n)
	ts := baseDay.UnixMilli()
	for i := range recs {
		ts++
		sym := rng.IntN(1000)
		recs[i] = fmt.Appendf(nil, `{"e":"trade","E":%d,"s":"TOK%04d","t":%d,"p":"0.%018d","q":"%d.%018d","T":%d,"m":%t,"M":true}`,
			ts+3, sym, 100000000+i, 1+rng.Int64N(999_999_999_999_999_999), 1+rng.IntN(99999), rng.Int64N(1_000_000_000_000_000_000),
			ts-rng.Int64N(5), rng.IntN(2) == 0)
		keys[i] = fmt.Appendf(nil, "TOK%04d", sym)
	}
	return recs, keys
}

// benchAggregator feeds recs to a fresh aggregator round robin, calling
// Changes every commit trades and Active every benchPollTrades.
func benchAggregator(b *testing.B, recs, keys [][]byte, commit int) {
	n := len(recs)
	untilCommit := commit
	build := func() *Aggregator { return newBenchAggregator(b) }
	a := build()
	var out Output
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	for i := range b.N {
		j := i & (n - 1)
		if j == 0 && i > 0 {
			b.StopTimer() // the stream's event time cannot rewind: start over
			a = build()
			b.StartTimer()
		}
		a.Process(Record{Offset: int64(i), Key: keys[j], Value: recs[j]}, &out)
		if len(out.Rejected) > 0 {
			b.Fatal(out.Rejected[0].Detail)
		}
		if len(out.Candles) > 4096 {
			out.Reset()
		}
		if untilCommit--; untilCommit == 0 {
			untilCommit = commit
			a.Changes(func(k, v []byte) {})
		}
		if j&(benchPollTrades-1) == 0 {
			a.Active(func(c *candle.Candle) {})
		}
	}
	reportRate(b, cpu)
}

// newBenchAggregator is the aggregator of the core benchmarks: 1m windows,
// 2 s lateness, dedupe and gap fill on, the shipped key check.
func newBenchAggregator(tb testing.TB) *Aggregator {
	tf, err := candle.ParseTimeframe("1m", nil)
	if err != nil {
		tb.Fatal(err)
	}
	a, err := NewAggregator(CandleConfig{Timeframe: tf, Lateness: 2 * time.Second, Dedupe: true, GapFill: true,
		Decoder: benchDecoder(tb)}, FixedClock{T: baseDay})
	if err != nil {
		tb.Fatal(err)
	}
	return a
}

// cpuTime returns the CPU time this process used. On a shared, busy machine
// wall-clock ns/op mostly measures the other processes; CPU time per trade
// is the number to compare with the single-core targets of docs/performance.md.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportRate(b *testing.B, cpu0 time.Duration) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "trades/s")
	if cpu := cpuTime() - cpu0; cpu > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
		b.ReportMetric(float64(b.N)/cpu.Seconds(), "trades/cpu-s")
	}
}

// BenchmarkAggregatorCoreLimit is the floor BenchmarkAggregatorCore is held
// against: a minimal hand-written decode and fixed-point OHLCV update of the
// same generated records (benchKeyedTrades(1 << 18), the same loop and the
// same rebuild when they run out). Run both in one invocation, interleaved
// (make bench-core), and compare their CPU per trade; the target is the core
// within 1.5× of this.
//
// coreLimit does what any consumer must do to turn these records into
// correct 1m candles — find the fields by name, parse price, quantity and
// event time into fixed-point integers, check the record key, update the
// symbol's window (open/close by event time, arrival order on ties,
// high, low, Σ qty, Σ price × qty exactly, count), close windows on the
// same watermark (max event time − 2 s lateness) and emit them — and
// nothing else: no dedupe, no gap fill, no checkpoint (Changes) or live scan
// (Active), no JSON validation beyond what its parse needs, names without
// escapes, at most 8 decimal places. Leaving those out makes it a floor:
// TestCoreLimitAgreesWithAggregator checks that its candles are the
// aggregator's.
func BenchmarkAggregatorCoreLimit(b *testing.B) {
	recs, keys := benchKeyedTrades(1 << 18)
	n := len(recs)
	l := newCoreLimit(60_000, 2_000)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	for i := range b.N {
		j := i & (n - 1)
		if j == 0 && i > 0 {
			b.StopTimer() // as benchAggregator: event time cannot rewind
			l = newCoreLimit(60_000, 2_000)
			b.StartTimer()
		}
		if !l.process(keys[j], recs[j]) {
			b.Fatalf("limit refused record %d: %s", j, recs[j])
		}
		if len(l.out) > 4096 {
			l.out = l.out[:0]
		}
	}
	reportRate(b, cpu)
}

// limitScale is coreLimit's fixed point: prices and quantities are integers
// of 10^-8 (Binance's precision), price × qty a 128-bit integer of 10^-16.
const limitScale = 100_000_000

// limitWin is one open window of coreLimit.
type limitWin struct {
	open           int64 // window start, Unix ms
	o, h, l, c     int64 // prices × 10^8
	ot, ct         int64 // event times of the open and close trades
	vol            int64 // Σ qty × 10^8
	quoteHi, quote uint64
	n              int64
}

type limitKey struct {
	sym  string
	wins []limitWin // open windows, oldest first
}

type limitCandle struct {
	sym string
	limitWin
}

// coreLimit is the hand-written floor of BenchmarkAggregatorCoreLimit.
type coreLimit struct {
	window, lateness int64 // ms
	wm               int64 // max event time − lateness
	nextClose        int64 // earliest close time of an open window
	keys             map[string]*limitKey
	all              []*limitKey
	out              []limitCandle
}

func newCoreLimit(window, lateness int64) *coreLimit {
	return &coreLimit{window: window, lateness: lateness, wm: -1 << 62, nextClose: 1<<63 - 1,
		keys: make(map[string]*limitKey)}
}

// process takes one record; false means it could not parse it, the key did
// not match, a sum would overflow, or the trade was late.
func (l *coreLimit) process(key, rec []byte) bool {
	var sym []byte
	var ts, price, qty int64
	var have uint8
	if len(rec) < 2 || rec[0] != '{' {
		return false
	}
	for i := 1; ; {
		// "name":
		if i >= len(rec) || rec[i] != '"' {
			return false
		}
		e := i + 1
		for e < len(rec) && rec[e] != '"' {
			e++
		}
		if e+1 >= len(rec) || rec[e+1] != ':' {
			return false
		}
		name := rec[i+1 : e]
		i = e + 2
		// the value: a string without escapes, or a number or literal
		var v []byte
		if i < len(rec) && rec[i] == '"' {
			e = i + 1
			for e < len(rec) && rec[e] != '"' {
				if rec[e] == '\\' {
					return false
				}
				e++
			}
			if e >= len(rec) {
				return false
			}
			v, i = rec[i+1:e], e+1
		} else {
			e = i
			for e < len(rec) && rec[e] != ',' && rec[e] != '}' {
				e++
			}
			v, i = rec[i:e], e
		}
		if len(name) == 1 {
			var ok bool
			switch name[0] {
			case 's':
				sym, ok, have = v, len(v) > 0, have|1
			case 'T':
				ts, ok = limitInt(v)
				have |= 2
			case 'p':
				price, ok = limitFixed(v)
				ok, have = ok && price > 0, have|4
			case 'q':
				qty, ok = limitFixed(v)
				ok, have = ok && qty > 0, have|8
			default:
				ok = true
			}
			if !ok {
				return false
			}
		}
		if i >= len(rec) {
			return false
		}
		if rec[i] == '}' {
			break
		}
		if rec[i] != ',' {
			return false
		}
		i++
	}
	if have != 15 || string(key) != string(sym) {
		return false
	}
	open := ts - ts%l.window
	if open+l.window <= l.wm {
		return false // late
	}
	if w := ts - l.lateness; w > l.wm {
		l.wm = w
		if l.wm >= l.nextClose {
			l.closeDue()
		}
	}
	k := l.keys[string(sym)]
	if k == nil {
		k = &limitKey{sym: string(sym), wins: make([]limitWin, 0, 2)}
		l.keys[k.sym] = k
		l.all = append(l.all, k)
	}
	w := l.windowAt(k, open)
	hi, lo := bits.Mul64(uint64(price), uint64(qty))
	var carry uint64
	w.quote, carry = bits.Add64(w.quote, lo, 0)
	w.quoteHi, carry = bits.Add64(w.quoteHi, hi, carry)
	if carry != 0 || w.vol+qty < w.vol {
		return false
	}
	w.vol += qty
	if w.n == 0 {
		w.o, w.h, w.l, w.c, w.ot, w.ct = price, price, price, price, ts, ts
	} else {
		if ts < w.ot {
			w.o, w.ot = price, ts
		}
		if ts >= w.ct {
			w.c, w.ct = price, ts
		}
		w.h, w.l = max(w.h, price), min(w.l, price)
	}
	w.n++
	return true
}

// windowAt returns k's open window starting at open, adding it in order.
func (l *coreLimit) windowAt(k *limitKey, open int64) *limitWin {
	for i := len(k.wins) - 1; i >= 0; i-- {
		switch {
		case k.wins[i].open == open:
			return &k.wins[i]
		case k.wins[i].open < open:
			k.wins = slices.Insert(k.wins, i+1, limitWin{open: open})
			l.nextClose = min(l.nextClose, open+l.window)
			return &k.wins[i+1]
		}
	}
	k.wins = slices.Insert(k.wins, 0, limitWin{open: open})
	l.nextClose = min(l.nextClose, open+l.window)
	return &k.wins[0]
}

// closeDue emits every window closing at or before the watermark.
func (l *coreLimit) closeDue() {
	l.nextClose = 1<<63 - 1
	for _, k := range l.all {
		n := 0
		for n < len(k.wins) && k.wins[n].open+l.window <= l.wm {
			l.out = append(l.out, limitCandle{k.sym, k.wins[n]})
			n++
		}
		if n > 0 {
			k.wins = append(k.wins[:0], k.wins[n:]...)
		}
		if len(k.wins) > 0 {
			l.nextClose = min(l.nextClose, k.wins[0].open+l.window)
		}
	}
}

// limitInt reads a non-negative decimal integer of at most 18 digits.
func limitInt(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c-'0' > 9 {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// limitFixed reads digits ['.' digits], at most 10 before the point and 8
// after it, as an integer of 10^-8 (below 10^18, so nothing overflows).
func limitFixed(b []byte) (int64, bool) {
	var n int64
	digits, dp := 0, -1
	for i, c := range b {
		switch {
		case c-'0' <= 9:
			if digits++; digits > 18 {
				return 0, false
			}
			n = n*10 + int64(c-'0')
			if dp >= 0 {
				dp++
			}
		case c == '.' && dp < 0 && i > 0 && i < len(b)-1:
			dp = 0
		default:
			return 0, false
		}
	}
	if digits == 0 || dp > 8 || digits-max(dp, 0) > 10 {
		return 0, false
	}
	for dp = max(dp, 0); dp < 8; dp++ {
		n *= 10
	}
	return n, true
}

// TestCoreLimitAgreesWithAggregator holds BenchmarkAggregatorCoreLimit to
// being a floor of the same work: over the benchmark's records it closes the
// same windows as the aggregator, with the same open, high, low, close,
// volume, quote volume and count.
func TestCoreLimitAgreesWithAggregator(t *testing.T) {
	recs, keys := benchKeyedTrades(1 << 18)
	a := newBenchAggregator(t)
	l := newCoreLimit(60_000, 2_000)
	var out Output
	for i := range recs {
		a.Process(Record{Offset: int64(i), Key: keys[i], Value: recs[i]}, &out)
		if len(out.Rejected) > 0 {
			t.Fatalf("aggregator rejected record %d: %s", i, out.Rejected[0].Detail)
		}
		if !l.process(keys[i], recs[i]) {
			t.Fatalf("limit refused record %d: %s", i, recs[i])
		}
	}
	// 2^18 trades at 1000 per second of event time: 4 minutes closed for
	// each of the 1000 symbols.
	if len(out.Candles) < 4000 || len(out.Candles) != len(l.out) {
		t.Fatalf("aggregator closed %d candles, limit %d; want the same, at least 4000", len(out.Candles), len(l.out))
	}
	type id struct {
		sym  string
		open int64
	}
	got := make(map[id]limitCandle, len(l.out))
	for _, c := range l.out {
		got[id{c.sym, c.open}] = c
	}
	fixed := func(v int64, places int) *big.Rat {
		return new(big.Rat).SetFrac(big.NewInt(v), new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(places)), nil))
	}
	dec := func(d decimal.Decimal) *big.Rat { return decimal.Sum{}.AddDecimal(d).Rat() }
	for _, want := range out.Candles {
		c, ok := got[id{want.Symbol, want.OpenTime}]
		if !ok || want.Gap {
			t.Fatalf("candle %s %d: aggregator has it (gap %t), limit has it: %t", want.Symbol, want.OpenTime, want.Gap, ok)
		}
		quote := new(big.Int).Lsh(new(big.Int).SetUint64(c.quoteHi), 64)
		quote.Or(quote, new(big.Int).SetUint64(c.quote))
		for _, f := range []struct {
			name      string
			have, got *big.Rat
		}{
			{"open", dec(want.Open), fixed(c.o, 8)}, {"high", dec(want.High), fixed(c.h, 8)},
			{"low", dec(want.Low), fixed(c.l, 8)}, {"close", dec(want.Close), fixed(c.c, 8)},
			{"volume", want.Volume.Rat(), fixed(c.vol, 8)},
			{"quote_volume", want.QuoteVolume.Rat(), new(big.Rat).SetFrac(quote, big.NewInt(1e16))},
			{"trades", big.NewRat(want.Trades, 1), big.NewRat(c.n, 1)},
		} {
			if f.have.Cmp(f.got) != 0 {
				t.Errorf("candle %s %d: %s is %s from the aggregator, %s from the limit",
					want.Symbol, want.OpenTime, f.name, f.have.FloatString(16), f.got.FloatString(16))
			}
		}
	}
}
