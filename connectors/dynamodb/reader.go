package dynamodb

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
)

// table is what a Sink and a Reader of one table share: its config, client,
// key templates, metrics and the retry loop of every request.
type table struct {
	cfg        Config
	client     API
	log        *slog.Logger
	m          *metrics
	pk, sk     template
	consistent atomic.Bool // SetConsistentReads
}

func newTable(ctx context.Context, cfg Config, o options) (*table, error) {
	if errs := cfg.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("dynamodb sink config: %s", strings.Join(errs, "; "))
	}
	cfg = cfg.withDefaults()
	t := &table{cfg: cfg, client: o.client, log: o.log.With("connector", "dynamodb", "table", cfg.Table.Name)}
	var err error
	if t.m, err = newMetrics(o.reg); err != nil {
		return nil, err
	}
	t.m.zero(cfg.Table.Name)
	if t.pk, err = parseTemplate(cfg.PK); err != nil {
		return nil, err
	}
	if t.sk, err = parseTemplate(cfg.SK); err != nil {
		return nil, err
	}
	if t.client == nil {
		if t.client, err = buildClient(ctx, cfg, o); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// Reader runs the reads of a table a Sink writes: candle history (Latest,
// Range, LatestMany, Page), sharded trades (ReadSharded), device readings
// and events (LatestReading, ReadingsPage, EventsPage, IndexPage) and exact
// keys (GetItems, QueryIndex). It renders keys from the same templates as
// the Sink, so what one writes the other finds. Its methods are safe for
// concurrent use.
type Reader struct {
	*table
}

// NewReader validates cfg (the sink's config of the table) and returns a
// Reader. Like New it does not contact DynamoDB; requests retry transient
// errors until their context ends.
func NewReader(ctx context.Context, cfg Config, opts ...Option) (*Reader, error) {
	o := applyOptions(opts)
	t, err := newTable(ctx, cfg, o)
	if err != nil {
		return nil, err
	}
	return &Reader{table: t}, nil
}

// Reader returns a Reader of the sink's table sharing its client and
// metrics (to read back what was written, e.g. in tests and tools).
func (s *Sink) Reader() *Reader { return &Reader{table: s.table} }
