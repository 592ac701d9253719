package s3parquet

import (
	"context"
	"errors"
	"fmt"

	"github.com/kandle/kandle/connectors/sinkkit"
)

// retry runs fn until it succeeds, fails permanently or ctx ends, pausing
// with sinkkit's jittered exponential backoff (minBackoff doubling to
// MaxBackoff; each pause is uniform in [d/2, d]).
func (s *Sink) retry(ctx context.Context, what string, fn func(context.Context) error) error {
	policy := sinkkit.Backoff{Min: s.minBackoff, Max: s.cfg.MaxBackoff}
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
			return stopped(ctx, what, attempt, err)
		}
		if permanent(err) || errors.Is(err, errConflict) {
			return err // a conflict needs a new read: upsert handles it
		}
		pause := policy.Delay(attempt - 1)
		s.log.Warn("s3parquet: write failed, retrying", "object", what, "attempt", attempt, "pause", pause, "err", err)
		s.m.retries.Inc()
		if sinkkit.Sleep(ctx, pause) != nil {
			return stopped(ctx, what, attempt, err)
		}
	}
}

// stopped wraps both the context's error (so errors.Is(err,
// context.Canceled) holds) and the last failure (the cause to report).
func stopped(ctx context.Context, what string, attempts int, last error) error {
	return fmt.Errorf("%s: stopped after %d attempt(s): %w; last error: %w", what, attempts, context.Cause(ctx), last)
}
