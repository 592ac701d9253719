package dynamodb

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics of one sink; label table tells sinks apart on a shared registry.
type metrics struct {
	written  *prometheus.CounterVec   // table
	stale    *prometheus.CounterVec   // table
	retries  *prometheus.CounterVec   // table, reason
	errors   *prometheus.CounterVec   // table, kind
	latency  *prometheus.HistogramVec // table, op
	buffered *prometheus.GaugeVec     // table
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		written: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kandle_dynamodb_items_written_total",
			Help: "Items written to DynamoDB (acknowledged by BatchWriteItem, or by a candle's conditional PutItem).",
		}, []string{"table"}),
		stale: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kandle_dynamodb_stale_writes_total",
			Help: "Candles not written because the table holds a higher revision of them (a refused PutItem condition; not an error, not retried).",
		}, []string{"table"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kandle_dynamodb_retries_total",
			Help: "DynamoDB requests retried, by reason (unprocessed, throttled, transient).",
		}, []string{"table", "reason"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kandle_dynamodb_errors_total",
			Help: "DynamoDB errors, by kind (throttled, transient, validation, permanent, rejected).",
		}, []string{"table", "kind"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kandle_dynamodb_request_seconds",
			Help:    "Latency of single DynamoDB requests, by operation.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}, []string{"table", "op"}),
		buffered: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kandle_dynamodb_buffered_items",
			Help: "Items buffered by Write and not yet sent.",
		}, []string{"table"}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	m.written = register(reg, m.written, &err)
	m.stale = register(reg, m.stale, &err)
	m.retries = register(reg, m.retries, &err)
	m.errors = register(reg, m.errors, &err)
	m.latency = register(reg, m.latency, &err)
	m.buffered = register(reg, m.buffered, &err)
	return m, err
}

// register registers c, or returns the collector already registered under
// the same name (several sinks share one registry).
func register[C prometheus.Collector](reg prometheus.Registerer, c C, errp *error) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		if *errp == nil {
			*errp = fmt.Errorf("register dynamodb metrics: %w", err)
		}
	}
	return c
}

// zero creates the table's retry and error series at 0, so dashboards and
// alerts see them before the first retry or error.
func (m *metrics) zero(table string) {
	m.stale.WithLabelValues(table)
	for _, r := range []string{"unprocessed", classThrottled.String(), classTransient.String()} {
		m.retries.WithLabelValues(table, r)
	}
	for c := classTransient; c <= classPermanent; c++ {
		m.errors.WithLabelValues(table, c.String())
	}
	m.errors.WithLabelValues(table, "rejected")
}
