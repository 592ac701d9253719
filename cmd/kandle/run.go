package main

import (
	"context"
	"errors"
	"net"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kandle/kandle/engine"
)

func listen(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }

func cmdRun(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "run", "[-t topology.yaml] [flags]",
		"Runs every processor and sink of the topology as a member of its consumer groups. Start several\n"+
			"instances with different -instance ids to spread partitions; stop with SIGTERM/Ctrl-C (in-flight work\n"+
			"is committed and the groups are left cleanly, unless -static-membership keeps the places for a restart).\n\n"+
			"It refuses to start when the topology changed a setting a processor's stored state depends on\n"+
			"(timeframe, zone, lateness, max_idle, dedupe, gap_fill, fields, input, its rollup chain), naming each\n"+
			"processor and what to do; `kandle plan -t NEW --against OLD` shows it before you deploy.")
	top := topologyFlag(fs)
	brokers := brokersFlag(fs)
	stateDir := fs.String("state-dir", ".data/state", "directory of the local Pebble state store (\"\" keeps state in memory and rebuilds it from the changelog)")
	host, _ := os.Hostname()
	instance := fs.String("instance", host, "instance id; transactional ids derive from it, so reuse it when restarting the same instance")
	metrics := fs.String("metrics", "", "address of the /metrics endpoint (default: the topology's metrics key)")
	listenAddr := fs.String("dev-broker-listen", "127.0.0.1:9092", "where the embedded dev broker listens when the topology says brokers: embedded")
	only := fs.String("only", "", "comma-separated processor/sink names to run (default all)")
	txnTimeout := fs.Duration("transaction-timeout", 10*time.Second, "Kafka transaction timeout: the longest a crashed instance's open transaction can hold back readers")
	static := fs.Bool("static-membership", false, "join the consumer groups as a static member named by -instance: a restart inside -session-timeout gets its partitions back without a rebalance, but a stop does not leave the groups either (its partitions wait out the session timeout)")
	sessionTimeout := fs.Duration("session-timeout", 10*time.Second, "consumer group session timeout: how long a crashed or frozen instance keeps its partitions before the group moves them")
	readyLag := fs.Int64("ready-lag", engine.DefaultReadyLag, "/readyz answers not ready while a stage or sink is more than this many input records behind")
	stallAfter := fs.Duration("stall-after", engine.DefaultStallAfter, "/healthz answers not alive once a stage or sink loop has not turned for this long")
	if err := e.parseNoArgs(fs, args); err != nil {
		return err
	}
	t, err := loadTopology(*top)
	if err != nil {
		return reportTopology(e, err)
	}
	reg := prometheus.NewRegistry()
	addr := t.Metrics
	if *metrics != "" {
		addr = *metrics
	}
	pr := newProbe()
	if addr != "" {
		srv, err := serveMetrics(e, addr, reg, pr)
		if err != nil {
			return err
		}
		defer srv.Close()
	}
	pr.waiting("connecting to the sinks' stores")
	sinks, err := buildSinks(ctx, e, t, reg, pr)
	if err != nil {
		return err
	}
	opts := append(sinks, engine.WithLogger(e.log), engine.WithRegisterer(reg), engine.WithStateDir(*stateDir),
		engine.WithInstanceID(*instance), engine.WithDevBrokerListen(*listenAddr), engine.WithTransactionTimeout(*txnTimeout),
		engine.WithSessionTimeout(*sessionTimeout), engine.WithStaticMembership(*static), engine.WithReadyLag(*readyLag), engine.WithStallAfter(*stallAfter))
	if b := splitList(*brokers); len(b) > 0 {
		opts = append(opts, engine.WithBrokers(b))
	}
	if o := splitList(*only); len(o) > 0 {
		opts = append(opts, engine.WithOnly(o...))
	}
	if *stateDir != "" {
		if err := os.MkdirAll(*stateDir, 0o700); err != nil {
			return err
		}
	}
	eng, err := engine.New(t, opts...)
	if err != nil {
		return err
	}
	pr.running(eng)
	err = eng.Run(ctx)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
