package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/kandle/kandle/connectors/sinkkit"
)

// do runs one request, retrying throttling and transient errors with
// jittered exponential backoff until ctx ends. Other errors are returned.
func (s *Sink) do(ctx context.Context, op string, fn func(context.Context) error) error {
	table := s.cfg.Table.Name
	for attempt := 0; ; attempt++ {
		start := time.Now()
		err := fn(ctx)
		s.m.latency.WithLabelValues(table, op).Observe(time.Since(start).Seconds())
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("dynamodb %s on table %s: %w", op, table, ctx.Err())
		}
		class := classify(err)
		s.m.errors.WithLabelValues(table, class.String()).Inc()
		if class != classTransient && class != classThrottled {
			return err
		}
		s.m.retries.WithLabelValues(table, class.String()).Inc()
		d := sinkkit.Backoff{Min: time.Duration(s.cfg.RetryBase), Max: time.Duration(s.cfg.RetryMax)}.Delay(attempt)
		if attempt%10 == 0 {
			s.log.Warn("dynamodb request failed; retrying until it succeeds or the stage stops",
				"op", op, "class", class.String(), "attempt", attempt+1, "backoff", d, "err", err)
		}
		if err := sinkkit.Sleep(ctx, d); err != nil {
			return fmt.Errorf("dynamodb %s on table %s: gave up retrying (%v): %w", op, table, err, ctx.Err())
		}
	}
}

// flushLocked dedupes the buffer (last write of a key wins), sends it in
// batches of 25 with at most MaxInFlight requests in flight, and keeps
// whatever could not be sent buffered. s.mu must be held.
func (s *Sink) flushLocked(ctx context.Context) error {
	if len(s.buf) == 0 {
		return nil
	}
	if err := s.ensureProvisioned(ctx); err != nil {
		return err
	}
	items := dedupe(s.buf)
	var chunks [][]pending
	for len(items) > 0 {
		n := min(maxBatch, len(items))
		chunks = append(chunks, items[:n:n])
		items = items[n:]
	}
	type result struct {
		left []pending
		rej  *RejectedError
		err  error
	}
	results := make([]result, len(chunks))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(s.cfg.MaxInFlight, len(chunks)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(chunks) {
					return
				}
				r := &results[i]
				r.left, r.rej, r.err = s.sendChunk(ctx, chunks[i])
			}
		})
	}
	wg.Wait()

	s.buf = s.buf[:0]
	var rej RejectedError
	var errs []error
	for _, r := range results {
		s.buf = append(s.buf, r.left...)
		rej.merge(r.rej)
		if r.err != nil && len(errs) == 0 {
			errs = append(errs, r.err)
		}
	}
	s.m.buffered.WithLabelValues(s.cfg.Table.Name).Set(float64(len(s.buf)))
	if n := len(rej.CandleErrs) + len(rej.TradeErrs); n > 0 {
		s.m.errors.WithLabelValues(s.cfg.Table.Name, "rejected").Add(float64(n))
	}
	return errors.Join(append(errs, rej.orNil())...)
}

// dedupe returns the items of buf with one item per key, the last one
// written, in the order of their last writes. buf is not modified.
func dedupe(buf []pending) []pending {
	last := make(map[string]int, len(buf))
	for i := range buf {
		last[buf[i].key] = i
	}
	out := make([]pending, 0, len(last))
	for i := range buf {
		if last[buf[i].key] == i {
			out = append(out, buf[i])
		}
	}
	return out
}

// sendChunk writes up to 25 distinct items, retrying UnprocessedItems and
// transient errors. It returns the items still unwritten (when ctx ended
// or a permanent error occurred) and the items DynamoDB refused.
func (s *Sink) sendChunk(ctx context.Context, items []pending) ([]pending, *RejectedError, error) {
	table := s.cfg.Table.Name
	rej := &RejectedError{}
	for attempt := 0; len(items) > 0; attempt++ {
		reqs := make([]types.WriteRequest, len(items))
		for i := range items {
			reqs[i] = types.WriteRequest{PutRequest: &types.PutRequest{Item: items[i].item}}
		}
		in := &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{table: reqs}}
		var out *dynamodb.BatchWriteItemOutput
		err := s.do(ctx, "BatchWriteItem", func(ctx context.Context) error {
			var err error
			out, err = s.client.BatchWriteItem(ctx, in)
			return err
		})
		if err != nil {
			if ctx.Err() == nil && classify(err) == classValidation {
				return s.isolate(ctx, items, rej, err)
			}
			var missing *types.ResourceNotFoundException
			if errors.As(err, &missing) && s.cfg.Provision {
				// The table went away (deleted, or an emulator restarted):
				// provision it again on the next flush, which the engine retries.
				s.provisioned.Store(false)
				return items, rej, fmt.Errorf("dynamodb table %s not found; it will be provisioned again: %w", table, err)
			}
			if ctx.Err() == nil {
				err = fmt.Errorf("dynamodb BatchWriteItem on table %s failed permanently; check the table exists (or set provision: true), its key schema matches table.pk_attribute/sk_attribute/sk_type, and the credentials may write it: %w", table, err)
			}
			return items, rej, err
		}
		unprocessed := out.UnprocessedItems[table]
		s.m.written.WithLabelValues(table).Add(float64(len(items) - len(unprocessed)))
		if len(unprocessed) == 0 {
			return nil, rej, nil
		}
		items = s.match(items, unprocessed)
		s.m.retries.WithLabelValues(table, "unprocessed").Inc()
		d := sinkkit.Backoff{Min: time.Duration(s.cfg.RetryBase), Max: time.Duration(s.cfg.RetryMax)}.Delay(attempt)
		s.log.Debug("dynamodb returned unprocessed items; retrying them", "items", len(items), "backoff", d)
		if err := sinkkit.Sleep(ctx, d); err != nil {
			return items, rej, fmt.Errorf("dynamodb BatchWriteItem on table %s: %w", table, err)
		}
	}
	return nil, rej, nil
}

// isolate handles a ValidationException for a batch: a batch of one is
// rejected; a larger batch is resent item by item to find the culprits.
func (s *Sink) isolate(ctx context.Context, items []pending, rej *RejectedError, cause error) ([]pending, *RejectedError, error) {
	if len(items) == 1 {
		s.log.Warn("dynamodb refused an item; returning it for dead-lettering", "err", cause)
		rej.add(items[0], fmt.Errorf("dynamodb refused the item: %w", cause))
		return nil, rej, nil
	}
	for i := range items {
		left, r, err := s.sendChunk(ctx, items[i:i+1])
		rej.merge(r)
		if err != nil {
			return append(left, items[i+1:]...), rej, err
		}
	}
	return nil, rej, nil
}

// match returns the pending items named by the unprocessed write requests.
func (s *Sink) match(items []pending, unprocessed []types.WriteRequest) []pending {
	byKey := make(map[string]pending, len(items))
	for _, p := range items {
		byKey[p.key] = p
	}
	out := make([]pending, 0, len(unprocessed))
	for _, wr := range unprocessed {
		if wr.PutRequest == nil {
			continue
		}
		k := s.itemKey(wr.PutRequest.Item)
		if p, ok := byKey[k]; ok {
			out = append(out, p)
		} else {
			out = append(out, pending{key: k, item: wr.PutRequest.Item})
		}
	}
	return out
}

// ensureProvisioned runs Apply once for this sink's table when
// Config.Provision is set, retrying while the endpoint is unreachable.
func (s *Sink) ensureProvisioned(ctx context.Context) error {
	if !s.cfg.Provision || s.provisioned.Load() {
		return nil
	}
	err := s.do(ctx, "Apply", func(ctx context.Context) error {
		plan, err := Apply(ctx, s.client, []TableSpec{s.cfg.Table}, false, WithLogger(s.log))
		if err == nil && plan.Changed() {
			s.log.Info("provisioned dynamodb table", "plan", plan.String())
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("dynamodb sink: provision table %s: %w", s.cfg.Table.Name, err)
	}
	s.provisioned.Store(true)
	return nil
}
