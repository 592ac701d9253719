package serve

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/topology"
)

// Options configure a Server.
type Options struct {
	// Config is the topology's serve section (defaults filled).
	Config topology.Serve
	// Timeframes are the served timeframes by name (e.g. "1m").
	Timeframes map[string]candle.Timeframe
	// Symbols is a fixed list of symbols (a source's whitelist); empty
	// means the symbols the live store knows, or any symbol without one.
	Symbols []string
	Hot     History
	Cold    History
	// ReviseWithin is the longest revision horizon of the served
	// processors (0: none). With Hot, Cold and a hot_horizon, the hot store
	// is read this far before the split too, so a window revised there is
	// answered with its newest rev whichever store has it first.
	ReviseWithin time.Duration
	Live         OpenWindow
	Feed         Feed
	// Devices, when set, answers the device read API (/v1/devices…).
	Devices Devices
	// DeviceLevels are the silence levels /v1/devices?status= accepts
	// (the silence processors' levels and "recovered").
	DeviceLevels []string
	// AuthToken, when set, is the bearer token every API request needs.
	AuthToken string
	// Now is the clock (default time.Now).
	Now        func() time.Time
	Log        *slog.Logger
	Registerer prometheus.Registerer
	// Metrics, when set, is served at /metrics.
	Metrics http.Handler
}

// Server serves the candle API, the stream and the chart page.
type Server struct {
	o   Options
	log *slog.Logger
	m   *metrics
	hub *hub
	mux *http.ServeMux
	tfs []string // served timeframes, shortest first
	// zone places the days, weeks and months of timeframes built at query
	// time: the zone of the stored calendar timeframes (nil: UTC).
	zone *time.Location

	symMu      sync.Mutex
	syms       map[string]bool
	symsLoaded time.Time
}

// New checks o and builds a server; Run starts it.
func New(o Options) (*Server, error) {
	if len(o.Timeframes) == 0 {
		return nil, errors.New("serve: no timeframes to serve; the topology needs at least one processor")
	}
	if o.Hot == nil && o.Cold == nil && o.Live == nil && o.Devices == nil {
		return nil, errors.New("serve: no store to read; set serve.hot, serve.cold, serve.live or serve.devices in the topology")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	c := &o.Config
	if c.MaxLimit <= 0 || c.DefaultLimit <= 0 || c.MaxRangeWindows <= 0 || c.MaxSubscriptions <= 0 ||
		c.ClientQueue <= 0 || c.WriteWait <= 0 || c.PingInterval <= 0 || c.MaxMessageBytes <= 0 || c.StoreTimeout <= 0 {
		return nil, errors.New("serve: limits must be positive (load the topology, or spec.FillDefaults, for the documented defaults)")
	}
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	s := &Server{o: o, log: o.Log.With("component", "serve"), m: m}
	for name := range o.Timeframes {
		s.tfs = append(s.tfs, name)
	}
	slices.SortFunc(s.tfs, func(a, b string) int {
		ta, tb := o.Timeframes[a], o.Timeframes[b]
		return int(windowMillis(ta) - windowMillis(tb))
	})
	for _, n := range s.tfs {
		if tf := o.Timeframes[n]; tf.Unit >= candle.Day && tf.Loc != nil && s.zone == nil {
			s.zone = tf.Loc
		}
	}
	s.hub = newHub(s)
	s.routes()
	return s, nil
}

// windowMillis is the length of tf's first window after the epoch (a
// typical length for 1M and zoned days).
func windowMillis(tf candle.Timeframe) int64 {
	o := tf.Start(86_400_000 * 10)
	return tf.End(o) - o
}

// Handler returns the HTTP handler (for tests and embedding).
func (s *Server) Handler() http.Handler { return s.mux }

// Run serves on ln until ctx ends, then shuts down: HTTP requests get
// write_timeout to finish, stream clients are closed with status 1001.
func (s *Server) Run(ctx context.Context, ln net.Listener) error {
	c := s.o.Config
	srv := &http.Server{
		Handler:           s.mux,
		ReadTimeout:       c.ReadTimeout,
		ReadHeaderTimeout: c.ReadTimeout,
		WriteTimeout:      c.WriteTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() { s.hub.run(hctx) })
	errc := make(chan error, 1)
	wg.Go(func() { errc <- srv.Serve(ln) })
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, scancel := context.WithTimeout(context.Background(), c.WriteTimeout)
	defer scancel()
	err := srv.Shutdown(sctx) // hijacked stream connections are not waited for here:
	s.hub.closeAll()          // they end with ctx (their requests' base context)
	s.hub.conns.Wait()
	if err != nil {
		return fmt.Errorf("serve: shutdown: %w", err)
	}
	return nil
}

// authorized checks the bearer token (or ?token= on the stream, which
// browsers cannot send headers with).
func (s *Server) authorized(r *http.Request, allowQuery bool) bool {
	if s.o.AuthToken == "" {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok && allowQuery {
		got, ok = r.URL.Query().Get("token"), true
	}
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(s.o.AuthToken)) == 1
}

// cors sets the CORS headers for an allowed Origin; it reports false for a
// preflight it answered.
func (s *Server) cors(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" || !s.originAllowed(origin) {
		return true
	}
	h := w.Header()
	if slices.Contains(s.o.Config.CORSOrigins, "*") && s.o.AuthToken == "" {
		h.Set("Access-Control-Allow-Origin", "*")
	} else {
		h.Set("Access-Control-Allow-Origin", origin)
		h.Add("Vary", "Origin")
	}
	if r.Method == http.MethodOptions {
		h.Set("Access-Control-Allow-Methods", "GET, OPTIONS")
		h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type")
		h.Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusNoContent)
		return false
	}
	return true
}

func (s *Server) originAllowed(origin string) bool {
	for _, o := range s.o.Config.CORSOrigins {
		if o == "*" || strings.EqualFold(strings.TrimSuffix(o, "/"), origin) {
			return true
		}
	}
	return false
}

// knownSymbol says whether symbol exists: in the fixed list, or in the
// live store's set (reloaded at most once a second on a miss). Without
// either every symbol is accepted and an unknown one reads as empty.
func (s *Server) knownSymbol(ctx context.Context, symbol string) (bool, error) {
	if len(s.o.Symbols) > 0 {
		return slices.Contains(s.o.Symbols, symbol), nil
	}
	if s.o.Live == nil {
		return true, nil
	}
	s.symMu.Lock()
	defer s.symMu.Unlock()
	if s.syms[symbol] {
		return true, nil
	}
	if now := s.o.Now(); s.syms == nil || now.Sub(s.symsLoaded) >= time.Second {
		list, err := s.o.Live.Symbols(ctx)
		if err != nil {
			return false, err
		}
		s.syms = make(map[string]bool, len(list))
		for _, x := range list {
			s.syms[x] = true
		}
		s.symsLoaded = now
	}
	return s.syms[symbol], nil
}

// symbols lists the served symbols, sorted.
func (s *Server) symbols(ctx context.Context) ([]string, error) {
	if len(s.o.Symbols) > 0 {
		out := slices.Clone(s.o.Symbols)
		slices.Sort(out)
		return out, nil
	}
	if s.o.Live == nil {
		return []string{}, nil
	}
	list, err := s.o.Live.Symbols(ctx)
	if err != nil {
		return nil, err
	}
	slices.Sort(list)
	return list, nil
}
