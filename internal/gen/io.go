package gen

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Stream is a record generator: a Generator or a DeviceFleet.
type Stream interface {
	Next() (key, value []byte, ok bool)
}

// Stamped streams say the ingestion time of the record Next returned last
// (Produce sets it as the Kafka record timestamp).
type Stamped interface {
	Stamp() time.Time
}

// WriteJSONLines writes every record's value to w, one per line, and
// returns how many it wrote. With an unbounded Config it stops only on a
// write error.
func WriteJSONLines(w io.Writer, g Stream) (int, error) {
	bw := bufio.NewWriterSize(w, 64<<10)
	n := 0
	for {
		_, v, ok := g.Next()
		if !ok {
			break
		}
		bw.Write(v)
		if err := bw.WriteByte('\n'); err != nil {
			return n, fmt.Errorf("gen: write record %d: %w", n+1, err)
		}
		n++
	}
	if err := bw.Flush(); err != nil {
		return n, fmt.Errorf("gen: flush: %w", err)
	}
	return n, nil
}

// Produce sends g's records to topic, keyed by symbol, through cl's async
// batching producer, one every pace (0: as fast as the client takes them),
// and flushes at the end. It returns how many records the broker
// acknowledged and the first error; it stops early on an error or when ctx
// ends.
func Produce(ctx context.Context, cl *kgo.Client, topic string, g Stream, pace time.Duration) (int, error) {
	var (
		acked    atomic.Int64
		mu       sync.Mutex
		firstErr error
		failed   atomic.Bool
	)
	promise := func(r *kgo.Record, err error) {
		if err == nil {
			acked.Add(1)
			return
		}
		mu.Lock()
		if firstErr == nil {
			firstErr = fmt.Errorf("gen: produce to %s: %w", topic, err)
		}
		mu.Unlock()
		failed.Store(true)
	}
	var timer *time.Timer
	if pace > 0 {
		timer = time.NewTimer(0)
		defer timer.Stop()
		<-timer.C
	}
	start := time.Now()
	var stopErr error
	for sent := 0; ; sent++ {
		if failed.Load() {
			break
		}
		if pace > 0 {
			// Pace against the start, so timer slack does not lower the rate.
			if wait := time.Until(start.Add(time.Duration(sent) * pace)); wait > 0 {
				timer.Reset(wait)
				select {
				case <-timer.C:
				case <-ctx.Done():
				}
			}
		}
		if err := ctx.Err(); err != nil {
			stopErr = err
			break
		}
		k, v, ok := g.Next()
		if !ok {
			break
		}
		r := &kgo.Record{Topic: topic, Key: k, Value: v}
		if st, ok := g.(Stamped); ok {
			r.Timestamp = st.Stamp() // when the record is taken to have been ingested
		}
		cl.Produce(ctx, r, promise)
	}
	if err := cl.Flush(ctx); err != nil && stopErr == nil {
		stopErr = fmt.Errorf("gen: flush: %w", err)
	}
	mu.Lock()
	defer mu.Unlock()
	return int(acked.Load()), errors.Join(firstErr, stopErr)
}
