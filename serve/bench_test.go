package serve

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/coder/websocket"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/connectors/dynamodb"
	"github.com/kandle/kandle/connectors/s3parquet"
	"github.com/kandle/kandle/internal/testkit"
	"github.com/kandle/kandle/topology"
	"github.com/kandle/kandle/topology/spec"
)

// The serving benchmarks (make bench; results in docs/performance.md).
// Latencies are measured per request and reported as p50/p99 metrics.

type hotAdapter struct{ s *dynamodb.Sink }

func (h hotAdapter) Page(ctx context.Context, symbol string, tf candle.Timeframe, from, to int64, limit int, newestFirst bool) ([]candle.Candle, error) {
	return h.s.Reader().Page(ctx, symbol, tf.String(), from, to, limit, newestFirst)
}

type coldAdapter struct{ r *s3parquet.Reader }

func (c coldAdapter) Page(ctx context.Context, symbol string, tf candle.Timeframe, from, to int64, limit int, newestFirst bool) ([]candle.Candle, error) {
	return c.r.Candles(ctx, symbol, tf, from, to, limit, newestFirst)
}

// latency runs req b.N times and reports p50 and p99.
func latency(b *testing.B, req func()) {
	ds := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		req()
		ds = append(ds, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds())/1000, "p99-ms")
}

func fetch(b *testing.B, url string, want int) {
	resp, err := http.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	var p pageBody
	err = json.NewDecoder(resp.Body).Decode(&p)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || len(p.Candles) != want {
		b.Fatalf("%s: status %d, %d candles (want %d), %v", url, resp.StatusCode, len(p.Candles), want, err)
	}
}

// BenchmarkAPIHot1000: one request for 1,000 1m candles from DynamoDB
// (dynalite on loopback).
func BenchmarkAPIHot1000(b *testing.B) {
	b.Setenv("AWS_ACCESS_KEY_ID", "test")
	b.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	b.Setenv("AWS_REGION", "us-east-1")
	ddb := testkit.Dynalite(b)
	ctx := context.Background()
	sink, err := dynamodb.New(ctx, dynamodb.Config{
		Table:     dynamodb.TableSpec{Name: "candles", PKAttribute: "pk", SKAttribute: "sk", SKType: "N"},
		Provision: true, Endpoint: ddb.URL(), PK: "{symbol}#{timeframe}", SK: "{open_time}",
	}, dynamodb.WithLogger(quiet()))
	if err != nil {
		b.Fatal(err)
	}
	m1 := tf(b, "1m")
	cs := series("BTC/USDT", m1, time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).UnixMilli(), 1000, 1)
	if err := sink.Write(ctx, cs); err != nil {
		b.Fatal(err)
	}
	if err := sink.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	cfg := defaults(b)
	s, err := New(Options{Config: cfg, Timeframes: map[string]candle.Timeframe{"1m": m1}, Hot: hotAdapter{sink}, Log: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	url := fmt.Sprintf("%s/v1/candles?symbol=BTC%%2FUSDT&timeframe=1m&start=%d&end=%d&limit=1000", start(b, s), cs[0].OpenTime, cs[999].CloseTime)
	latency(b, func() { fetch(b, url, 1000) })
}

// BenchmarkAPIColdMonth: one request for a month (30 days, 43,200) of 1m
// candles from the S3 Parquet lake (in-process S3 on loopback), and how
// many bytes it reads compared with the objects' size.
func BenchmarkAPIColdMonth(b *testing.B) {
	srv := httptest.NewServer(gofakes3.New(s3mem.New()).Server())
	b.Cleanup(srv.Close)
	ctx := context.Background()
	raw := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")})
	if _, err := raw.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("lake")}); err != nil {
		b.Fatal(err)
	}
	lake := s3parquet.Config{URL: "s3://lake/candles", Endpoint: srv.URL, PathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")}
	sink, err := s3parquet.New(ctx, lake, s3parquet.WithLogger(quiet()))
	if err != nil {
		b.Fatal(err)
	}
	m1 := tf(b, "1m")
	const n = 30 * 1440
	first := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	cs := series("BTC/USDT", m1, first, n, 1)
	for i := 0; i < n; i += 5000 {
		if err := sink.Write(ctx, cs[i:min(i+5000, n)]); err != nil {
			b.Fatal(err)
		}
	}
	if err := sink.Close(ctx); err != nil {
		b.Fatal(err)
	}
	r, err := s3parquet.NewReader(ctx, lake)
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	for d := 0; d < 30; d++ {
		size, err := r.ObjectSize(ctx, "BTC/USDT", "1m", first+int64(d)*86_400_000)
		if err != nil || size == 0 {
			b.Fatalf("object of day %d: %d, %v", d, size, err)
		}
		total += size
	}
	cfg := defaults(b)
	cfg.MaxLimit = n
	s, err := New(Options{Config: cfg, Timeframes: map[string]candle.Timeframe{"1m": m1}, Cold: coldAdapter{r}, Log: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	url := fmt.Sprintf("%s/v1/candles?symbol=BTC%%2FUSDT&timeframe=1m&start=%d&end=%d&limit=%d", start(b, s), first, cs[n-1].CloseTime, n)
	// CPU of the whole process per request: the API, the reader and the
	// in-process S3 (getrusage).
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	reads0, bytes0 := r.ReadStats()
	cpu0 := cpu()
	latency(b, func() { fetch(b, url, n) })
	cpu1 := cpu()
	reads1, bytes1 := r.ReadStats()
	perReq := float64(bytes1-bytes0) / float64(b.N)
	b.ReportMetric(float64(cpu1-cpu0)/float64(b.N)/1e6, "cpu-ms/req")
	b.ReportMetric(float64(reads1-reads0)/float64(b.N), "reads/req")
	b.ReportMetric(perReq, "bytes-read/req")
	b.ReportMetric(float64(total), "object-bytes")
	b.ReportMetric(perReq/float64(total), "read/object")

	// A one-hour range inside one day reads a fraction of its object.
	hour := fmt.Sprintf("%s/v1/candles?symbol=BTC%%2FUSDT&timeframe=1m&start=%d&end=%d&limit=60", strings.SplitN(url, "/v1", 2)[0], first+12*3_600_000, first+13*3_600_000)
	_, h0 := r.ReadStats()
	fetch(b, hour, 60)
	_, h1 := r.ReadStats()
	b.ReportMetric(float64(h1-h0), "hour-bytes-read")
	b.ReportMetric(float64(total)/30, "day-object-bytes")
}

// The fan-out benchmark runs the server in a child process (this test
// binary again) so that 10,000 client connections and their 10,000
// server ends each fit one process's file limit. The child serves the
// stream from an in-memory feed and exposes /bench/publish and /bench/mem.

const fanoutEnv = "KANDLE_FANOUT_SERVER"

// fanoutProfileEnv is the prefix of the CPU profiles of the timed loop
// (-cpuprofile would profile only the benchmark's own process, the
// clients, and their connecting too).
const fanoutProfileEnv = "KANDLE_FANOUT_CPUPROFILE"

// TestMain turns this test binary into the fan-out benchmark's server
// process when it is started as one.
func TestMain(m *testing.M) {
	if os.Getenv(fanoutEnv) != "" {
		if err := fanoutServer(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fanoutServer serves until stdin closes.
func fanoutServer() error {
	mem := NewMemory(10)
	m1, _ := candle.ParseTimeframe("1m", nil)
	var cfg topology.Serve
	if err := spec.FillDefaults(&cfg); err != nil {
		return err
	}
	cfg.ClientQueue = 1024
	s, err := New(Options{Config: cfg, Timeframes: map[string]candle.Timeframe{"1m": m1}, Live: mem, Feed: mem, Log: quiet()})
	if err != nil {
		return err
	}
	mem.Active(series("BTC/USDT", m1, 0, 1, 1)[0])
	mux := http.NewServeMux()
	mux.Handle("/", s.Handler())
	var seq atomic.Int64
	seq.Store(1)
	mux.HandleFunc("/bench/publish", func(w http.ResponseWriter, r *http.Request) {
		c := series("BTC/USDT", m1, seq.Add(1)*60_000, 1, 1)[0]
		c.Trades = time.Now().UnixMicro() // the send time, for the delivery delay
		mem.Active(c)
	})
	var profMu sync.Mutex
	var prof *os.File
	mux.HandleFunc("/bench/profile", func(w http.ResponseWriter, r *http.Request) {
		profMu.Lock()
		defer profMu.Unlock()
		if to := r.URL.Query().Get("to"); to != "" {
			f, err := os.Create(to)
			if err == nil {
				err = pprof.StartCPUProfile(f)
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			prof = f
			return
		}
		if prof != nil {
			pprof.StopCPUProfile()
			prof.Close()
			prof = nil
		}
	})
	mux.HandleFunc("/bench/mem", func(w http.ResponseWriter, r *http.Request) {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fmt.Fprintf(w, "%d %d\n", ms.HeapInuse+ms.StackInuse, runtime.NumGoroutine())
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	var wg sync.WaitGroup
	wg.Go(func() { s.hub.run(ctx) })
	srv := httptest.NewServer(mux)
	fmt.Printf("FANOUT-URL %s\n", srv.URL)
	_, _ = io.Copy(io.Discard, os.Stdin) // the parent closes stdin to stop us
	cancel()
	wg.Wait()
	srv.CloseClientConnections()
	srv.Close()
	return nil
}

// BenchmarkStreamFanout: 10,000 WebSocket clients on loopback subscribed to
// one series; each iteration publishes one update and waits until every
// client has it. Reports messages/s, p50 and p99 delivery delay and server
// memory per client.
//
// The clients share the two cores with the server, so they do as little as
// a client can: they count frames (the subscription's reply, the snapshot,
// then one update per iteration) and note when each arrived, and only one
// client in fanoutSample parses every frame as JSON and checks it is the
// update published (series and window). A delay runs from just before the
// benchmark asks the server to publish (an HTTP request) to the client's
// read of the frame. With KANDLE_FANOUT_CPUPROFILE=prefix the server and the
// clients each write a CPU profile of the timed loop (prefix.server,
// prefix.clients).
func BenchmarkStreamFanout(b *testing.B) {
	const clients = 10_000
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), fanoutEnv+"=1")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	var base string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), "FANOUT-URL "); ok {
			base = u
			break
		}
	}
	if base == "" {
		b.Fatal("the server process printed no URL")
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	get := func(path string) string {
		resp, err := http.Get(base + path)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("%s: %d %s %v", path, resp.StatusCode, body, err)
		}
		return string(body)
	}
	memOf := func() (m int64, g int) {
		fmt.Sscan(get("/bench/mem"), &m, &g)
		return m, g
	}
	mem0, _ := memOf()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	wsURL := "ws" + strings.TrimPrefix(base, "http") + "/v1/stream"
	var received atomic.Int64
	published := make([]atomic.Int64, b.N+1) // unix ns before update i was asked for
	delays := make([]time.Duration, clients*b.N)
	var bad atomic.Pointer[string]
	var wg sync.WaitGroup
	defer wg.Wait()
	conns := make([]*websocket.Conn, 0, clients)
	defer func() {
		for _, c := range conns {
			c.CloseNow()
		}
	}()
	for i := 0; i < clients; i++ {
		c, _, err := websocket.Dial(ctx, wsURL, nil)
		if err != nil {
			b.Fatalf("client %d: %v", i, err)
		}
		conns = append(conns, c)
		if err := c.Write(ctx, websocket.MessageText, []byte(subBTC)); err != nil {
			b.Fatal(err)
		}
		wg.Go(func() { fanoutClient(c, i, i%fanoutSample == 0, b.N, published, delays, &received, &bad) })
	}
	for received.Load() < clients { // every snapshot arrived: all subscribed
		if ctx.Err() != nil {
			b.Fatalf("only %d of %d clients subscribed", received.Load(), clients)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mem1, goroutines := memOf()
	var prof *os.File
	if prefix := os.Getenv(fanoutProfileEnv); prefix != "" {
		var err error
		if prof, err = os.Create(prefix + ".clients"); err != nil {
			b.Fatal(err)
		}
		defer prof.Close()
		get("/bench/profile?to=" + url.QueryEscape(prefix+".server"))
		if err := pprof.StartCPUProfile(prof); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	t0 := time.Now()
	for i := 1; i <= b.N; i++ {
		published[i].Store(time.Now().UnixNano())
		get("/bench/publish")
		for received.Load() < int64(clients*(i+1)) {
			if ctx.Err() != nil {
				b.Fatalf("update %d reached %d of %d clients", i, received.Load()-int64(clients*i), clients)
			}
			if p := bad.Load(); p != nil {
				b.Fatal(*p)
			}
			time.Sleep(200 * time.Microsecond)
		}
	}
	elapsed := time.Since(t0)
	b.StopTimer()
	if prof != nil {
		pprof.StopCPUProfile()
		get("/bench/profile")
	}
	if p := bad.Load(); p != nil {
		b.Fatal(*p)
	}
	slices.Sort(delays)
	b.ReportMetric(float64(clients*b.N)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64(delays[len(delays)/2].Microseconds())/1000, "p50-delay-ms")
	b.ReportMetric(float64(delays[len(delays)*99/100].Microseconds())/1000, "p99-delay-ms")
	b.ReportMetric(float64(mem1-mem0)/clients, "server-bytes/client")
	b.ReportMetric(float64(goroutines), "server-goroutines")
}

// fanoutSample: one client in this many parses its frames.
const fanoutSample = 100

// fanoutClient reads client ci's frames until its connection closes:
// the subscription's reply, the snapshot (counted in received) and updates
// 1..n, each counted in received with its delay since published[i] noted
// in delays. A parsing client checks each update is the one published;
// the first mismatch goes to bad.
func fanoutClient(c *websocket.Conn, ci int, parse bool, n int, published []atomic.Int64, delays []time.Duration, received *atomic.Int64, bad *atomic.Pointer[string]) {
	fail := func(format string, args ...any) {
		s := fmt.Sprintf("client %d: "+format, append([]any{ci}, args...)...)
		bad.CompareAndSwap(nil, &s)
	}
	buf := make([]byte, 0, 1024)
	for frame := 0; ; frame++ {
		_, r, err := c.Reader(context.Background()) // no deadline: ends with the connection
		if err != nil {
			return
		}
		buf = buf[:0]
		for {
			if len(buf) == cap(buf) {
				buf = slices.Grow(buf, len(buf))
			}
			k, err := r.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+k]
			if err == io.EOF {
				break
			}
			if err != nil {
				return
			}
		}
		at := time.Now()
		if frame == 0 {
			continue // the subscription's reply
		}
		i := frame - 1 // 0: the snapshot
		if i > n {
			fail("frame %d after the %d updates published", frame, n)
			return
		}
		if parse {
			var m msg
			// The server publishes update i in window i+1 (the snapshot's is 0).
			if err := json.Unmarshal(buf, &m); err != nil || m.Symbol != "BTC/USDT" || (i > 0 && m.OpenTime != int64(i+1)*60_000) {
				fail("frame %d is not update %d of BTC/USDT: %v %s", frame, i, err, buf)
				return
			}
		}
		if i > 0 {
			delays[(i-1)*len(delays)/n+ci] = at.Sub(time.Unix(0, published[i].Load()))
		}
		received.Add(1)
	}
}
