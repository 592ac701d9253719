package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/connectors/dynamodb"
	"github.com/kandle/kandle/connectors/s3parquet"
	"github.com/kandle/kandle/internal/testkit"
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
