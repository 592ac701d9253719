package main

import (
	"flag"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kandle/kandle"
	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/topology"
)

// defaultTopology is the embedded example `run` and `demo` use without -t.
const defaultTopology = "testdata/topologies/crypto.yaml"

// topologyFlag registers -t.
func topologyFlag(fs *flag.FlagSet) *string {
	return fs.String("t", "", "topology YAML file (default: the embedded "+defaultTopology+")")
}

// loadTopology reads path, or the embedded default when path is "".
func loadTopology(path string) (*topology.Topology, error) {
	reg := sinkRegistry()
	if path == "" {
		data, err := fs.ReadFile(kandle.Topologies, defaultTopology)
		if err != nil {
			return nil, err
		}
		return topology.Parse("(embedded) "+defaultTopology, data, reg)
	}
	return topology.Load(path, reg)
}

// brokersFlag registers -brokers, shared by every command that talks to Kafka.
func brokersFlag(fs *flag.FlagSet) *string {
	return fs.String("brokers", "", "comma-separated Kafka seed brokers (host:port); default: the topology's brokers")
}

// standaloneBrokers returns the brokers a command outside `kandle run` talks
// to: -brokers, else the topology's (the embedded broker only lives inside
// `kandle run`, so it needs -brokers).
func standaloneBrokers(t *topology.Topology, flagValue string) ([]string, error) {
	if seeds := splitList(flagValue); len(seeds) > 0 {
		return seeds, nil
	}
	if t.Brokers.Embedded() {
		return nil, fmt.Errorf("topology %s uses the embedded broker, which only lives inside `kandle run`; pass -brokers host:port of a running broker (e.g. `kandle dev-broker`)", t.Name)
	}
	return t.Brokers, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// serveMetrics serves /metrics for reg and the /healthz and /readyz probes
// of pr on addr until the returned server is closed.
func serveMetrics(e *env, addr string, reg *prometheus.Registry, pr *probe) (*http.Server, error) {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// kandle_ready exists (0) from the first scrape, before the engine does.
	if err := engine.RegisterReadiness(reg); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", pr.healthz)
	mux.HandleFunc("/readyz", pr.readyz)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: httpReadHeaderTimeout,
		ReadTimeout: httpReadTimeout, WriteTimeout: httpWriteTimeout, IdleTimeout: httpIdleTimeout}
	ln, err := listen(addr)
	if err != nil {
		return nil, fmt.Errorf("metrics endpoint %s: %w (set metrics: \"\" in the topology or -metrics to another address)", addr, err)
	}
	go func() { _ = srv.Serve(ln) }()
	e.log.Info("metrics endpoint", "url", "http://"+ln.Addr().String()+"/metrics", "probes", []string{"/healthz", "/readyz"})
	return srv, nil
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
