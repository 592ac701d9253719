package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// DevBroker is an in-process Kafka broker (franz-go's kfake) for local runs,
// demos and tests. It speaks the Kafka protocol on a loopback port, so kcat
// and any other Kafka client can use it; topics are created on first use,
// and transactions and consumer groups work as on a real cluster.
type DevBroker struct {
	c   *kfake.Cluster
	log *slog.Logger
}

type devBrokerConfig struct {
	listen     string
	partitions int
	seeds      []seedTopics
	dataDir    string
	log        *slog.Logger
}

type seedTopics struct {
	partitions int32
	topics     []string
}

// DevBrokerOption configures StartDevBroker.
type DevBrokerOption func(*devBrokerConfig)

// WithListen sets the listen address, "127.0.0.1:PORT" (port 0 picks a free
// one, the default). The broker always binds the loopback interface, so the
// host must be 127.0.0.1, localhost or empty.
func WithListen(hostport string) DevBrokerOption {
	return func(c *devBrokerConfig) { c.listen = hostport }
}

// WithDefaultPartitions sets the partition count of auto-created topics
// (default 3).
func WithDefaultPartitions(n int) DevBrokerOption {
	return func(c *devBrokerConfig) { c.partitions = n }
}

// WithSeedTopics creates topics with the given partition count at start
// (partitions < 1 means the default count). Existing topics are kept.
func WithSeedTopics(partitions int32, topics ...string) DevBrokerOption {
	return func(c *devBrokerConfig) {
		c.seeds = append(c.seeds, seedTopics{partitions, append([]string(nil), topics...)})
	}
}

// WithDataDir persists topics, records, offsets and transactions to dir, and
// reloads them when a broker starts on the same dir again.
func WithDataDir(dir string) DevBrokerOption {
	return func(c *devBrokerConfig) { c.dataDir = dir }
}

// WithLogger sets where the broker's warnings and errors go (default
// slog.Default()). Its info and debug chatter is dropped.
func WithLogger(l *slog.Logger) DevBrokerOption {
	return func(c *devBrokerConfig) { c.log = l }
}

// StartDevBroker starts a single-node broker and returns once it accepts
// connections. Close stops it.
func StartDevBroker(opts ...DevBrokerOption) (*DevBroker, error) {
	cfg := devBrokerConfig{listen: "127.0.0.1:0", partitions: 3, log: slog.Default()}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.log == nil {
		cfg.log = slog.Default()
	}
	port, err := loopbackPort(cfg.listen)
	if err != nil {
		return nil, err
	}
	if cfg.partitions < 1 {
		return nil, fmt.Errorf("kafka: dev broker default partitions must be at least 1, got %d", cfg.partitions)
	}
	kopts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(cfg.partitions),
		kfake.WithLogger(slogBridge{cfg.log}),
	}
	if port != 0 {
		kopts = append(kopts, kfake.Ports(port))
	}
	for _, s := range cfg.seeds {
		kopts = append(kopts, kfake.SeedTopics(s.partitions, s.topics...))
	}
	if cfg.dataDir != "" {
		kopts = append(kopts, kfake.DataDir(cfg.dataDir))
	}
	c, err := kfake.NewCluster(kopts...)
	if err != nil {
		if cfg.dataDir != "" {
			return nil, fmt.Errorf("kafka: start dev broker on %s with data dir %s (is the port or the dir in use by another broker?): %w", cfg.listen, cfg.dataDir, err)
		}
		return nil, fmt.Errorf("kafka: start dev broker on %s (is the port in use? use port 0 for a free one): %w", cfg.listen, err)
	}
	b := &DevBroker{c: c, log: cfg.log}
	// kfake seeds topics only into a fresh cluster; after a restart from a
	// data dir, create the seeds that are still missing.
	if cfg.dataDir != "" && len(cfg.seeds) > 0 {
		if err := b.createSeeds(cfg.seeds); err != nil {
			c.Close()
			return nil, err
		}
	}
	return b, nil
}

func (b *DevBroker) createSeeds(seeds []seedTopics) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
	if err != nil {
		return fmt.Errorf("kafka: dev broker seed client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var specs []TopicSpec
	for _, s := range seeds {
		for _, t := range s.topics {
			specs = append(specs, TopicSpec{Name: t, Partitions: s.partitions})
		}
	}
	warns, err := EnsureTopics(ctx, cl, specs)
	if err != nil {
		return fmt.Errorf("kafka: dev broker seed topics: %w", err)
	}
	for _, w := range warns {
		b.log.Warn("dev broker: seed topic differs from the persisted one", "warning", w.String())
	}
	return nil
}

// loopbackPort validates a listen address and returns its port.
func loopbackPort(hostport string) (int, error) {
	host, ps, err := net.SplitHostPort(hostport)
	if err != nil {
		return 0, fmt.Errorf("kafka: dev broker listen address %q: want 127.0.0.1:PORT: %w", hostport, err)
	}
	switch host {
	case "", "127.0.0.1", "localhost":
	default:
		return 0, fmt.Errorf("kafka: dev broker listen address %q: the dev broker only binds 127.0.0.1; use 127.0.0.1:%s (run Redpanda from deploy/ for a broker on other interfaces)", hostport, ps)
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 0 || port > 65535 {
		return 0, fmt.Errorf("kafka: dev broker listen address %q: port must be 0..65535", hostport)
	}
	return port, nil
}

// Addrs returns the broker's host:port addresses, for kgo.SeedBrokers or
// kcat -b.
func (b *DevBroker) Addrs() []string { return b.c.ListenAddrs() }

// Close stops the broker, persisting its state first when a data dir is
// set. It is safe to call more than once.
func (b *DevBroker) Close() { b.c.Close() }

// slogBridge forwards kfake's warnings and errors to slog.
type slogBridge struct{ l *slog.Logger }

func (s slogBridge) Logf(level kfake.LogLevel, msg string, args ...any) {
	var sl slog.Level
	switch level {
	case kfake.LogLevelError:
		sl = slog.LevelError
	case kfake.LogLevelWarn:
		sl = slog.LevelWarn
	default:
		return
	}
	if !s.l.Enabled(context.Background(), sl) {
		return
	}
	s.l.Log(context.Background(), sl, "kfake: "+fmt.Sprintf(msg, args...))
}
