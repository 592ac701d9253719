package valkey

import (
	"context"
	"math/rand/v2"
	"time"
)

const (
	backoffMin = 20 * time.Millisecond
	backoffMax = 2 * time.Second
)

// backoff returns the jittered exponential delay before retry number n (0-based):
// a random duration in [d/2, d) with d = min(backoffMin·2^n, backoffMax).
func backoff(n int) time.Duration {
	d := backoffMax
	if n < 16 {
		d = min(backoffMin<<n, backoffMax)
	}
	return d/2 + rand.N(d/2)
}

// sleep waits d or until ctx is done, reporting whether it waited fully.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
