package kinesis

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type consumerMetrics struct {
	held      prometheus.Gauge
	taken     prometheus.Counter
	stolen    prometheus.Counter
	lost      prometheus.Counter
	records   prometheus.Counter
	throttled prometheus.Counter
	subscribe prometheus.Counter
	behind    *prometheus.GaugeVec
}

func newConsumerMetrics(reg prometheus.Registerer, stream string) (*consumerMetrics, error) {
	cl := prometheus.Labels{"stream": stream}
	m := &consumerMetrics{
		held:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "kandle_kinesis_leases_held", Help: "Shard leases this instance holds.", ConstLabels: cl}),
		taken:     prometheus.NewCounter(prometheus.CounterOpts{Name: "kandle_kinesis_leases_taken_total", Help: "Leases taken (free or expired).", ConstLabels: cl}),
		stolen:    prometheus.NewCounter(prometheus.CounterOpts{Name: "kandle_kinesis_leases_stolen_total", Help: "Leases stolen from a more loaded owner.", ConstLabels: cl}),
		lost:      prometheus.NewCounter(prometheus.CounterOpts{Name: "kandle_kinesis_leases_lost_total", Help: "Leases lost to another owner or expiry.", ConstLabels: cl}),
		records:   prometheus.NewCounter(prometheus.CounterOpts{Name: "kandle_kinesis_records_total", Help: "Records delivered to the handler.", ConstLabels: cl}),
		throttled: prometheus.NewCounter(prometheus.CounterOpts{Name: "kandle_kinesis_throttled_total", Help: "Kinesis calls throttled (backed off).", ConstLabels: cl}),
		subscribe: prometheus.NewCounter(prometheus.CounterOpts{Name: "kandle_kinesis_subscriptions_total", Help: "SubscribeToShard subscriptions opened (enhanced fan-out; AWS ends each after 5 minutes).", ConstLabels: cl}),
		behind:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kandle_kinesis_millis_behind_latest", Help: "MillisBehindLatest of the last batch per shard.", ConstLabels: cl}, []string{"shard"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.held, m.taken, m.stolen, m.lost, m.records, m.throttled, m.subscribe, m.behind} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("kinesis: register metrics (one registry per consumer of a stream): %w", err)
			}
		}
	}
	return m, nil
}

type sinkMetrics struct {
	records prometheus.Counter
	retried prometheus.Counter
	calls   prometheus.Counter
}

func newSinkMetrics(reg prometheus.Registerer, stream string) (*sinkMetrics, error) {
	cl := prometheus.Labels{"stream": stream}
	m := &sinkMetrics{
		records: prometheus.NewCounter(prometheus.CounterOpts{Name: "kandle_kinesis_sink_records_total", Help: "Candles written.", ConstLabels: cl}),
		retried: prometheus.NewCounter(prometheus.CounterOpts{Name: "kandle_kinesis_sink_retried_total", Help: "Records resent after a partial PutRecords failure.", ConstLabels: cl}),
		calls:   prometheus.NewCounter(prometheus.CounterOpts{Name: "kandle_kinesis_sink_put_calls_total", Help: "PutRecords calls.", ConstLabels: cl}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.records, m.retried, m.calls} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("kinesis: register sink metrics: %w", err)
			}
		}
	}
	return m, nil
}
