package kinesis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kandle/kandle/candle"
)

// PutRecords limits.
const (
	maxPutRecords     = 500
	maxPutBytes       = 5 << 20
	maxRecordBytes    = 1 << 20
	defaultMaxRetries = 10
)

// Config configures a Sink (the kinesis sink block of a topology).
type Config struct {
	Stream     string `yaml:"stream" doc:"Stream that receives candles (partition key = symbol, data = candle JSON)."`
	Region     string `yaml:"region" default:"us-east-1" doc:"AWS region."`
	Endpoint   string `yaml:"endpoint" doc:"Custom endpoint URL (emulators); empty uses AWS."`
	MaxRetries int    `yaml:"max_retries" default:"10" doc:"Retries of a PutRecords call or of its failed records before Write/Flush fails."`
	BatchSize  int    `yaml:"batch_size" default:"500" doc:"Candles per PutRecords call (at most 500; calls also stay under 5 MiB)."`
}

// Sink writes candles to a stream. Write buffers and sends full batches;
// Flush sends the rest. A partially failed PutRecords is retried with
// jittered backoff for the failed records only, except that once a key's
// record failed, that key's later records of the same call are resent too:
// the last copy of every record in the stream is then in per-key order
// (readers upsert by (symbol, timeframe, open_time), so copies are harmless).
// Methods are safe for concurrent use.
type Sink struct {
	cfg    Config
	client PutRecordsAPI
	log    *slog.Logger
	m      *sinkMetrics

	mu      sync.Mutex
	pending []putEntry
	bytes   int
	closed  bool
}

type putEntry struct {
	key  string
	data []byte
}

func (p putEntry) size() int { return len(p.key) + len(p.data) }

// NewSink checks cfg and returns a sink writing through client.
func NewSink(client PutRecordsAPI, cfg Config, opts ...Option) (*Sink, error) {
	if client == nil {
		return nil, errors.New("kinesis: NewSink needs a Kinesis client")
	}
	if cfg.Stream == "" {
		return nil, errors.New("kinesis: sink config has no stream: set stream")
	}
	if cfg.MaxRetries <= 0 {
		cfg.MaxRetries = defaultMaxRetries
	}
	if cfg.BatchSize <= 0 || cfg.BatchSize > maxPutRecords {
		cfg.BatchSize = maxPutRecords
	}
	o := buildOptions(opts)
	m, err := newSinkMetrics(o.reg, cfg.Stream)
	if err != nil {
		return nil, err
	}
	return &Sink{cfg: cfg, client: client, log: o.log.With("stream", cfg.Stream), m: m}, nil
}

// Write queues candles and sends every full batch. Candles of one symbol
// reach the stream in the order given.
func (s *Sink) Write(ctx context.Context, cs []candle.Candle) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("kinesis: write on a closed sink")
	}
	for i := range cs {
		e := putEntry{key: cs[i].Symbol, data: cs[i].AppendJSON(nil)}
		if e.key == "" {
			return fmt.Errorf("kinesis: candle %d has no symbol (partition key)", i)
		}
		if e.size() > maxRecordBytes {
			return fmt.Errorf("kinesis: candle for %s is %d bytes, above the 1 MiB record limit", e.key, e.size())
		}
		s.pending = append(s.pending, e)
		s.bytes += e.size()
	}
	if len(s.pending) < s.cfg.BatchSize && s.bytes < maxPutBytes {
		return nil
	}
	return s.flushLocked(ctx)
}

// Flush sends everything queued and returns once it is in the stream.
func (s *Sink) Flush(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.flushLocked(ctx)
}

// Close flushes and refuses further writes.
func (s *Sink) Close(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	err := s.flushLocked(ctx)
	s.closed = true
	return err
}

func (s *Sink) flushLocked(ctx context.Context) error {
	if len(s.pending) == 0 {
		return nil
	}
	rest, err := s.send(ctx, s.pending)
	// Keep what was not written so a later Flush retries it in order.
	s.pending, s.bytes = rest, 0
	for _, e := range rest {
		s.bytes += e.size()
	}
	return err
}

// send writes queue in order, retrying failures as described on Sink. On
// error it returns the entries still to be written.
func (s *Sink) send(ctx context.Context, queue []putEntry) ([]putEntry, error) {
	failures := 0
	for len(queue) > 0 {
		n, size := 0, 0
		for n < len(queue) && n < s.cfg.BatchSize && size+queue[n].size() <= maxPutBytes {
			size += queue[n].size()
			n++
		}
		batch := queue[:n]
		in := &kinesis.PutRecordsInput{StreamName: &s.cfg.Stream, Records: make([]types.PutRecordsRequestEntry, n)}
		for i, e := range batch {
			in.Records[i] = types.PutRecordsRequestEntry{PartitionKey: aws.String(e.key), Data: e.data}
		}
		s.m.calls.Inc()
		out, err := s.client.PutRecords(ctx, in)
		var retry []putEntry
		switch {
		case err != nil && ctx.Err() != nil:
			return queue, fmt.Errorf("kinesis: put records to %s: %w", s.cfg.Stream, context.Cause(ctx))
		case err != nil:
			var invalid *types.InvalidArgumentException
			var notFound *types.ResourceNotFoundException
			if errors.As(err, &invalid) || errors.As(err, &notFound) {
				return queue, fmt.Errorf("kinesis: put records to %s (check the stream name and that it exists): %w", s.cfg.Stream, err)
			}
			retry = batch // the whole call failed: nothing was written
			s.log.Warn("kinesis: PutRecords failed, retrying", "err", err)
		case len(out.Records) != n:
			return queue, fmt.Errorf("kinesis: PutRecords to %s answered %d results for %d records", s.cfg.Stream, len(out.Records), n)
		default:
			failedKey := map[string]bool{}
			for i, r := range out.Records {
				if r.ErrorCode != nil {
					failedKey[batch[i].key] = true
				}
				if failedKey[batch[i].key] {
					retry = append(retry, batch[i]) // the failed record and its key's later ones
				}
			}
			s.m.records.Add(float64(n - len(retry)))
		}
		if len(retry) == 0 {
			failures = 0
			queue = queue[n:]
			continue
		}
		queue = slices.Concat(retry, queue[n:])
		failures++
		if failures > s.cfg.MaxRetries {
			if err == nil {
				err = fmt.Errorf("%d of %d records failed", len(retry), n)
			}
			return queue, fmt.Errorf("kinesis: put records to %s gave up after %d retries (raise max_retries or the stream's shard count): %w",
				s.cfg.Stream, s.cfg.MaxRetries, err)
		}
		s.m.retried.Add(float64(len(retry)))
		if err := sleep(ctx, backoff(failures)); err != nil {
			return queue, fmt.Errorf("kinesis: put records to %s: %w", s.cfg.Stream, err)
		}
	}
	return nil, nil
}
