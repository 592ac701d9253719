package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/kandle/kandle/connectors/sinkkit"
)

// do runs one request, retrying throttling and transient errors with
// jittered exponential backoff until ctx ends. Other errors are returned.
func (t *table) do(ctx context.Context, op string, fn func(context.Context) error) error {
	table := t.cfg.Table.Name
	for attempt := 0; ; attempt++ {
		start := time.Now()
		err := fn(ctx)
		t.m.latency.WithLabelValues(table, op).Observe(time.Since(start).Seconds())
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("dynamodb %s on table %s: %w", op, table, ctx.Err())
		}
		class := classify(err)
		t.m.errors.WithLabelValues(table, class.String()).Inc()
		if class != classTransient && class != classThrottled {
			return err
		}
		t.m.retries.WithLabelValues(table, class.String()).Inc()
		d := sinkkit.Backoff{Min: time.Duration(t.cfg.RetryBase), Max: time.Duration(t.cfg.RetryMax)}.Delay(attempt)
		if attempt%10 == 0 {
			t.log.Warn("dynamodb request failed; retrying until it succeeds or the stage stops",
				"op", op, "class", class.String(), "attempt", attempt+1, "backoff", d, "err", err)
		}
		if err := sinkkit.Sleep(ctx, d); err != nil {
			return fmt.Errorf("dynamodb %s on table %s: gave up retrying (%v): %w", op, table, err, ctx.Err())
		}
	}
}

// flushLocked dedupes the buffer (the highest rev of a key wins, then the
// last write), writes candles with conditional PutItems (putCandles) and
// everything else in BatchWriteItem batches of 25 with at most MaxInFlight
// requests in flight, and keeps whatever could not be sent buffered. t.mu
// must be held.
func (s *Sink) flushLocked(ctx context.Context) error {
	if len(s.buf) == 0 {
		return nil
	}
	if err := s.ensureProvisioned(ctx); err != nil {
		return err
	}
	var cands, items []pending
	for _, p := range dedupe(s.buf) {
		if p.cond {
			cands = append(cands, p)
		} else {
			items = append(items, p)
		}
	}
	var chunks [][]pending
	for len(items) > 0 {
		n := min(maxBatch, len(items))
		chunks = append(chunks, items[:n:n])
		items = items[n:]
	}
	var (
		left []pending
		rej  RejectedError
		errs []error
	)
	collect := func(l []pending, r *RejectedError, err error) {
		left = append(left, l...)
		rej.merge(r)
		if err != nil && len(errs) == 0 {
			errs = append(errs, err)
		}
	}
	if len(cands) > 0 {
		collect(s.putCandles(ctx, cands))
	}
	type result struct {
		left []pending
		rej  *RejectedError
		err  error
	}
	results := make([]result, len(chunks))
	parallel(min(s.cfg.MaxInFlight, len(chunks)), len(chunks), func(i int) {
		r := &results[i]
		r.left, r.rej, r.err = s.sendChunk(ctx, chunks[i])
	})
	for _, r := range results {
		collect(r.left, r.rej, r.err)
	}
	s.buf = append(s.buf[:0], left...)
	s.m.buffered.WithLabelValues(s.cfg.Table.Name).Set(float64(len(s.buf)))
	if n := len(rej.CandleErrs) + len(rej.TradeErrs); n > 0 {
		s.m.errors.WithLabelValues(s.cfg.Table.Name, "rejected").Add(float64(n))
	}
	return errors.Join(append(errs, rej.orNil())...)
}

// parallel runs fn(0..n-1) on at most workers goroutines and waits for them.
func parallel(workers, n int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				fn(i)
			}
		})
	}
	wg.Wait()
}

// dedupe returns the items of buf with one item per key: the one with the
// highest rev, the last written among equals (a candle's revisions never go
// back, whatever order a redelivery brings them in), in the order of the
// chosen writes. buf is not modified.
func dedupe(buf []pending) []pending {
	pick := make(map[string]int, len(buf))
	for i := range buf {
		if j, ok := pick[buf[i].key]; !ok || buf[i].rev >= buf[j].rev {
			pick[buf[i].key] = i
		}
	}
	out := make([]pending, 0, len(pick))
	for i := range buf {
		if pick[buf[i].key] == i {
			out = append(out, buf[i])
		}
	}
	return out
}

// revCondition is the condition of a candle's PutItem: the stored item has
// no rev (rev 0, or written before revisions existed) or one not above the
// candle's. A redelivered or late older revision is thus refused by
// DynamoDB itself, whichever instance writes it and however long ago the
// newer one was stored.
const revCondition = "attribute_not_exists(#rev) OR #rev <= :rev"

// putCandles writes candles, each with a PutItem conditional on its rev
// (BatchWriteItem cannot carry conditions), from at most MaxInFlight × 25
// goroutines: as many items in flight as MaxInFlight batches hold. A
// refused condition means the table already holds a newer revision: the
// candle is counted as stale and dropped, not retried. It returns the
// candles still unwritten and those DynamoDB refused.
func (s *Sink) putCandles(ctx context.Context, items []pending) ([]pending, *RejectedError, error) {
	type result struct {
		rejected error
		err      error
	}
	results := make([]result, len(items))
	parallel(min(s.cfg.MaxInFlight*maxBatch, len(items)), len(items), func(i int) {
		r := &results[i]
		r.rejected, r.err = s.putCandle(ctx, &items[i])
	})
	table := s.cfg.Table.Name
	rej := &RejectedError{}
	var left []pending
	var first error
	for i, r := range results {
		switch {
		case r.rejected != nil:
			s.log.Warn("dynamodb refused an item; returning it for dead-lettering", "err", r.rejected)
			rej.add(items[i], fmt.Errorf("dynamodb refused the item: %w", r.rejected))
		case r.err != nil:
			left = append(left, items[i])
			if first == nil {
				first = r.err
			}
		}
	}
	var missing *types.ResourceNotFoundException
	switch {
	case first == nil:
	case errors.As(first, &missing) && s.cfg.Provision:
		// The table went away (deleted, or an emulator restarted):
		// provision it again on the next flush, which the engine retries.
		s.provisioned.Store(false)
		first = fmt.Errorf("dynamodb table %s not found; it will be provisioned again: %w", table, first)
	case ctx.Err() == nil:
		first = fmt.Errorf("dynamodb PutItem on table %s failed permanently; check the table exists (or set provision: true), its key schema matches table.pk_attribute/sk_attribute/sk_type, and the credentials may write it: %w", table, first)
	}
	return left, rej, first
}

// putCandle writes one candle unless the table holds a higher rev of it.
// It returns rejected when DynamoDB refuses the item itself (validation),
// err when it could not be written (ctx ended, permanent error).
func (s *Sink) putCandle(ctx context.Context, p *pending) (rejected, err error) {
	table := s.cfg.Table.Name
	in := &dynamodb.PutItemInput{
		TableName:                 aws.String(table),
		Item:                      p.item,
		ConditionExpression:       aws.String(revCondition),
		ExpressionAttributeNames:  map[string]string{"#rev": attrRev},
		ExpressionAttributeValues: map[string]types.AttributeValue{":rev": numAttr(int64(p.rev))},
	}
	stale := false
	err = s.do(ctx, "PutItem", func(ctx context.Context) error {
		_, err := s.client.PutItem(ctx, in)
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) || isCode(err, "ConditionalCheckFailedException") {
			stale = true
			return nil
		}
		return err
	})
	switch {
	case err == nil && stale:
		s.m.stale.WithLabelValues(table).Inc()
		s.log.Debug("dynamodb holds a newer revision of a candle; the older one is not written",
			"symbol", p.c.Symbol, "timeframe", p.c.Timeframe, "open_time", p.c.OpenTime, "rev", p.rev)
		return nil, nil
	case err == nil:
		s.m.written.WithLabelValues(table).Inc()
		return nil, nil
	case ctx.Err() == nil && classify(err) == classValidation:
		return err, nil
	}
	return nil, err
}

// isCode reports whether err is an API error with the given code (an
// emulator's error may not decode into the SDK's typed exception).
func isCode(err error, code string) bool {
	var api smithy.APIError
	return errors.As(err, &api) && api.ErrorCode() == code
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
