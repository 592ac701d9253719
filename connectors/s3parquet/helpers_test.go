package s3parquet

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
)

// fakeS3 is an in-process S3 (gofakes3) that can go away and come back on
// the same port with its data intact.
type fakeS3 struct {
	t       testing.TB
	handler http.Handler
	addr    string
	srv     *httptest.Server
}

func newFakeS3(t testing.TB, buckets ...string) *fakeS3 {
	t.Helper()
	f := &fakeS3{t: t, handler: gofakes3.New(s3mem.New()).Server()}
	f.srv = httptest.NewServer(f.handler)
	f.addr = f.srv.Listener.Addr().String()
	t.Cleanup(func() {
		if f.srv != nil {
			f.srv.Close()
		}
	})
	for _, b := range buckets {
		if _, err := f.client().CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(b)}); err != nil {
			t.Fatalf("create bucket %s: %v", b, err)
		}
	}
	return f
}

func (f *fakeS3) url() string { return "http://" + f.addr }

// stop closes the server: connections are refused from now on.
func (f *fakeS3) stop() {
	f.srv.Close()
	f.srv = nil
}

// restart serves the same data on the same port again.
func (f *fakeS3) restart() {
	f.t.Helper()
	var l net.Listener
	var err error
	for i := 0; i < 100; i++ { // the port may linger briefly after Close
		if l, err = net.Listen("tcp", f.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		f.t.Fatalf("relisten on %s: %v", f.addr, err)
	}
	f.srv = &httptest.Server{Listener: l, Config: &http.Server{Handler: f.handler}}
	f.srv.Start()
}

func (f *fakeS3) client() *s3.Client { return s3Client(f.url(), "test", "test") }

func (f *fakeS3) config(bucketPrefix string) Config {
	return Config{URL: "s3://" + bucketPrefix, Endpoint: f.url(), PathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")}
}

func s3Client(endpoint, key, secret string) *s3.Client {
	return s3.New(s3.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(endpoint), UsePathStyle: true,
		Credentials:                credentials.NewStaticCredentialsProvider(key, secret, ""),
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

// listObjects returns every key in bucket with its bytes.
func listObjects(t testing.TB, c *s3.Client, bucket string) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	out := map[string][]byte{}
	p := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatalf("list %s: %v", bucket, err)
		}
		for _, o := range page.Contents {
			if strings.HasSuffix(*o.Key, ProbeKey) {
				continue // the start-up probe of conditional writes, not a partition
			}
			g, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: o.Key})
			if err != nil {
				t.Fatalf("get %s: %v", *o.Key, err)
			}
			b, err := io.ReadAll(g.Body)
			g.Body.Close()
			if err != nil {
				t.Fatalf("read %s: %v", *o.Key, err)
			}
			out[*o.Key] = b
		}
	}
	return out
}

// gen makes closed candles for each symbol: 1m candles from 2026-11-21
// 22:00 to 2026-11-23 01:59 UTC (crossing two midnights), 1h candles over
// the same span and the 1d candles of the three days, with exact decimals
// that use all 18 places; the candles of every other symbol carry taker
// volumes (36 places) and trade ids. They come ordered by close time, as an engine
// reading several candle topics would see them.
func gen(symbols ...string) []candle.Candle {
	start := time.Date(2026, 11, 21, 22, 0, 0, 0, time.UTC).UnixMilli()
	end := time.Date(2026, 11, 23, 2, 0, 0, 0, time.UTC).UnixMilli()
	var cs []candle.Candle
	for si, sym := range symbols {
		for _, tf := range []string{"1m", "1h", "1d"} {
			t, _ := candle.ParseTimeframe(tf, nil)
			for o := t.Start(start); o < end; o = t.End(o) {
				n := o/60_000 + int64(si)*7
				px := decimal.MustParse(fmt.Sprintf("%d.%018d", 60000+n%997, (n*7919)%1_000_000_000_000_000_000))
				vol := decimal.MustParse(fmt.Sprintf("0.%018d", 1+(n*104729)%999_999_999_999_999_999))
				hi, _ := px.Add(decimal.MustParse("12.5"))
				lo, _ := px.Sub(decimal.MustParse("0.000000000000000001"))
				c := candle.Candle{Symbol: sym, Timeframe: tf, OpenTime: o, CloseTime: t.End(o),
					Open: px, High: hi, Low: lo, Close: px, Volume: decimal.SumOf(vol), QuoteVolume: decimal.SumOf(vol),
					Trades: n % 50, Gap: n%50 == 0}
				if si%2 == 0 { // a source with a side and trade ids; the others have neither
					c.Taker, c.TakerBuyVolume, c.TakerBuyQuoteVolume = true, decimal.SumOf(vol), decimal.Product(px, vol) // 36 places
					c.FirstTradeID, c.LastTradeID = fmt.Sprint(n), fmt.Sprintf("t-%d", n)
				}
				if c.Gap {
					c.Volume, c.QuoteVolume, c.High, c.Low = decimal.Sum{}, decimal.Sum{}, px, px
					c.TakerBuyVolume, c.TakerBuyQuoteVolume, c.FirstTradeID, c.LastTradeID = decimal.Sum{}, decimal.Sum{}, "", ""
				}
				cs = append(cs, c)
			}
		}
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].CloseTime < cs[j].CloseTime })
	return cs
}

// expectedObjects groups cs by object key (with prefix) into sorted,
// de-duplicated candle lists.
func expectedObjects(prefix string, cs []candle.Candle) map[string][]candle.Candle {
	byKey := map[string]map[int64]candle.Candle{}
	for _, c := range cs {
		k := PartitionPath(c.Timeframe, c.Symbol, c.OpenTime)
		if prefix != "" {
			k = prefix + "/" + k
		}
		if byKey[k] == nil {
			byKey[k] = map[int64]candle.Candle{}
		}
		byKey[k][c.OpenTime] = c
	}
	out := map[string][]candle.Candle{}
	for k, m := range byKey {
		for _, c := range m {
			out[k] = append(out[k], c)
		}
		slices.SortFunc(out[k], func(a, b candle.Candle) int { return int(a.OpenTime - b.OpenTime) })
	}
	return out
}

// checkObjects asserts objects hold exactly want: the same keys, and each
// object decodes to exactly its candles, in open_time order.
func checkObjects(t testing.TB, objects map[string][]byte, want map[string][]candle.Candle) {
	t.Helper()
	for k := range objects {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected object %s", k)
		}
	}
	total := 0
	for k, wcs := range want {
		data, ok := objects[k]
		if !ok {
			t.Errorf("missing object %s", k)
			continue
		}
		got, err := Decode(data)
		if err != nil {
			t.Fatalf("decode %s: %v", k, err)
		}
		if len(got) != len(wcs) {
			t.Errorf("%s: %d candles, want %d", k, len(got), len(wcs))
			continue
		}
		for i := range got {
			if !got[i].Equal(&wcs[i]) {
				t.Errorf("%s row %d:\n got %+v\nwant %+v", k, i, got[i], wcs[i])
				break
			}
		}
		total += len(got)
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d objects, %d candles, all exact", len(want), total)
}

// fakeClock is a Clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func counter(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

// encode is the sink's encoder for tests: cs as one Parquet file.
func encode(cs []candle.Candle, rowGroupRows int) ([]byte, error) {
	e, err := newEncoder(1)
	if err != nil {
		return nil, err
	}
	return e.encode(cs, rowGroupRows)
}
