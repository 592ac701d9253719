package valkey

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/valkey-io/valkey-go"
)

// Sink publishes live (active) and final candles to Valkey. Active is for
// the candle processor; Write, Flush and Close implement the engine's
// CandleSink for final candles. All methods are safe for concurrent use.
type Sink struct {
	cfg    Config
	names  names
	ttlMs  int64
	client valkey.Client
	log    *slog.Logger
	m      *metrics
	trips  atomic.Int64
	// requests of the final path in flight now and at most so far
	inFlight, peakInFlight atomic.Int64
	down                   atomic.Bool // the last active flush failed

	// active path: slots (the pending windows) are filled by Active and
	// taken by loop; keys holds every key the sink has seen.
	amu     sync.Mutex
	keys    map[key]*entry
	slots   []slot
	closed  bool
	wake    chan struct{}
	flushes chan chan error
	ctx     context.Context // ends the flush goroutine
	cancel  context.CancelFunc
	done    chan struct{}

	// final path
	fmu sync.Mutex
	buf []candle.Candle

	closeOnce sync.Once
	closeErr  error
}

// maxBuffered is how many finals Write holds before it flushes by itself.
const maxBuffered = 1024

// New connects to Valkey and starts the active-candle flush goroutine.
// It fails when the config is invalid or no server answers.
func New(ctx context.Context, cfg Config, opts ...Option) (*Sink, error) {
	if errs := cfg.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("valkey: invalid config: %s", strings.Join(errs, "; "))
	}
	o := options{logger: slog.Default()}
	for _, fn := range opts {
		fn(&o)
	}
	client, err := newClient(ctx, &cfg, o.clientOpt)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(o.reg)
	if err != nil {
		client.Close()
		return nil, err
	}
	// Load the finals script now, so the first flush runs it by its SHA-1
	// (a server that lost it, e.g. restarted, gets it again by EVAL).
	lctx, lcancel := context.WithTimeout(ctx, cfg.timeout())
	err = client.Do(lctx, client.B().ScriptLoad().Script(finalScript).Build()).Error()
	lcancel()
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("valkey: load the final-candle script: %w (the server must allow Lua scripts: EVAL, EVALSHA, SCRIPT LOAD)", err)
	}
	s := &Sink{
		cfg:     cfg,
		names:   names{cfg.KeyPrefix},
		ttlMs:   cfg.ActiveTTL.Milliseconds(),
		client:  client,
		log:     o.logger.With("component", "valkey-sink"),
		m:       m,
		keys:    make(map[key]*entry),
		wake:    make(chan struct{}, 1),
		flushes: make(chan chan error),
		done:    make(chan struct{}),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	go s.loop()
	return s, nil
}

// newClient builds the valkey-go client and checks the server answers.
func newClient(ctx context.Context, cfg *Config, adjust func(*valkey.ClientOption)) (valkey.Client, error) {
	if err := cfg.resolvePassword(); err != nil {
		return nil, err
	}
	opt, err := cfg.clientOption()
	if err != nil {
		return nil, err
	}
	if adjust != nil {
		adjust(&opt)
	}
	client, err := valkey.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("valkey: connect to %v: %w (check addrs, username, password_env and that the server is running)", cfg.Addrs, err)
	}
	if client.Mode() == valkey.ClientModeCluster {
		client.Close()
		return nil, fmt.Errorf("valkey: %v is a cluster, which this sink does not support yet "+
			"(finals are stored by a script across keys); point addrs at a standalone primary", cfg.Addrs)
	}
	pctx, cancel := context.WithTimeout(ctx, cfg.timeout())
	defer cancel()
	if err := client.Do(pctx, client.B().Ping().Build()).Error(); err != nil {
		client.Close()
		return nil, fmt.Errorf("valkey: ping %v: %w (check addrs, password and db)", cfg.Addrs, err)
	}
	return client, nil
}

// RoundTrips returns how many pipelines (network round trips) the sink has
// sent so far, for benchmarks and tests.
func (s *Sink) RoundTrips() int64 { return s.trips.Load() }

// PeakFinalsInFlight returns the most final-candle requests the sink has
// had in flight at once, for benchmarks and tests.
func (s *Sink) PeakFinalsInFlight() int64 { return s.peakInFlight.Load() }

// doMulti sends cmds as one pipeline on c and counts the round trip.
func (s *Sink) doMulti(ctx context.Context, c valkey.CoreClient, cmds ...valkey.Completed) []valkey.ValkeyResult {
	s.trips.Add(1)
	s.m.roundTrips.Inc()
	return c.DoMulti(ctx, cmds...)
}

// RejectedError lists candles that can never be stored (e.g. an empty
// symbol, or the key holds a non-hash value). Everything else passed to the
// same call was accepted; the engine should dead-letter these and go on.
type RejectedError struct {
	Rejected []candle.Candle
	Reasons  []string // Reasons[i] explains Rejected[i]
}

// Candles returns the rejected candles (the engine dead-letters them).
func (e *RejectedError) Candles() []candle.Candle { return e.Rejected }

func (e *RejectedError) Error() string {
	if len(e.Rejected) == 1 {
		c := &e.Rejected[0]
		return fmt.Sprintf("valkey: candle %s %s %d rejected: %s", c.Symbol, c.Timeframe, c.OpenTime, e.Reasons[0])
	}
	return fmt.Sprintf("valkey: %d candles rejected, first: %s", len(e.Rejected), e.Reasons[0])
}

func (e *RejectedError) add(c candle.Candle, why string) {
	e.Rejected = append(e.Rejected, c)
	e.Reasons = append(e.Reasons, why)
}

func (e *RejectedError) orNil() error {
	if e == nil || len(e.Rejected) == 0 {
		return nil
	}
	return e
}

// ErrClosed is returned by Write and Flush after Close.
var ErrClosed = errors.New("valkey: sink is closed")

// Write buffers final candles; Flush stores them. Invalid candles are
// returned in a *RejectedError and the rest are still buffered. When the
// buffer is large Write flushes itself, retrying until ctx is done.
func (s *Sink) Write(ctx context.Context, cs []candle.Candle) error {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if s.isClosed() {
		return ErrClosed
	}
	var rej *RejectedError
	for i := range cs {
		if why := invalid(&cs[i]); why != "" {
			if rej == nil {
				rej = &RejectedError{}
			}
			rej.add(cs[i], why)
			s.m.rejected.Inc()
			continue
		}
		s.buf = append(s.buf, cs[i])
	}
	if len(s.buf) >= maxBuffered {
		if err := s.flushFinals(ctx); err != nil {
			return err
		}
	}
	return rej.orNil()
}

// Flush stores every buffered final candle: it returns nil once all are in
// Valkey, ctx's error if ctx ends first (the candles stay buffered for the
// next Flush), or a *RejectedError listing candles that can never be stored
// (all others were stored and are no longer buffered).
func (s *Sink) Flush(ctx context.Context) error {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if s.isClosed() {
		return ErrClosed
	}
	return s.flushFinals(ctx)
}

func (s *Sink) isClosed() bool {
	s.amu.Lock()
	defer s.amu.Unlock()
	return s.closed
}

// Close flushes buffered finals and pending active candles (until ctx is
// done), stops the flush goroutine and closes the connection.
func (s *Sink) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.fmu.Lock()
		ferr := s.flushFinals(ctx)
		s.amu.Lock()
		s.closed = true // no more Active, Write or Flush
		s.amu.Unlock()
		s.fmu.Unlock()
		aerr := s.FlushActive(ctx)
		s.cancel()
		<-s.done
		s.client.Close()
		s.closeErr = errors.Join(ferr, aerr)
	})
	return s.closeErr
}

// timed runs fn with the per-round-trip timeout and records its latency.
func (s *Sink) timed(ctx context.Context, kind string, fn func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.timeout())
	defer cancel()
	start := time.Now()
	err := fn(ctx)
	if err == nil {
		s.m.latency.WithLabelValues(kind).Observe(time.Since(start).Seconds())
	}
	return err
}
