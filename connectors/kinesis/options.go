package kinesis

import (
	"log/slog"

	"github.com/kandle/kandle/internal/clock"

	"github.com/prometheus/client_golang/prometheus"
)

// Option tunes a Consumer or a Sink.
type Option func(*options)

type options struct {
	log   *slog.Logger
	reg   prometheus.Registerer
	clock clock.Clock
}

func buildOptions(opts []Option) options {
	o := options{log: slog.Default(), clock: clock.System{}}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.log = l
		}
	}
}

// WithRegisterer registers metrics on r (default: metrics are kept but not registered).
func WithRegisterer(r prometheus.Registerer) Option { return func(o *options) { o.reg = r } }

// WithClock sets the clock that measures lease expiry (default: the system clock).
func WithClock(c clock.Clock) Option {
	return func(o *options) {
		if c != nil {
			o.clock = c
		}
	}
}
