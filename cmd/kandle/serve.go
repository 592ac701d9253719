package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/connectors/dynamodb"
	"github.com/kandle/kandle/connectors/s3parquet"
	"github.com/kandle/kandle/connectors/valkey"
	"github.com/kandle/kandle/serve"
	"github.com/kandle/kandle/topology"
)

func cmdServe(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "serve", "[-t topology.yaml] [flags]",
		"Serves the candle API (/v1/candles, /v1/klines, /udf/history), the device API (/v1/devices, with\n"+
			"serve.devices), the live stream (/v1/stream) and the chart page (/) over the stores the topology's\n"+
			"sinks write, as its serve: section says. It shares nothing with the processing group: run as many\n"+
			"replicas as you like behind a load balancer.")
	top := topologyFlag(fs)
	listenAddr := fs.String("listen", "", "host:port to listen on (default: serve.listen of the topology)")
	if err := e.parseNoArgs(fs, args); err != nil {
		return err
	}
	t, err := loadTopology(*top)
	if err != nil {
		return reportTopology(e, err)
	}
	reg := prometheus.NewRegistry()
	o, closeStores, err := serveOptions(ctx, e, t, reg)
	if err != nil {
		return err
	}
	defer closeStores()
	o.Metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	srv, err := serve.New(o)
	if err != nil {
		return err
	}
	addr := t.Serve.Listen
	if *listenAddr != "" {
		addr = *listenAddr
	}
	ln, err := listen(addr)
	if err != nil {
		return fmt.Errorf("serve: listen on %s: %w; pick a free address with -listen or serve.listen", addr, err)
	}
	fmt.Fprintf(e.stdout, "kandle serve: chart page at %s (API under /v1, stream at /v1/stream)\n", pageURL(ln.Addr()))
	err = srv.Run(ctx, ln)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// pageURL is the chart page's URL for a listener address.
func pageURL(a net.Addr) string {
	host, port, _ := net.SplitHostPort(a.String())
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/"
}

// serveOptions opens the readers of the stores t's serve section names.
// Without a serve section naming stores, the one sink of each kind is used
// when there is exactly one.
func serveOptions(ctx context.Context, e *env, t *topology.Topology, reg prometheus.Registerer) (serve.Options, func(), error) {
	c := t.Serve
	o := serve.Options{Config: c, Log: e.log, Registerer: reg, Timeframes: map[string]candle.Timeframe{}}
	for _, name := range slices.Sorted(maps.Keys(t.Processors)) {
		p := t.Processors[name]
		o.ReviseWithin = max(o.ReviseWithin, t.ReviseWithin(p)) // the hot store is read this far before hot_horizon
		if _, ok := o.Timeframes[p.Timeframe]; !ok {
			o.Timeframes[p.Timeframe] = t.TimeframeOf(p)
		}
	}
	whitelisted := len(t.Sources) > 0
	for _, name := range slices.Sorted(maps.Keys(t.Sources)) {
		s := t.Sources[name]
		if len(s.Symbols) == 0 {
			whitelisted = false
		}
		for _, sym := range s.Symbols {
			if !slices.Contains(o.Symbols, sym) {
				o.Symbols = append(o.Symbols, sym)
			}
		}
	}
	if !whitelisted {
		o.Symbols = nil
	}
	if c.Hot == "" && c.Cold == "" && c.Live == "" {
		c.Hot, c.Cold, c.Live = onlySink(t, "dynamodb"), onlySink(t, "s3parquet"), onlySink(t, "valkey")
		if c.Hot != "" || c.Cold != "" || c.Live != "" {
			e.log.Info("serve: no stores named in the serve section; using the one sink of each kind", "hot", c.Hot, "cold", c.Cold, "live", c.Live)
		}
		o.Config = c
	}
	var closers []func()
	closeAll := func() {
		for _, f := range slices.Backward(closers) {
			f()
		}
	}
	fail := func(err error) (serve.Options, func(), error) {
		closeAll()
		return serve.Options{}, nil, err
	}
	if c.AuthTokenEnv != "" {
		o.AuthToken = os.Getenv(c.AuthTokenEnv)
		if o.AuthToken == "" {
			return fail(fmt.Errorf("serve.auth_token_env: environment variable %s is unset or empty; export %s=<token> before starting kandle serve", c.AuthTokenEnv, c.AuthTokenEnv))
		}
	}
	if c.Hot != "" {
		s, err := dynamodb.NewReader(ctx, *t.Sinks[c.Hot].Config.(*dynamodb.Config), dynamodb.WithLogger(e.log))
		if err != nil {
			return fail(fmt.Errorf("serve.hot %s: %w", c.Hot, err))
		}
		o.Hot = hotStore{s}
	}
	if c.Cold != "" {
		r, err := s3parquet.NewReader(ctx, *t.Sinks[c.Cold].Config.(*s3parquet.Config))
		if err != nil {
			return fail(fmt.Errorf("serve.cold %s: %w", c.Cold, err))
		}
		o.Cold = coldStore{r}
	}
	if c.Live != "" {
		r, err := valkey.NewReader(ctx, *t.Sinks[c.Live].Config.(*valkey.Config), e.log)
		if err != nil {
			return fail(fmt.Errorf("serve.live %s: %w", c.Live, err))
		}
		closers = append(closers, r.Close)
		o.Live, o.Feed = liveStore{r}, liveStore{r}
	}
	if d := c.Devices; d != (topology.ServeDevices{}) {
		ds, err := openDeviceStore(ctx, e, t, d)
		if err != nil {
			return fail(err)
		}
		o.Devices = ds
		for _, name := range slices.Sorted(maps.Keys(t.Processors)) {
			for _, l := range t.Processors[name].Levels {
				if !slices.Contains(o.DeviceLevels, l.Name) {
					o.DeviceLevels = append(o.DeviceLevels, l.Name)
				}
			}
		}
		o.DeviceLevels = append(o.DeviceLevels, "recovered")
	}
	return o, closeAll, nil
}

// openDeviceStore opens the dynamodb sinks serve.devices names.
func openDeviceStore(ctx context.Context, e *env, t *topology.Topology, d topology.ServeDevices) (deviceStore, error) {
	var ds deviceStore
	for _, role := range []struct {
		key, name string
		dst       **dynamodb.Reader
	}{{"readings", d.Readings, &ds.readings}, {"latest", d.Latest, &ds.latest}, {"status", d.Status, &ds.status}, {"history", d.History, &ds.history}} {
		if role.name == "" {
			continue
		}
		s, err := dynamodb.NewReader(ctx, *t.Sinks[role.name].Config.(*dynamodb.Config), dynamodb.WithLogger(e.log))
		if err != nil {
			return deviceStore{}, fmt.Errorf("serve.devices.%s %s: %w", role.key, role.name, err)
		}
		*role.dst = s
	}
	if ds.status != nil && !ds.status.HasIndex(d.StatusIndex) {
		return deviceStore{}, fmt.Errorf("serve.devices.status_index: the table of sink %s declares no GSI %q; add it under table.gsis (partition key: the level attribute)", d.Status, d.StatusIndex)
	}
	ds.statusIndex = d.StatusIndex
	return ds, nil
}

// deviceStore adapts the dynamodb sinks of a fleet to serve.Devices.
type deviceStore struct {
	readings, latest, status, history *dynamodb.Reader
	statusIndex                       string
}

func notConfigured(key string) error {
	return fmt.Errorf("this read is not configured: set serve.devices.%s in the topology: %w", key, serve.ErrNotConfigured)
}

// pageErr maps the sinks' refusal of a page token.
func pageErr(err error) error {
	if errors.Is(err, dynamodb.ErrBadPageToken) {
		return fmt.Errorf("%w: %w", serve.ErrBadPage, err)
	}
	return err
}

func (d deviceStore) LatestReading(ctx context.Context, device string) (candle.Trade, bool, error) {
	src := d.latest
	if src == nil {
		src = d.readings
	}
	if src == nil {
		return candle.Trade{}, false, notConfigured("readings")
	}
	return src.LatestReading(ctx, device)
}

func (d deviceStore) Readings(ctx context.Context, device string, from, to int64, limit int, page string) ([]candle.Trade, string, error) {
	if d.readings == nil {
		return nil, "", notConfigured("readings")
	}
	trs, next, err := d.readings.ReadingsPage(ctx, device, from, to, limit, page)
	return trs, next, pageErr(err)
}

func (d deviceStore) ByStatus(ctx context.Context, level string, limit int, page string) ([]json.RawMessage, string, error) {
	if d.status == nil {
		return nil, "", notConfigured("status")
	}
	items, next, err := d.status.IndexPage(ctx, d.statusIndex, level, limit, page)
	return itemsJSON(d.status, items), next, pageErr(err)
}

func (d deviceStore) Silences(ctx context.Context, device string, limit int, page string) ([]json.RawMessage, string, error) {
	if d.history == nil {
		return nil, "", notConfigured("history")
	}
	items, next, err := d.history.EventsPage(ctx, map[string]string{"device": device}, limit, page)
	return itemsJSON(d.history, items), next, pageErr(err)
}

// itemsJSON renders event items without their storage keys.
func itemsJSON(s *dynamodb.Reader, items []map[string]types.AttributeValue) []json.RawMessage {
	out := make([]json.RawMessage, len(items))
	for i, it := range items {
		out[i] = dynamodb.ItemJSON(nil, it, s.KeyAttributes()...)
	}
	return out
}

// onlySink names t's one sink of kind, or "" when it has none or several.
func onlySink(t *topology.Topology, kind string) string {
	var found []string
	for _, name := range slices.Sorted(maps.Keys(t.Sinks)) {
		if t.Sinks[name].Kind == kind {
			found = append(found, name)
		}
	}
	if len(found) == 1 {
		return found[0]
	}
	return ""
}

// hotStore adapts the dynamodb sink's reads to serve.History.
type hotStore struct{ s *dynamodb.Reader }

func (h hotStore) Page(ctx context.Context, symbol string, tf candle.Timeframe, from, to int64, limit int, newestFirst bool) ([]candle.Candle, error) {
	return h.s.Page(ctx, symbol, tf.String(), from, to, limit, newestFirst)
}

// coldStore adapts the s3parquet reader to serve.History.
type coldStore struct{ r *s3parquet.Reader }

func (c coldStore) Page(ctx context.Context, symbol string, tf candle.Timeframe, from, to int64, limit int, newestFirst bool) ([]candle.Candle, error) {
	return c.r.Candles(ctx, symbol, tf, from, to, limit, newestFirst)
}

// liveStore adapts the valkey reader to serve.OpenWindow and serve.Feed.
type liveStore struct{ r *valkey.Reader }

func (l liveStore) OpenCandle(ctx context.Context, symbol, tf string) (candle.Candle, bool, error) {
	return l.r.Active(ctx, symbol, tf)
}
func (l liveStore) Symbols(ctx context.Context) ([]string, error) { return l.r.Symbols(ctx) }
func (l liveStore) Subscribe(ctx context.Context, symbol, tf string) error {
	return l.r.Subscribe(ctx, symbol, tf)
}
func (l liveStore) Unsubscribe(ctx context.Context, symbol, tf string) error {
	return l.r.Unsubscribe(ctx, symbol, tf)
}
func (l liveStore) Run(ctx context.Context, fn func(serve.Update)) error {
	return l.r.Run(ctx, func(m valkey.Message) { fn(serve.Update{Candle: m.Candle, Final: m.Final}) })
}
