package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kandle/kandle/candle"
)

// API is the part of *dynamodb.Client this package uses. Tests wrap it to
// count calls or inject faults.
type API interface {
	BatchWriteItem(context.Context, *dynamodb.BatchWriteItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error)
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	DescribeTable(context.Context, *dynamodb.DescribeTableInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	CreateTable(context.Context, *dynamodb.CreateTableInput, ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	UpdateTable(context.Context, *dynamodb.UpdateTableInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateTableOutput, error)
	DescribeTimeToLive(context.Context, *dynamodb.DescribeTimeToLiveInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error)
	UpdateTimeToLive(context.Context, *dynamodb.UpdateTimeToLiveInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

var _ API = (*dynamodb.Client)(nil)

// Option configures New (and Apply, which uses the logger).
type Option func(*options)

type options struct {
	log     *slog.Logger
	reg     prometheus.Registerer
	client  API
	awsCfg  *aws.Config
	httpCli *http.Client
	batch   bool // WithRevisions(false)
}

// WithRevisions says whether the candles written can carry revisions (their
// processor has a revision horizon). On (the default), each candle is a
// PutItem conditional on its rev, so a table never goes back to an older
// revision. Off, candles go out in BatchWriteItem calls of 25 like trades,
// about twice the throughput: with no revisions every write of a window is
// the same candle, and an overwrite changes nothing.
func WithRevisions(on bool) Option { return func(o *options) { o.batch = !on } }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithRegisterer registers the sink's metrics on r (default: not registered).
func WithRegisterer(r prometheus.Registerer) Option { return func(o *options) { o.reg = r } }

// WithClient uses c instead of building a client from the config (tests,
// or sharing one client between sinks). Region and Endpoint are then unused.
func WithClient(c API) Option { return func(o *options) { o.client = c } }

// WithAWSConfig starts from cfg (credentials, HTTP client, …) instead of
// config.LoadDefaultConfig; Config.Region and Config.Endpoint still apply.
func WithAWSConfig(cfg aws.Config) Option { return func(o *options) { o.awsCfg = &cfg } }

// WithHTTPClient sets the HTTP client of the built DynamoDB client.
func WithHTTPClient(c *http.Client) Option { return func(o *options) { o.httpCli = c } }

// applyOptions returns the options opts set over the defaults.
func applyOptions(opts []Option) options {
	o := options{log: slog.Default()}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// Sink writes candles (Write) or trades (WriteTrades) to one table. It
// satisfies the engine's CandleSink. Its methods are safe for concurrent
// use, though one stage normally drives it from one goroutine.
type Sink struct {
	*table

	batchCandles bool // WithRevisions(false): candles go out in batches

	candleErr, tradeErr error // set when the templates cannot render that kind

	mu          sync.Mutex
	buf         []pending
	provisioned atomic.Bool // cleared when the table turns out to be missing
	closed      bool
}

// New validates cfg and returns a sink. It does not contact DynamoDB: a
// sink can start before its endpoint is reachable, and writes wait for it.
func New(ctx context.Context, cfg Config, opts ...Option) (*Sink, error) {
	o := applyOptions(opts)
	t, err := newTable(ctx, cfg, o)
	if err != nil {
		return nil, err
	}
	s := &Sink{table: t, batchCandles: o.batch}
	if s.pk.uses(phTradeID) || s.sk.uses(phTradeID) {
		s.candleErr = fmt.Errorf("table %s: the key templates use {trade_id}, which candles do not have; use this sink for trades (WriteTrades) or change pk/sk", cfg.Table.Name)
	}
	if s.pk.usesFields() || s.sk.usesFields() {
		err := fmt.Errorf("table %s: the key templates use event fields ({device} {event} …), which candles and trades do not have; feed this sink a silence processor or change pk/sk", cfg.Table.Name)
		s.candleErr, s.tradeErr = err, err
	}
	if s.pk.uses(phTimeframe) || s.sk.uses(phTimeframe) {
		s.tradeErr = fmt.Errorf("table %s: the key templates use {timeframe}, which trades do not have; use this sink for candles (Write) or change pk/sk", cfg.Table.Name)
	}
	return s, nil
}

// NewClient builds the DynamoDB client New would use for cfg (region,
// endpoint, no SDK retries), e.g. for Apply from `kandle provision`.
func NewClient(ctx context.Context, cfg Config, opts ...Option) (API, error) {
	o := applyOptions(opts)
	if o.client != nil {
		return o.client, nil
	}
	return buildClient(ctx, cfg.withDefaults(), o)
}

func buildClient(ctx context.Context, cfg Config, o options) (API, error) {
	var ac aws.Config
	if o.awsCfg != nil {
		ac = o.awsCfg.Copy()
	} else {
		var err error
		if ac, err = config.LoadDefaultConfig(ctx, config.WithRegion(cfg.Region)); err != nil {
			return nil, fmt.Errorf("dynamodb sink: load AWS config (credentials, region): %w", err)
		}
	}
	return dynamodb.NewFromConfig(ac, func(opt *dynamodb.Options) {
		opt.Region = cfg.Region
		if cfg.Endpoint != "" {
			opt.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		if o.httpCli != nil {
			opt.HTTPClient = o.httpCli
		} else if o.awsCfg == nil || o.awsCfg.HTTPClient == nil {
			// Candles go out as up to max_in_flight × 25 concurrent PutItems:
			// keep that many connections open (the SDK's default keeps 10
			// per host and would reconnect, TLS included, for the rest).
			conns := cfg.MaxInFlight * maxBatch
			opt.HTTPClient = awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
				tr.MaxIdleConns, tr.MaxIdleConnsPerHost = max(tr.MaxIdleConns, conns), max(tr.MaxIdleConnsPerHost, conns)
			})
		}
		// The sink retries itself, forever and with its own backoff; the
		// SDK's retryer (with its retry quota) would only get in the way.
		opt.Retryer = aws.NopRetryer{}
	}), nil
}

// Client returns the DynamoDB client the sink uses (e.g. for Apply).
func (s *Sink) Client() API { return s.client }

// Write buffers candles as upserts keyed by their rendered pk/sk and sends
// full buffers. Candles that can never be stored (too large, or a key that
// renders empty) come back in a *RejectedError; the rest are buffered or
// written.
func (s *Sink) Write(ctx context.Context, cs []candle.Candle) error {
	if s.candleErr != nil {
		return s.candleErr
	}
	return s.add(ctx, len(cs), func(i int) (pending, error) { return s.candleItem(&cs[i]) })
}

// WriteTrades is Write for a source's raw trades or device readings (the
// trade ledger and device schemas), with the same batching and idempotency.
func (s *Sink) WriteTrades(ctx context.Context, ts []candle.Trade) error {
	if s.tradeErr != nil {
		return s.tradeErr
	}
	return s.add(ctx, len(ts), func(i int) (pending, error) { return s.tradeItem(&ts[i]) })
}

func (s *Sink) add(ctx context.Context, n int, conv func(int) (pending, error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("dynamodb sink: Write after Close")
	}
	var rej RejectedError
	for i := 0; i < n; i++ {
		p, err := conv(i)
		if err != nil { // too large, or a key that renders empty
			rej.add(p, err)
			s.m.errors.WithLabelValues(s.cfg.Table.Name, "rejected").Inc()
			continue
		}
		s.buf = append(s.buf, p)
	}
	s.m.buffered.WithLabelValues(s.cfg.Table.Name).Set(float64(len(s.buf)))
	if err := rej.orNil(); err != nil {
		s.log.Warn("dynamodb sink rejected items it can never store; returning them for dead-lettering", "err", err)
	}
	var err error
	if len(s.buf) >= s.cfg.BufferItems {
		err = s.flushLocked(ctx)
	}
	return errors.Join(rej.orNil(), err)
}

// Flush sends everything buffered. When it returns nil, every item passed
// to Write so far is stored (or was returned as rejected). Transient errors
// are retried until ctx ends; on error the unsent items stay buffered.
func (s *Sink) Flush(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.flushLocked(ctx)
}

// Close flushes and releases the sink. The client is not closed (the SDK
// client holds no resources that need it).
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
