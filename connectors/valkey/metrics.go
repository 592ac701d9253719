package valkey

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Kinds of writes, the "kind" label of the metrics.
const (
	kindActive = "active"
	kindFinal  = "final"
)

type metrics struct {
	written    *prometheus.CounterVec // candles stored, by kind
	retries    *prometheus.CounterVec // retried round trips, by kind
	errors     *prometheus.CounterVec // failed round trips, by kind
	latency    *prometheus.HistogramVec
	roundTrips prometheus.Counter
	dropped    prometheus.Counter // active updates that did not reach Valkey
	coalesced  prometheus.Counter // active updates superseded before sending
	stale      prometheus.Counter // candles published but not stored: the hash held a newer window
	staleRevs  prometheus.Counter // finals neither stored nor published: a newer rev of the window is known
	rejected   prometheus.Counter // finals returned as permanent failures

	activeRejected prometheus.Counter // active updates refused for good (WRONGTYPE)
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	const ns, sub = "kandle", "valkey"
	m := &metrics{
		written: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "written_total", Help: "Candles written to Valkey, by kind (active or final)."}, []string{"kind"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "retries_total", Help: "Round trips retried after a transient error."}, []string{"kind"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "errors_total", Help: "Round trips that failed."}, []string{"kind"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "write_seconds", Help: "Time of one successful pipeline or transaction.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10)}, []string{"kind"}),
		roundTrips: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "round_trips_total", Help: "Pipelines sent to Valkey (one network round trip each)."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "active_dropped_total", Help: "Active candle updates that did not reach Valkey (server unreachable)."}),
		coalesced: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "active_coalesced_total", Help: "Active candle updates replaced by a newer one before being sent."}),
		stale: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "stale_skipped_total", Help: "Candles published but not stored because the hash held a newer window."}),
		staleRevs: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "stale_revisions_total", Help: "Final candles neither stored nor published because Valkey knows a higher rev of their window."}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "rejected_total", Help: "Final candles rejected permanently (returned for dead-lettering)."}),
		activeRejected: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "active_rejected_total", Help: "Active candle updates Valkey refused for good: the key holds another type (WRONGTYPE). Other keys are unaffected."}),
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	for _, c := range []prometheus.Collector{m.written, m.retries, m.errors, m.latency, m.roundTrips,
		m.dropped, m.coalesced, m.stale, m.staleRevs, m.rejected, m.activeRejected} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("valkey: register metrics (use one Registerer per sink or wrap it with prometheus.WrapRegistererWith): %w", err)
		}
	}
	for _, k := range []string{kindActive, kindFinal} {
		m.written.WithLabelValues(k)
		m.retries.WithLabelValues(k)
		m.errors.WithLabelValues(k)
	}
	return m, nil
}
