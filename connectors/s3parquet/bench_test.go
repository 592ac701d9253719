package s3parquet

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
	"github.com/kandle/kandle/internal/testkit"
)

// BenchmarkSinkWrite measures end-to-end throughput: 1m candles of 20
// symbols in poll batches of 1000 with the default flush policy, ending
// with a Flush, so every candle counted is durable. Flushes rewrite each
// touched day object (read, merge, write). s3rver is the real emulator
// (a separate Node process, which dominates the time); gofakes3 and file
// show the sink's own cost.
func BenchmarkSinkWrite(b *testing.B) {
	b.Run("s3rver", func(b *testing.B) {
		srv := testkit.S3rver(b)
		c := s3Client(srv.URL(), "S3RVER", "S3RVER")
		if _, err := c.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String("bench")}); err != nil {
			b.Fatal(err)
		}
		benchWrite(b, Config{URL: "s3://bench/candles", Endpoint: srv.URL(), PathStyle: true,
			Credentials: credentials.NewStaticCredentialsProvider("S3RVER", "S3RVER", ""), UnconditionalWrites: true})
	})
	b.Run("gofakes3", func(b *testing.B) {
		benchWrite(b, newFakeS3(b, "bench").config("bench/candles"))
	})
	b.Run("file", func(b *testing.B) {
		benchWrite(b, Config{URL: "file://" + b.TempDir()})
	})
}

func benchWrite(b *testing.B, cfg Config) {
	ctx := context.Background()
	s, err := New(ctx, cfg, WithLogger(quietLogger()))
	if err != nil {
		b.Fatal(err)
	}
	const nsym = 20
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	px := decimal.MustParse("65000.123456789")
	cs := make([]candle.Candle, b.N)
	for i := range cs {
		o := start + int64(i/nsym)*60_000
		cs[i] = candle.Candle{Symbol: fmt.Sprintf("SYM%02d/USDT", i%nsym), Timeframe: "1m", OpenTime: o, CloseTime: o + 60_000,
			Open: px, High: px, Low: px, Close: px, Volume: decimal.SumOf(decimal.FromInt(int64(i))), QuoteVolume: decimal.SumOf(px), Trades: int64(i)}
	}
	b.ResetTimer()
	t0 := time.Now()
	for i := 0; i < len(cs); i += 1000 {
		if err := s.Write(ctx, cs[i:min(i+1000, len(cs))]); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "candles/s")
}

// BenchmarkSinkVsIdeal compares one flush of the sink (shipped defaults: up
// to `concurrency` objects at a time) with an ideal client that only PUTs the same
// bytes (encoded beforehand by the sink's encoder) from N writers, against
// the same store. 9,600 1m candles of 200 symbols (one object each) are
// buffered below every flush threshold, so the flush at the end writes 200
// objects; every pass writes under a new prefix. Two cases:
//
//   - first_flush: the objects are new. Each is a GET that finds nothing, a
//     Parquet encode and a conditional PUT (If-None-Match: *); the ideal
//     client PUTs with the same condition.
//   - next_flush: the steady state. The first 24 minutes were flushed
//     before the clock starts (by the same sink; for the ideal client, PUT
//     and their ETags read), and the timed flush adds the last 24 minutes
//     (4,800 candles) to the same 200 objects. The sink writes from its
//     write cache (encode and PUT with If-Match, no GET; with
//     unconditional_writes it reads first); the ideal client PUTs the whole
//     objects with If-Match.
//
// The sink runs with
// the shipped concurrency and with four times it, the ideal client with as
// many writers. The machine is shared and noisy, so every round runs each
// contestant once, in a rotating order; each reports candles/s over all
// rounds and the requests it kept in flight (time-weighted mean, counted at
// its HTTP client), and the benchmark the sink's ratio to the ideal client
// with the same number in flight and to the better of the two.
func BenchmarkSinkVsIdeal(b *testing.B) {
	// The counting HTTP client replaces the SDK's, which the SDK refuses to
	// combine with a CA bundle from the environment; the emulators here
	// speak plain HTTP on loopback, so no CA bundle is needed.
	b.Setenv("AWS_CA_BUNDLE", "")
	for _, steady := range []bool{false, true} {
		name := map[bool]string{false: "first_flush", true: "next_flush"}[steady]
		b.Run("gofakes3/"+name, func(b *testing.B) {
			benchVsIdeal(b, newFakeS3(b, "bench").config("bench"), steady)
		})
		b.Run("s3rver/"+name, func(b *testing.B) {
			srv := testkit.S3rver(b)
			c := s3Client(srv.URL(), "S3RVER", "S3RVER")
			if _, err := c.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String("bench")}); err != nil {
				b.Fatal(err)
			}
			benchVsIdeal(b, Config{URL: "s3://bench", Endpoint: srv.URL(), PathStyle: true,
				Credentials:         credentials.NewStaticCredentialsProvider("S3RVER", "S3RVER", ""),
				UnconditionalWrites: true}, steady) // s3rver ignores If-Match / If-None-Match
		})
	}
}

func benchVsIdeal(b *testing.B, base Config, steady bool) {
	ctx := context.Background()
	const nsym, rows = 200, 48
	day := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	px := decimal.MustParse("65000.123456789")
	cs := make([]candle.Candle, 0, nsym*rows)
	for m := range rows { // stream order: minute by minute, every symbol
		o := day + int64(m)*60_000
		for s := range nsym {
			cs = append(cs, candle.Candle{Symbol: fmt.Sprintf("SYM%03d/USDT", s), Timeframe: "1m", OpenTime: o, CloseTime: o + 60_000,
				Open: px, High: px, Low: px, Close: px, Volume: decimal.SumOf(decimal.FromInt(int64(m))), QuoteVolume: decimal.SumOf(px), Trades: int64(m + 1)})
		}
	}
	shipped := Config{}.withDefaults()
	if len(cs) >= shipped.FlushRows {
		b.Fatalf("%d candles reach flush_rows %d: the flush would not be the one at the end", len(cs), shipped.FlushRows)
	}
	// before: flushed before the clock starts (next_flush); timed: the
	// candles of the timed flush.
	before, timed := cs[:0], cs
	if steady {
		before, timed = cs[:len(cs)/2], cs[len(cs)/2:]
	}
	type object struct {
		key  string
		data []byte
		rows []candle.Candle // the ideal client with encode: to encode on the clock
	}
	// objects returns what the sink writes for cs: one object per symbol,
	// its candles by open_time.
	enc, err := newEncoder(1)
	if err != nil {
		b.Fatal(err)
	}
	objects := func(cs []candle.Candle) []object {
		series := map[string][]candle.Candle{}
		for _, c := range cs {
			series[c.Symbol] = append(series[c.Symbol], c)
		}
		objs := make([]object, 0, nsym)
		for sym, sc := range series {
			data, err := enc.encode(sc, shipped.RowGroupRows)
			if err != nil {
				b.Fatal(err)
			}
			objs = append(objs, object{key: PartitionPath("1m", sym, day), data: data})
		}
		return objs
	}
	objs, objsBefore := objects(cs), objects(before)
	// checkSame: every contestant must leave the same objects, byte for
	// byte (checked once per contestant, after the clock).
	checkSame := func(st store) {
		for _, o := range objs {
			data, _, found, err := st.get(ctx, o.key)
			if err != nil || !found || string(data) != string(o.data) {
				b.Fatalf("%s: not the expected object (found %v, %d bytes, want %d; %v)", st.where(o.key), found, len(data), len(o.data), err)
			}
		}
	}
	newAt := func(prefix string, hc *inflight, concurrency int) *Sink {
		cfg := base
		cfg.Concurrency = concurrency
		cfg.URL = strings.TrimSuffix(base.URL, "/") + "/" + prefix
		s, err := New(ctx, cfg, WithLogger(quietLogger()), WithHTTPClient(hc))
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	run := 0
	// sink pass: Write every candle, then Flush (the timed part).
	sinkPass := func(conc int, hc *inflight) (time.Duration, time.Duration) {
		run++
		s := newAt(fmt.Sprintf("sink-%d", run), hc, conc)
		write := func(cs []candle.Candle) {
			for i := 0; i < len(cs); i += 1000 {
				if err := s.Write(ctx, cs[i:min(i+1000, len(cs))]); err != nil {
					b.Fatal(err)
				}
			}
			if err := s.Flush(ctx); err != nil {
				b.Fatal(err)
			}
		}
		if len(before) > 0 {
			write(before)
		}
		hc.start()
		defer hc.stop()
		t0, cpu0 := time.Now(), cpuTime()
		write(timed)
		el, cpu := time.Since(t0), cpuTime()-cpu0
		hc.stop()
		checkSame(s.st)
		return el, cpu
	}
	// ideal pass: PUT every object from writers goroutines. With encode,
	// the fair ideal: it also groups the timed candles by object, appends
	// them to the candles it wrote before (it remembers them, as the sink's
	// write cache does) and encodes each object with the sink's encoder,
	// on the clock; without, the store's limit: the bytes were encoded
	// beforehand.
	idealPass := func(writers int, encodeToo bool, hc *inflight) (time.Duration, time.Duration) {
		run++
		st := newAt(fmt.Sprintf("ideal-%d", run), hc, 0).st
		// The versions the timed PUTs are conditional on (next_flush).
		version := map[string]string{}
		for _, o := range objsBefore {
			if err := st.put(ctx, o.key, o.data, "", false); err != nil {
				b.Fatal(err)
			}
			_, v, _, err := st.get(ctx, o.key)
			if err != nil {
				b.Fatal(err)
			}
			version[o.key] = v
		}
		var written map[string][]candle.Candle // what it wrote before, by symbol
		if encodeToo {
			written = map[string][]candle.Candle{}
			for _, c := range before {
				written[c.Symbol] = append(written[c.Symbol], c)
			}
		}
		enc, err := newEncoder(min(writers, runtime.GOMAXPROCS(0)))
		if err != nil {
			b.Fatal(err)
		}
		errs := make(chan error, writers)
		var wg sync.WaitGroup
		hc.start()
		defer hc.stop()
		t0, cpu0 := time.Now(), cpuTime()
		work := make(chan object, len(objs))
		if encodeToo {
			series := map[string][]candle.Candle{}
			for _, c := range timed {
				series[c.Symbol] = append(series[c.Symbol], c)
			}
			for sym, sc := range series {
				work <- object{key: PartitionPath("1m", sym, day), rows: append(written[sym], sc...)}
			}
		} else {
			for _, o := range objs {
				work <- o
			}
		}
		close(work)
		for range writers {
			wg.Go(func() {
				for o := range work {
					if o.data == nil {
						var err error
						if o.data, err = enc.encode(o.rows, shipped.RowGroupRows); err != nil {
							errs <- err
							return
						}
					}
					// The sink's conditional PUT (none on s3rver): If-None-Match: *
					// for a new object, else If-Match the version written before.
					v, found := version[o.key]
					if err := st.put(ctx, o.key, o.data, v, found); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		el, cpu := time.Since(t0), cpuTime()-cpu0
		hc.stop()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		checkSame(st)
		return el, cpu
	}
	c := shipped.Concurrency
	type contestant struct {
		name string
		pass func(*inflight) (took, cpu time.Duration)
		hc   *inflight
		took time.Duration
		cpu  time.Duration // the process's CPU time while its clock ran (gofakes3: the store's included)
	}
	cts := []*contestant{
		{name: fmt.Sprintf("sink%d", c), pass: func(hc *inflight) (time.Duration, time.Duration) { return sinkPass(c, hc) }},
		{name: fmt.Sprintf("ideal%d", c), pass: func(hc *inflight) (time.Duration, time.Duration) { return idealPass(c, false, hc) }},
		{name: fmt.Sprintf("ideal_enc%d", c), pass: func(hc *inflight) (time.Duration, time.Duration) { return idealPass(c, true, hc) }},
		{name: fmt.Sprintf("sink%d", 4*c), pass: func(hc *inflight) (time.Duration, time.Duration) { return sinkPass(4*c, hc) }},
		{name: fmt.Sprintf("ideal%d", 4*c), pass: func(hc *inflight) (time.Duration, time.Duration) { return idealPass(4*c, false, hc) }},
	}
	for _, ct := range cts {
		ct.hc = newInflight()
	}
	b.ResetTimer()
	for r := range b.N { // every round runs each contestant once, in a rotating order
		for j := range cts {
			ct := cts[(j+r)%len(cts)]
			took, cpu := ct.pass(ct.hc)
			ct.took += took
			ct.cpu += cpu
		}
	}
	rate := func(ct *contestant) float64 { return float64(len(timed)*b.N) / ct.took.Seconds() }
	cpuPer := func(ct *contestant) float64 { return ct.cpu.Seconds() * 1e6 / float64(len(timed)*b.N) }
	for _, ct := range cts {
		mean, _ := ct.hc.stats()
		b.ReportMetric(rate(ct), ct.name+"_candles/s")
		b.ReportMetric(mean, ct.name+"_in_flight")
		b.ReportMetric(cpuPer(ct), ct.name+"_cpu-us/candle")
	}
	b.ReportMetric(rate(cts[0])/rate(cts[1]), "sink/ideal")
	b.ReportMetric(rate(cts[0])/max(rate(cts[1]), rate(cts[4])), "sink/best_ideal")
	b.ReportMetric(rate(cts[0])/rate(cts[2]), "sink/ideal_enc")
	// On a machine whose other load swings, CPU per candle is steadier
	// than the rates: the ideal client's CPU over the sink's.
	b.ReportMetric(cpuPer(cts[1])/cpuPer(cts[0]), "sink/ideal_cpu")
	b.ReportMetric(cpuPer(cts[2])/cpuPer(cts[0]), "sink/ideal_enc_cpu")
	b.ReportMetric(0, "ns/op")
}

// cpuTime is the CPU time this process has used (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func newInflight() *inflight { return &inflight{next: awshttp.NewBuildableClient()} }

// inflight is an HTTP client that counts the requests under way (from the
// request until its response body is closed) while a measurement runs.
type inflight struct {
	next aws.HTTPClient // the SDK's default client, as the sink has without WithHTTPClient

	mu      sync.Mutex
	on      bool
	cur     int
	peak    int
	last    time.Time
	area    time.Duration // ∫ cur dt while on
	elapsed time.Duration
}

func (c *inflight) start() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.on, c.last = true, time.Now()
}

func (c *inflight) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tick(0)
	c.on = false
}

// tick accounts the time since the last change, then adds d to cur.
func (c *inflight) tick(d int) {
	now := time.Now()
	if c.on {
		c.area += time.Duration(c.cur) * now.Sub(c.last)
		c.elapsed += now.Sub(c.last)
	}
	c.last = now
	c.cur += d
	if c.on {
		c.peak = max(c.peak, c.cur)
	}
}

func (c *inflight) stats() (mean float64, peak int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.elapsed == 0 {
		return 0, c.peak
	}
	return float64(c.area) / float64(c.elapsed), c.peak
}

func (c *inflight) Do(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.tick(1)
	c.mu.Unlock()
	var once sync.Once
	done := func() {
		once.Do(func() {
			c.mu.Lock()
			c.tick(-1)
			c.mu.Unlock()
		})
	}
	resp, err := c.next.Do(r)
	if err != nil {
		done()
		return nil, err
	}
	resp.Body = &countedBody{ReadCloser: resp.Body, done: done}
	return resp, nil
}

type countedBody struct {
	io.ReadCloser
	done func()
}

func (b *countedBody) Close() error {
	defer b.done()
	return b.ReadCloser.Close()
}
