package kafka

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
)

// DevBroker is an in-process Kafka broker (franz-go's kfake) for local runs,
// demos and tests. It speaks the Kafka protocol on a loopback port, so kcat
// and any other Kafka client can use it; topics are created on first use,
// and transactions and consumer groups work as on a real cluster.
type DevBroker struct {
	c      *kfake.Cluster
	groups *groupCoordinator // nil only when a test keeps kfake's own
	log    *slog.Logger
	self   []kgo.Opt   // what the broker's own client needs to reach it (TLS)
	own    *kgo.Client // the broker's client of itself, for the group coordinator
	close  sync.Once
}

// replaceGroupCoordinator serves the classic group protocol with
// groupCoordinator instead of kfake's (see there why).
func (b *DevBroker) replaceGroupCoordinator() error {
	own, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.Addrs()...)}, b.self...)...)
	if err != nil {
		return fmt.Errorf("kafka: dev broker self client: %w", err)
	}
	b.own = own
	b.groups = newGroupCoordinator(b.c, b.log, devMinSessionTimeout, devMaxSessionTimeout, func(group string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Group, req.Generation = group, -1
		if _, err := req.RequestWith(ctx, own); err != nil {
			b.log.Warn("dev broker: register group", "group", group, "err", err)
		}
	})
	return nil
}

type devBrokerConfig struct {
	listen          string
	partitions      int
	seeds           []seedTopics
	dataDir         string
	log             *slog.Logger
	tlsCert, tlsKey string
	saslUsers       []saslUser
	kfakeGroups     bool // keep kfake's group coordinator (tests show what it does)
}

type saslUser struct{ name, password string }

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

// WithTLSCert makes the broker accept only TLS connections, serving the PEM
// certificate certFile with its private key keyFile. Clients must trust the
// certificate's CA and, unless they set a server name, find the address they
// dial (e.g. 127.0.0.1) among its names.
func WithTLSCert(certFile, keyFile string) DevBrokerOption {
	return func(c *devBrokerConfig) { c.tlsCert, c.tlsKey = certFile, keyFile }
}

// WithSASLUser turns on SASL authentication and adds a user that may log in
// with PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512. Repeat it for more users. Once
// SASL is on, a client that does not authenticate can do nothing.
func WithSASLUser(name, password string) DevBrokerOption {
	return func(c *devBrokerConfig) { c.saslUsers = append(c.saslUsers, saslUser{name, password}) }
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
		kfake.GroupMinSessionTimeout(devMinSessionTimeout),
		kfake.GroupMaxSessionTimeout(devMaxSessionTimeout),
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
	sec, self, err := cfg.security()
	if err != nil {
		return nil, err
	}
	kopts = append(kopts, sec...)
	c, err := kfake.NewCluster(kopts...)
	if err != nil {
		if cfg.dataDir != "" {
			return nil, fmt.Errorf("kafka: start dev broker on %s with data dir %s (is the port or the dir in use by another broker?): %w", cfg.listen, cfg.dataDir, err)
		}
		return nil, fmt.Errorf("kafka: start dev broker on %s (is the port in use? use port 0 for a free one): %w", cfg.listen, err)
	}
	b := &DevBroker{c: c, log: cfg.log, self: self}
	if !cfg.kfakeGroups {
		if err := b.replaceGroupCoordinator(); err != nil {
			c.Close()
			return nil, err
		}
	}
	// kfake seeds topics only into a fresh cluster; after a restart from a
	// data dir, create the seeds that are still missing.
	if cfg.dataDir != "" && len(cfg.seeds) > 0 {
		if err := b.createSeeds(cfg.seeds); err != nil {
			b.Close()
			return nil, err
		}
	}
	if len(cfg.saslUsers) > 0 {
		if err := b.advertiseSASLHandshakeV0(); err != nil {
			b.Close()
			return nil, err
		}
	}
	return b, nil
}

// advertiseSASLHandshakeV0 makes the broker list SaslHandshake from v0 in
// its ApiVersions answers. kfake lists v1 only, the version it implements
// and every current client sends; but librdkafka (kcat, confluent-kafka-*)
// refuses to start SASL unless v0 is listed too, and then sends v1 anyway.
// The answer is kfake's own, fetched once, with that one range widened.
func (b *DevBroker) advertiseSASLHandshakeV0() error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.Addrs()...)}, b.self...)...)
	if err != nil {
		return fmt.Errorf("kafka: dev broker self client: %w", err)
	}
	defer cl.Close()
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName, req.ClientSoftwareVersion = "kandle-dev-broker", "1"
	own, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(own.ErrorCode)
	}
	if err != nil {
		return fmt.Errorf("kafka: dev broker: read its own API versions: %w", err)
	}
	keys := slices.Clone(own.ApiKeys)
	for i := range keys {
		if keys[i].ApiKey == int16(kmsg.SASLHandshake) {
			keys[i].MinVersion = 0
		}
	}
	b.c.ControlKey(int16(kmsg.ApiVersions), func(r kmsg.Request) (kmsg.Response, error, bool) {
		b.c.KeepControl()
		in := r.(*kmsg.ApiVersionsRequest)
		if in.Version > own.Version || in.Version >= 5 {
			return nil, nil, false // kfake's version downgrade and KIP-1242 checks
		}
		out := *own
		out.Version, out.ApiKeys = in.Version, keys
		return &out, nil, true
	})
	return nil
}

func (b *DevBroker) createSeeds(seeds []seedTopics) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.Addrs()...)}, b.self...)...)
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

// security returns the kfake options for TLS and SASL, and the kgo options
// the broker's own seeding client needs to connect to itself.
func (cfg *devBrokerConfig) security() (kopts []kfake.Opt, self []kgo.Opt, err error) {
	var tlsCfg *tls.Config // set when the SASL gate serves TLS
	if cfg.tlsCert != "" || cfg.tlsKey != "" {
		if cfg.tlsCert == "" || cfg.tlsKey == "" {
			return nil, nil, fmt.Errorf("kafka: dev broker TLS needs both a certificate and its key (got cert %q, key %q)", cfg.tlsCert, cfg.tlsKey)
		}
		cert, err := tls.LoadX509KeyPair(cfg.tlsCert, cfg.tlsKey)
		if err != nil {
			return nil, nil, fmt.Errorf("kafka: dev broker TLS certificate %s with key %s (both must be PEM, and the key must belong to the certificate): %w", cfg.tlsCert, cfg.tlsKey, err)
		}
		served := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		if len(cfg.saslUsers) > 0 {
			tlsCfg = served // the SASL gate terminates TLS (saslgate.go)
		} else {
			kopts = append(kopts, kfake.TLS(served))
		}
		// The broker dials itself: trust exactly the certificate it serves
		// instead of a CA chain it was never given.
		pinned := cert.Certificate[0]
		self = append(self, kgo.DialTLSConfig(&tls.Config{
			InsecureSkipVerify: true, //nolint:gosec // replaced by the pinning check below
			MinVersion:         tls.VersionTLS12,
			VerifyConnection: func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 || !bytes.Equal(cs.PeerCertificates[0].Raw, pinned) {
					return errors.New("kafka: dev broker: the peer is not this broker (its certificate differs)")
				}
				return nil
			},
		}))
	}
	if len(cfg.saslUsers) > 0 {
		if cfg.dataDir != "" {
			// kfake reloads the users it persisted over the configured ones,
			// so a changed user list would silently not apply.
			return nil, nil, errors.New("kafka: dev broker SASL users cannot be combined with a data dir (the broker would reload the users of an earlier run instead); drop the data dir, or SASL")
		}
		kopts = append(kopts, kfake.EnableSASL(), kfake.ListenFn(func(network, addr string) (net.Listener, error) {
			ln, err := net.Listen(network, addr)
			if err != nil {
				return nil, err
			}
			return saslGate{Listener: ln, tls: tlsCfg}, nil
		}))
		for _, u := range cfg.saslUsers {
			if u.name == "" || u.password == "" {
				return nil, nil, fmt.Errorf("kafka: dev broker SASL user %q needs a name and a password", u.name)
			}
			for _, m := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
				kopts = append(kopts, kfake.Superuser(m, u.name, u.password))
			}
		}
		// The broker's own client (the group coordinator's) logs in as the first user.
		u := cfg.saslUsers[0]
		self = append(self, kgo.SASL(plain.Auth{User: u.name, Pass: u.password}.AsMechanism()))
	}
	return kopts, self, nil
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
func (b *DevBroker) Close() {
	b.close.Do(func() {
		if b.groups != nil {
			b.groups.close()
			b.own.Close()
		}
		b.c.Close()
	})
}

// The group session timeouts the dev broker accepts: kfake's defaults, as
// Kafka's group.min.session.timeout.ms and group.max.session.timeout.ms.
const (
	devMinSessionTimeout = 6 * time.Second
	devMaxSessionTimeout = 5 * time.Minute
)

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
