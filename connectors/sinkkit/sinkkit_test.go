package sinkkit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kandle/kandle/candle"
)

// Every pause lies in [d/2, d] for d = min(Min·2ⁿ, Max), so retries spread
// out (jitter) and never exceed Max.
func TestBackoffBounds(t *testing.T) {
	b := Backoff{Min: 100 * time.Millisecond, Max: 10 * time.Second}
	for n := 0; n < 80; n++ {
		d := b.Min
		for i := 0; i < n && d < b.Max; i++ {
			d *= 2
		}
		d = min(d, b.Max)
		seen := map[time.Duration]bool{}
		for range 200 {
			p := b.Delay(n)
			if p < d/2 || p > d {
				t.Fatalf("Delay(%d) = %v, want in [%v, %v]", n, p, d/2, d)
			}
			seen[p] = true
		}
		if len(seen) < 10 {
			t.Fatalf("Delay(%d) took only %d values in 200 draws: no jitter", n, len(seen))
		}
	}
	if p := (Backoff{}).Delay(0); p < DefaultMin/2 || p > DefaultMin {
		t.Fatalf("zero policy Delay(0) = %v, want the default minimum", p)
	}
}

// Sleep waits the whole pause, or returns the context's cause at once.
func TestSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if err := Sleep(context.Background(), 3*time.Second); err != nil || time.Since(start) != 3*time.Second {
			t.Fatalf("Sleep: %v after %v", err, time.Since(start))
		}
		ctx, cancel := context.WithCancelCause(context.Background())
		why := errors.New("stopping")
		time.AfterFunc(time.Second, func() { cancel(why) })
		start = time.Now()
		if err := Sleep(ctx, time.Hour); !errors.Is(err, why) || time.Since(start) != time.Second {
			t.Fatalf("Sleep on cancel: %v after %v", err, time.Since(start))
		}
	})
}

// Down or missing servers are unreachable (wait and retry); answers from a
// server are not.
func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, dialErr := net.Dial("tcp", addr)
	if dialErr == nil {
		t.Fatal("dial to a closed port succeeded")
	}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("valkey: ping [%s]: %w", addr, dialErr), true},
		{fmt.Errorf("head bucket: %w", context.DeadlineExceeded), true},
		{&net.DNSError{Err: "no such host", Name: "s3.invalid"}, true},
		{errors.New("AccessDenied: bad credentials"), false},
		{nil, false},
	} {
		if got := Unreachable(c.err); got != c.want {
			t.Errorf("Unreachable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	if !IsRejected(fmt.Errorf("write: %w", rejected{})) || IsRejected(errors.New("timeout")) {
		t.Error("IsRejected does not tell a wrapped refusal from another error")
	}
}

type rejected struct{}

func (rejected) Error() string            { return "WRONGTYPE" }
func (rejected) Candles() []candle.Candle { return nil }
