package s3parquet

import (
	"log/slog"
	"time"

	"github.com/kandle/kandle/internal/clock"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/prometheus/client_golang/prometheus"
)

// Option configures New.
type Option func(*options)

type options struct {
	log        *slog.Logger
	reg        prometheus.Registerer
	name       string
	clock      clock.Clock
	httpClient aws.HTTPClient
	minBackoff time.Duration
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithRegisterer registers the sink's metrics on r (default: none).
func WithRegisterer(r prometheus.Registerer) Option { return func(o *options) { o.reg = r } }

// WithName labels the sink's metrics and logs (const label sink; default
// "s3parquet"), so several sinks can share one registerer.
func WithName(name string) Option { return func(o *options) { o.name = name } }

// WithClock sets the clock flush_age is measured with (default: wall clock).
func WithClock(c clock.Clock) Option { return func(o *options) { o.clock = c } }

// WithHTTPClient sets the HTTP client the S3 client uses.
func WithHTTPClient(c aws.HTTPClient) Option { return func(o *options) { o.httpClient = c } }

// WithMinBackoff sets the first retry pause (default 100ms); it doubles up
// to Config.MaxBackoff, with jitter.
func WithMinBackoff(d time.Duration) Option { return func(o *options) { o.minBackoff = d } }
