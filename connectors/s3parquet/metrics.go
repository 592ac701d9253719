package s3parquet

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	candles       prometheus.Counter   // candles made durable
	objects       prometheus.Counter   // objects written
	bytes         prometheus.Counter   // object bytes written
	rejected      prometheus.Counter   // candles rejected as unstorable
	retries       prometheus.Counter   // failed attempts that were retried
	errors        prometheus.Counter   // failed attempts (retried or not)
	conflicts     prometheus.Counter   // conditional writes refused: the object changed since it was read
	cacheHits     prometheus.Counter   // object writes based on the sink's own last write, without a read
	createRefused prometheus.Counter   // create-only writes refused because the object existed
	staleRevs     prometheus.Counter   // candles not stored: the buffer or object holds a higher rev of the window
	latency       prometheus.Histogram // one partition's read-merge-write
	flushes       prometheus.Histogram // one whole flush
}

func newMetrics(reg prometheus.Registerer, name string) (*metrics, error) {
	labels := prometheus.Labels{"sink": name}
	counter := func(n, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "kandle", Subsystem: "s3parquet", Name: n, Help: help, ConstLabels: labels})
	}
	buckets := prometheus.ExponentialBuckets(0.001, 2, 16)
	m := &metrics{
		candles:  counter("candles_written_total", "Candles stored durably (counted again when redelivered)."),
		objects:  counter("objects_written_total", "Parquet objects written (each a whole day of one series)."),
		bytes:    counter("bytes_written_total", "Bytes of Parquet objects written."),
		rejected: counter("candles_rejected_total", "Candles that can never be stored, returned for dead-lettering."),
		retries:  counter("retries_total", "Failed reads or writes that were retried."),
		errors:   counter("errors_total", "Failed reads or writes, retried or not."),
		conflicts: counter("write_conflicts_total", "Conditional writes refused because another writer (such as a partition's new owner) "+
			"replaced the object since it was read; the sink read, merged and wrote again."),
		cacheHits: counter("write_cache_hits_total", "Object writes that skipped reading the object because this sink wrote it last "+
			"(write_cache_bytes); the write is still conditional on the object being unchanged."),
		createRefused: counter("create_refused_total", "Create-only writes (If-None-Match: *) of an object the write cache did not hold, "+
			"refused because the object already existed (written before a restart, dropped from the cache, or by another writer); "+
			"the sink then read, merged and wrote it. Not counted in write_conflicts_total."),
		staleRevs: counter("stale_revisions_total", "Candles not stored because the buffer or the object already holds a higher rev "+
			"of their window (an older revision delivered late or again); not an error."),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "kandle", Subsystem: "s3parquet", Name: "object_write_seconds",
			Help: "Time to read, merge and write one partition object, retries included.", ConstLabels: labels, Buckets: buckets}),
		flushes: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "kandle", Subsystem: "s3parquet", Name: "flush_seconds",
			Help: "Time of one flush of the buffer.", ConstLabels: labels, Buckets: buckets}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.candles, m.objects, m.bytes, m.rejected, m.retries, m.errors, m.conflicts, m.cacheHits, m.createRefused, m.staleRevs, m.latency, m.flushes} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics (give each sink its own WithName): %w", err)
		}
	}
	return m, nil
}
