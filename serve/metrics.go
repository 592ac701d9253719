package serve

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	requests  *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	clients   prometheus.Gauge
	channels  prometheus.Gauge
	delivered prometheus.Counter
	coalesced prometheus.Counter
	dropped   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kandle_serve_requests_total",
			Help: "API requests by route and HTTP status."}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kandle_serve_request_seconds",
			Help: "API request latency by route.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"route"}),
		clients: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kandle_serve_stream_clients",
			Help: "Connected WebSocket clients."}),
		channels: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kandle_serve_stream_channels",
			Help: "Pub/sub channels this process is subscribed to (one per stored series, whatever the number of clients and of timeframes built from it)."}),
		delivered: prometheus.NewCounter(prometheus.CounterOpts{Name: "kandle_serve_stream_messages_total",
			Help: "Candle updates written to WebSocket clients."}),
		coalesced: prometheus.NewCounter(prometheus.CounterOpts{Name: "kandle_serve_stream_coalesced_total",
			Help: "Candle updates replaced in a client's queue by a newer state of the same candle."}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kandle_serve_stream_disconnects_total",
			Help: "WebSocket clients disconnected by the server, by reason (slow, ping, write, protocol)."}, []string{"reason"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.latency, m.clients, m.channels, m.delivered, m.coalesced, m.dropped} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("serve: register metrics (one server per registerer): %w", err)
		}
	}
	return m, nil
}
