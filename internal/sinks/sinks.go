// Package sinks is the one list of sink connectors kandle ships: the
// registry topology parsing validates sink blocks against (each kind's
// Config struct is its spec), and the constructor that turns a parsed
// topology's sinks into engine options. cmd/kandle and the deploy tests share
// it, so the accepted keys cannot drift between them.
package sinks

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kandle/kandle/connectors/dynamodb"
	"github.com/kandle/kandle/connectors/kinesis"
	"github.com/kandle/kandle/connectors/s3parquet"
	"github.com/kandle/kandle/connectors/sinkkit"
	"github.com/kandle/kandle/connectors/valkey"
	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/topology"
)

// Registry lists the sink connectors a topology may name. Each kind's
// Config struct is its one spec: YAML decoding, defaults, validation and
// docs/reference.md all come from its tags.
func Registry() topology.Registry {
	return topology.Registry{Sinks: map[string]topology.SinkKind{
		"dynamodb": {Name: "dynamodb",
			Doc: "Upserts candles (or, fed from a source, raw trades/readings) into a DynamoDB table with key templates; " +
				"BatchWriteItem with retries of unprocessed items; tables, TTL and indexes provisioned by `kandle tables apply`. " +
				"A candle is written by a PutItem conditional on its rev (attribute rev, absent at 0): a table never goes back to an older " +
				"revision of a window (kandle_dynamodb_stale_writes_total counts the refused ones; the role needs dynamodb:PutItem).",
			New:      func() any { return &dynamodb.Config{} },
			Validate: func(c any) []string { return c.(*dynamodb.Config).Validate() }},
		"s3parquet": {Name: "s3parquet",
			Doc: "Writes candles as zstd Parquet files in Hive-style partitions (timeframe/symbol/year/month/day), one " +
				"deterministically named object per day that flushes upsert into, so replays overwrite instead of duplicating. " +
				"An object holds one row per window, the highest rev (column rev; files without it read as rev 0).",
			New:      func() any { return &s3parquet.Config{} },
			Validate: func(c any) []string { return c.(*s3parquet.Config).Validate() }},
		"kinesis": {Name: "kinesis",
			Doc: "Writes candles to a Kinesis stream (PutRecords, partition key = symbol, data = candle JSON), " +
				"retrying only the failed records of a partially failed call.",
			New: func() any { return &kinesis.Config{} }},
		"valkey": {Name: "valkey",
			Doc: "Live charts: the open candle of each key as hash candle:active:{tf}:{symbol}, published on " +
				"pub:candle:{tf}:{symbol} (coalesced, pipelined), and final candles published when they close. " +
				"A final is stored and published only if its rev is not below the newest Valkey knows of its window (compare-and-set), " +
				"with \"rev\" and \"final\" in the message.",
			New:      func() any { return &valkey.Config{} },
			Validate: func(c any) []string { return c.(*valkey.Config).Validate() }},
	}}
}

// Build creates the connector of every sink in t and returns the engine
// options that attach them. Valkey sinks also get the open candles of the
// processors they read, straight from the stage that owns each key.
//
// A sink whose store cannot be reached yet (refused connections, timeouts:
// see sinkkit.Unreachable) is retried with the shared backoff until it
// answers or ctx ends, so kandle may start before its stores; waiting, when
// not nil, hears why before each pause (for the readiness probe). Any other
// error (a missing bucket, bad credentials) stops Build.
func Build(ctx context.Context, logger *slog.Logger, t *topology.Topology, reg prometheus.Registerer,
	waiting func(sink string, err error)) ([]engine.Option, error) {
	var opts []engine.Option
	policy := sinkkit.Backoff{Min: 500 * time.Millisecond, Max: sinkkit.DefaultMax}
	for _, name := range slices.Sorted(maps.Keys(t.Sinks)) {
		for attempt := 0; ; attempt++ {
			undo := &undoRegisterer{Registerer: reg}
			o, err := build(ctx, logger, t, name, undo)
			if err == nil {
				opts = append(opts, o...)
				break
			}
			undo.undo() // the next attempt registers its metrics again
			if !sinkkit.Unreachable(err) || ctx.Err() != nil {
				return nil, err
			}
			logger.Warn("sink store unreachable; waiting for it", "sink", name, "attempt", attempt+1, "err", err)
			if waiting != nil {
				waiting(name, err)
			}
			if serr := sinkkit.Sleep(ctx, policy.Delay(attempt)); serr != nil {
				return nil, fmt.Errorf("%w (while waiting for it: %w)", err, serr)
			}
		}
	}
	return opts, nil
}

// undoRegisterer remembers what it registered, so a failed attempt to build
// a sink can take its metrics back out.
type undoRegisterer struct {
	prometheus.Registerer
	done []prometheus.Collector
}

func (u *undoRegisterer) Register(c prometheus.Collector) error {
	if err := u.Registerer.Register(c); err != nil {
		return err
	}
	u.done = append(u.done, c)
	return nil
}

func (u *undoRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := u.Register(c); err != nil {
			panic(err) // prometheus.Registerer's contract for MustRegister
		}
	}
}

func (u *undoRegisterer) undo() {
	for _, c := range u.done {
		u.Registerer.Unregister(c)
	}
	u.done = nil
}

// revises reports whether a processor among from has a revision horizon:
// then its candles can come again with a higher rev.
func revises(t *topology.Topology, from []string) bool {
	for _, f := range from {
		if p, ok := t.Processors[f]; ok && t.ReviseWithin(p) > 0 {
			return true
		}
	}
	return false
}

// build creates the connector of sink name.
func build(ctx context.Context, logger *slog.Logger, t *topology.Topology, name string, reg prometheus.Registerer) ([]engine.Option, error) {
	var opts []engine.Option
	{
		sk := t.Sinks[name]
		r := prometheus.WrapRegistererWith(prometheus.Labels{"sink": name}, reg)
		log := logger.With("sink", name)
		var s engine.CandleSink
		var err error
		switch cfg := sk.Config.(type) {
		case *dynamodb.Config:
			s, err = dynamodb.New(ctx, *cfg, dynamodb.WithLogger(log), dynamodb.WithRegisterer(r),
				dynamodb.WithRevisions(revises(t, sk.From)))
		case *s3parquet.Config:
			s, err = s3parquet.New(ctx, *cfg, s3parquet.WithLogger(logger), s3parquet.WithRegisterer(reg),
				s3parquet.WithName(name)) // WithName adds the sink label and log attribute itself
		case *kinesis.Config:
			var kin *awskinesis.Client
			if kin, _, err = kinesis.NewClients(ctx, cfg.Region, cfg.Endpoint, ""); err == nil {
				s, err = kinesis.NewSink(kin, *cfg, kinesis.WithLogger(log), kinesis.WithRegisterer(r))
			}
		case *valkey.Config:
			var v *valkey.Sink
			v, err = valkey.New(ctx, *cfg, valkey.WithLogger(log), valkey.WithRegisterer(r))
			if err == nil {
				s = v
				for _, from := range sk.From {
					if _, ok := t.Processors[from]; ok {
						opts = append(opts, engine.WithLive(from, v))
					}
				}
			}
		default:
			err = fmt.Errorf("kind %q has no connector in this build", sk.Kind)
		}
		if err != nil {
			return nil, fmt.Errorf("sink %s: %w", name, err)
		}
		opts = append(opts, engine.WithSink(name, s))
	}
	return opts, nil
}
