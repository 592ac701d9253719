package engine

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the engine's Prometheus series. All are registered on the
// registry given to the engine (never the global one).
type metrics struct {
	records         *prometheus.CounterVec   // stage, result
	rejected        *prometheus.CounterVec   // stage, reason
	candles         *prometheus.CounterVec   // stage, timeframe
	revisions       *prometheus.CounterVec   // stage, timeframe (revisions.go)
	revisionInputs  *prometheus.CounterVec   // stage, kind (revisions.go)
	events          *prometheus.CounterVec   // stage (silence events)
	watermark       *prometheus.GaugeVec     // stage, partition (ms)
	transactions    *prometheus.CounterVec   // stage, result
	commitSecs      *prometheus.HistogramVec // stage
	restoreSecs     *prometheus.HistogramVec // stage
	restored        *prometheus.CounterVec   // stage
	snapshots       *prometheus.CounterVec   // stage
	snapshotRecords *prometheus.CounterVec   // stage
	owned           *prometheus.GaugeVec     // stage
	idleErrors      *prometheus.CounterVec   // stage, step
	panics          *prometheus.CounterVec   // stage
	restarts        *prometheus.CounterVec   // stage
	startupRetries  *prometheus.CounterVec   // step
	sinkWritten     *prometheus.CounterVec   // sink
	sinkErrors      *prometheus.CounterVec   // sink
	sinkLag         *prometheus.HistogramVec // sink: seconds from candle close to written
	fused           *prometheus.GaugeVec     // processor, into
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		records: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kandle_records_total",
			Help: "Input records processed, by stage and result (accepted, rejected)."}, []string{"stage", "result"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kandle_rejected_total",
			Help: "Records sent to the dead-letter topic, by stage and reason code."}, []string{"stage", "reason"}),
		candles: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kandle_candles_total",
			Help: "Closed candles emitted, by stage and timeframe."}, []string{"stage", "timeframe"}),
		revisions: newRevisionsMetric(), revisionInputs: newRevisionInputsMetric(),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kandle_events_total",
			Help: "Events (silence levels and recoveries) emitted, by stage."}, []string{"stage"}),
		watermark: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kandle_watermark_ms",
			Help: "Event-time watermark of each owned input partition (Unix ms)."}, []string{"stage", "partition"}),
		transactions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kandle_transactions_total",
			Help: "Kafka transactions ended, by stage and result (committed, aborted)."}, []string{"stage", "result"}),
		commitSecs: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kandle_commit_seconds",
			Help: "Time to flush and commit one transaction.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}, []string{"stage"}),
		restoreSecs: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kandle_restore_seconds",
			Help: "Time to restore one partition's state (Pebble + changelog tail).", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}, []string{"stage"}),
		restored: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kandle_restored_changelog_records_total",
			Help: "Changelog records read while restoring partitions."}, []string{"stage"}),
		snapshots: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kandle_changelog_snapshots_total",
			Help: "Committed changelog snapshots (a full copy of a partition's state that bounds an empty-disk restore), by stage."}, []string{"stage"}),
		snapshotRecords: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kandle_changelog_snapshot_records_total",
			Help: "Changelog records written by committed snapshots, by stage (their write amplification)."}, []string{"stage"}),
		owned: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kandle_partitions_owned",
			Help: "Input partitions this instance currently processes, by stage."}, []string{"stage"}),
		idleErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kandle_idle_advance_errors_total",
			Help: "Idle advances that could not happen now and are retried, by stage and step (probe: the input's end offsets could not be read; commit: the transaction of an idle advance failed)."}, []string{"stage", "step"}),
		panics: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kandle_panics_total",
			Help: "Panics recovered in a stage (a processor's or the stage's own), by stage; each rebuilds the stage's state from the last commit."}, []string{"stage"}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kandle_stage_restarts_total",
			Help: "Times a stage failed (broker or client trouble, a fenced producer, a transaction that could not be ended, a panic) and was rebuilt from the last commit with new clients, by stage."}, []string{"stage"}),
		startupRetries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kandle_startup_retries_total",
			Help: "Start-up steps that failed on a broker error that may pass (unreachable, a timeout, an error answer) and were retried after a backoff, by step (topics: creating the topology's topics; fingerprints: checking the processors' state fingerprints)."}, []string{"step"}),
		sinkWritten: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kandle_sink_written_total",
			Help: "Records written to a sink."}, []string{"sink"}),
		sinkErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kandle_sink_errors_total",
			Help: "Sink write errors (retried or dead-lettered)."}, []string{"sink"}),
		sinkLag: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kandle_sink_candle_delay_seconds",
			Help: "Wall time from a candle's close to its durable write in a sink.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}, []string{"sink"}),
		fused: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kandle_processor_fused",
			Help: "1 for a processor this instance runs fused into the stage named by into (in its transactions, taking its input from memory), 0 for one that runs as a stage of its own (into is empty)."}, []string{"processor", "into"}),
	}
	for _, c := range []prometheus.Collector{m.fused, m.records, m.rejected, m.candles, m.events, m.watermark, m.transactions,
		m.commitSecs, m.restoreSecs, m.restored, m.snapshots, m.snapshotRecords, m.owned, m.idleErrors, m.panics, m.restarts, m.startupRetries, m.sinkWritten, m.sinkErrors, m.sinkLag} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, c := range []prometheus.Collector{m.revisions, m.revisionInputs} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// zero creates, at 0, the series of the stages and sinks e runs that only
// move on rare events (snapshots, errors, silence events), so that
// dashboards and alerts see them from the first scrape: rate() and
// increase() over a series that appears only with its first event miss
// that event.
func (m *metrics) zero(e *Engine) {
	m.startupRetries.WithLabelValues("topics")
	m.startupRetries.WithLabelValues("fingerprints")
	for _, s := range e.g.stages {
		if !e.runs(s.Name) {
			continue
		}
		if s.fusedInto != nil {
			m.fused.WithLabelValues(s.Name, s.root().Name).Set(1)
		} else {
			m.fused.WithLabelValues(s.Name, "").Set(0)
		}
		m.snapshots.WithLabelValues(s.Name)
		m.snapshotRecords.WithLabelValues(s.Name)
		m.panics.WithLabelValues(s.Name)
		m.restarts.WithLabelValues(s.Name)
		if !s.Rollup {
			m.idleErrors.WithLabelValues(s.Name, "probe")
			m.idleErrors.WithLabelValues(s.Name, "commit")
		}
		if s.Facts.Name == "silence" {
			m.events.WithLabelValues(s.Name)
		}
		m.zeroRevisions(s)
	}
	for name := range e.top.Sinks {
		if e.runs(name) {
			m.sinkErrors.WithLabelValues(name)
			m.restarts.WithLabelValues("sink " + name)
		}
	}
}
