package s3parquet

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kandle/kandle/internal/testkit"
)

// startS3rver runs s3rver on addr with its data in dir, so a test can stop
// it and start it again on the same port with the same objects.
func startS3rver(t *testing.T, addr, dir string) *testkit.Service {
	t.Helper()
	bin := filepath.Join(testkit.EmuDir(t), "node_modules", ".bin", "s3rver")
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	ready := func() error {
		resp, err := http.Get("http://" + addr)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	return testkit.Start(t, "s3rver", addr, ready, "node",
		[]string{bin, "--address", "127.0.0.1", "--port", port, "--directory", dir, "--silent"})
}

// TestS3rverOutage: the S3 server process is killed mid-run and started
// again on the same port; the pending Flush retries through the outage and
// every candle ends up stored once.
func TestS3rverOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	addr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	dir := t.TempDir()
	srv := startS3rver(t, addr, dir)
	c := s3Client(srv.URL(), "S3RVER", "S3RVER")
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("lake")}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	s, err := New(ctx, Config{URL: "s3://lake/c", Endpoint: srv.URL(), PathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider("S3RVER", "S3RVER", ""), MaxBackoff: 100 * time.Millisecond, RequestTimeout: 5 * time.Second,
		UnconditionalWrites: true}, // s3rver ignores conditional PUTs
		WithLogger(quietLogger()), WithRegisterer(reg), WithMinBackoff(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	cs := gen("BTC/USDT")
	half := len(cs) / 2
	writeBatches(t, s, cs[:half], 300)
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	srv.Stop()
	// Writes may flush too (a day completes), so they block like Flush.
	done := make(chan error, 1)
	go func() { done <- writeAndFlush(ctx, s, cs[half-20:], 300) }() // with a redelivered stretch
	deadline := time.Now().Add(15 * time.Second)
	for counter(t, reg, "kandle_s3parquet_retries_total") < 2 {
		if time.Now().After(deadline) {
			t.Fatal("Flush is not retrying while s3rver is down")
		}
		time.Sleep(10 * time.Millisecond)
	}
	startS3rver(t, addr, dir)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Flush after s3rver came back: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Flush did not finish after s3rver came back")
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	checkObjects(t, listObjects(t, c, "lake"), expectedObjects("c", cs))
}
