package s3parquet

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kandle/kandle/candle"
)

// TestOutage: the S3 endpoint goes away mid-run and comes back on the same
// port. Flush keeps retrying meanwhile and then succeeds; a Flush whose
// context ends during the outage returns an error and keeps the candles
// buffered. Nothing is lost or duplicated.
func TestOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFakeS3(t, "lake")
	reg := prometheus.NewRegistry()
	cfg := f.config("lake")
	cfg.MaxBackoff = 50 * time.Millisecond
	cfg.RequestTimeout = 2 * time.Second
	s, err := New(ctx, cfg, WithLogger(quietLogger()), WithRegisterer(reg), WithMinBackoff(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	cs := gen("BTC/USDT", "ETH-USD")
	third := len(cs) / 3
	writeBatches(t, s, cs[:third], 200)
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	f.stop()
	// During the outage: writes and a flush bounded by a context give up
	// with the context's error, and the candles stay buffered.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = writeAndFlush(short, s, cs[third-50:2*third], 200)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush during outage = %v, want a context error", err)
	}
	if s.rows == 0 {
		t.Fatal("nothing buffered after a failed flush")
	}

	// Unbounded writes and flushes wait out the outage (writes may flush
	// too, when a day completes).
	done := make(chan error, 1)
	retries := counter(t, reg, "kandle_s3parquet_retries_total")
	// Everything from the failed call on is delivered again, as after a
	// failed poll batch.
	go func() { done <- writeAndFlush(ctx, s, cs[third-50:], 200) }()
	deadline := time.Now().Add(10 * time.Second)
	for counter(t, reg, "kandle_s3parquet_retries_total") < retries+3 {
		if time.Now().After(deadline) {
			t.Fatal("Flush is not retrying during the outage")
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("Flush returned %v while S3 was down", err)
	default:
	}
	f.restart()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Flush after recovery: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Flush did not finish after S3 came back")
	}

	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	checkObjects(t, listObjects(t, f.client(), "lake"), expectedObjects("", cs))
}

// writeAndFlush writes cs in batches of n and flushes, returning the first
// error (for use off the test goroutine).
func writeAndFlush(ctx context.Context, s *Sink, cs []candle.Candle, n int) error {
	for i := 0; i < len(cs); i += n {
		if err := s.Write(ctx, cs[i:min(i+n, len(cs))]); err != nil {
			return err
		}
	}
	return s.Flush(ctx)
}
