package s3parquet

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// retry runs fn until it succeeds, fails permanently or ctx ends, pausing
// with jittered exponential backoff (minBackoff doubling to MaxBackoff;
// each pause is uniform in [d/2, d]).
func (s *Sink) retry(ctx context.Context, what string, fn func(context.Context) error) error {
	d := s.minBackoff
	for attempt := 1; ; attempt++ {
		err := fn(ctx)
		if err == nil {
			if attempt > 1 {
				s.log.Info("s3parquet: write recovered", "object", what, "attempts", attempt)
			}
			return nil
		}
		s.m.errors.Inc()
		if ctx.Err() != nil {
			return fmt.Errorf("%s: gave up after %d attempt(s), stage stopping: %w", what, attempt, err)
		}
		if permanent(err) {
			return err
		}
		pause := d/2 + rand.N(d/2+1)
		s.log.Warn("s3parquet: write failed, retrying", "object", what, "attempt", attempt, "pause", pause, "err", err)
		s.m.retries.Inc()
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: gave up after %d attempt(s), stage stopping: %w", what, attempt, err)
		case <-t.C:
		}
		d = min(2*d, s.cfg.MaxBackoff)
	}
}
