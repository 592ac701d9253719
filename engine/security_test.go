package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/connectors/kafka"
	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/internal/testkit"
	"github.com/kandle/kandle/topology"
)

const securedTopology = `
name: secured
brokers: [%s]
metrics: ""
commit_interval: 50ms
kafka:
  tls: {enabled: true, ca_file: %s}
  sasl: {mechanism: scram-sha-512, username: kandle, password_env: %s}
sources:
  trades: {topic: trades, partitions: 2}
processors:
  c1m: {kind: candles, from: trades, timeframe: 1m, lateness: 2s, output: {topic: c.1m, partitions: 2}}
dead_letter: {topic: secured.dlq}
`

// Against a cluster that only speaks TLS and requires a SCRAM login, every
// client of the engine (group sessions, restore and topic creation) and of
// replay connects with the topology's kafka block, and the live candles
// equal a replay of the same input.
func TestSecuredClusterLiveEqualsReplay(t *testing.T) {
	files := testkit.TLS(t)
	b, err := kafka.StartDevBroker(kafka.WithListen("127.0.0.1:0"), kafka.WithTLSCert(files.ServerCert, files.ServerKey),
		kafka.WithSASLUser("kandle", "correct horse"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	seeds := b.Addrs()
	t.Setenv("KANDLE_TEST_KAFKA_PASSWORD", "correct horse")
	top, err := topology.Parse("secured.yaml", fmt.Appendf(nil, securedTopology, seeds[0], files.CA, "KANDLE_TEST_KAFKA_PASSWORD"), topology.Registry{})
	if err != nil {
		t.Fatal(err)
	}
	opts, err := kafka.ClientOpts(top.Kafka)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kafka.EnsureTopics(context.Background(), cl, []kafka.TopicSpec{{Name: "trades", Partitions: 2}}); err != nil {
		t.Fatal(err)
	}

	f := &fixture{t: t, seeds: seeds, top: top, opts: opts, topics: []string{"c.1m"}}
	f.produce(3000, 11, t0, 30*time.Minute)
	want := f.replay()
	if len(want["c.1m"]) < 8*25 {
		t.Fatalf("replay made too few candles: %d", len(want["c.1m"]))
	}
	r := f.start(t.TempDir(), "a")
	defer r.stop(t)
	f.waitFor(want, 60*time.Second)
}

// What can be checked before connecting stops engine.New with the key to
// fix: a password variable that is not set, and TLS or SASL asked of the
// plaintext embedded broker.
func TestSecuredClusterStartupErrors(t *testing.T) {
	files := testkit.TLS(t)
	for _, c := range []struct{ name, brokers, want string }{
		{"unset password", "127.0.0.1:9093", "secured.yaml:8:68: kafka.sasl.password_env: environment variable KANDLE_TEST_UNSET_PASSWORD is unset or empty; export KANDLE_TEST_UNSET_PASSWORD="},
		{"embedded broker", "embedded", "secured.yaml:7:3: kafka: TLS and SASL need a broker that serves them, but brokers: embedded starts a plaintext one"},
	} {
		t.Run(c.name, func(t *testing.T) {
			top, err := topology.Parse("secured.yaml", fmt.Appendf(nil, securedTopology, c.brokers, files.CA, "KANDLE_TEST_UNSET_PASSWORD"), topology.Registry{})
			if err != nil {
				t.Fatal(err)
			}
			_, err = engine.New(top)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("engine.New: %v\nwant an error containing %q", err, c.want)
			}
		})
	}
}
