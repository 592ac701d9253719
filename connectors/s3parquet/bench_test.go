package s3parquet

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
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
