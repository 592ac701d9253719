package valkey

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valkey-io/valkey-go"
)

// Option configures New.
type Option func(*options)

type options struct {
	logger    *slog.Logger
	reg       prometheus.Registerer
	clientOpt func(*valkey.ClientOption)
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithRegisterer registers the sink's metrics on r (default: a private
// registry, so nothing is exported).
func WithRegisterer(r prometheus.Registerer) Option { return func(o *options) { o.reg = r } }

// WithClientOption lets fn adjust valkey-go's options after Config is applied
// (custom dialer, TLS roots, client name, ...).
func WithClientOption(fn func(*valkey.ClientOption)) Option {
	return func(o *options) { o.clientOpt = fn }
}
