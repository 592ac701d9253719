package kafka

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/internal/testkit"
	"github.com/kandle/kandle/topology"
)

// securedBroker starts a dev broker that serves TLS with a throwaway CA's
// certificate and requires SASL user alice.
func securedBroker(t *testing.T) (*DevBroker, testkit.TLSFiles) {
	t.Helper()
	files := testkit.TLS(t)
	return startBroker(t, WithTLSCert(files.ServerCert, files.ServerKey), WithSASLUser("alice", "wonder land")), files
}

// kafkaConfig parses the kafka block of a topology, the way users write
// it, so positions in errors are those of a topology file.
func kafkaConfig(t *testing.T, kafkaYAML string) topology.KafkaClient {
	t.Helper()
	top, err := topology.Parse("secured.yaml", []byte(`name: secured
brokers: [127.0.0.1:9093]
kafka:
`+kafkaYAML+`
sources: {trades: {topic: trades}}
processors: {1m: {kind: candles, from: trades, timeframe: 1m}}
`), topology.Registry{})
	if err != nil {
		t.Fatalf("topology: %v", err)
	}
	return top.Kafka
}

// Each mechanism kandle offers logs in over TLS to the dev broker; a record
// produced through the secured connection is consumed back through it.
func TestClientOptsTLSAndSASL(t *testing.T) {
	b, files := securedBroker(t)
	t.Setenv("KANDLE_TEST_KAFKA_PASSWORD", "wonder land")
	for _, mech := range []string{"plain", "scram-sha-256", "scram-sha-512"} {
		t.Run(mech, func(t *testing.T) {
			opts, err := ClientOpts(kafkaConfig(t, `
  tls: {enabled: true, ca_file: `+files.CA+`}
  sasl: {mechanism: `+mech+`, username: alice, password_env: KANDLE_TEST_KAFKA_PASSWORD}`))
			if err != nil {
				t.Fatal(err)
			}
			ctx := testCtx(t)
			cl := newClient(t, b.Addrs(), opts...)
			topic := "secured-" + mech
			if _, err := EnsureTopics(ctx, cl, []TopicSpec{{Name: topic, Partitions: 1}}); err != nil {
				t.Fatal(err)
			}
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("BTC"), Value: []byte(mech)}).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
			got := consumeN(t, ctx, b.Addrs(), 1, append(opts, kgo.ConsumeTopics(topic))...)
			if string(got[0].Value) != mech {
				t.Fatalf("consumed %q, want %q", got[0].Value, mech)
			}
		})
	}
}

// The SASL password can come from a file (a mounted secret) instead of an
// environment variable; an empty file stops ClientOpts at that key.
func TestClientOptsPasswordFile(t *testing.T) {
	b, files := securedBroker(t)
	dir := t.TempDir()
	secret, empty := filepath.Join(dir, "secret"), filepath.Join(dir, "empty")
	if err := os.WriteFile(secret, []byte("wonder land\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ClientOpts(kafkaConfig(t, `
  tls: {enabled: true, ca_file: `+files.CA+`}
  sasl: {mechanism: scram-sha-256, username: alice, password_file: `+empty+`}`)); err == nil ||
		!strings.Contains(err.Error(), "kafka.sasl.password_file: "+empty+" is empty") {
		t.Fatalf("ClientOpts with an empty password file: %v", err)
	}
	opts, err := ClientOpts(kafkaConfig(t, `
  tls: {enabled: true, ca_file: `+files.CA+`}
  sasl: {mechanism: scram-sha-256, username: alice, password_file: `+secret+`}`))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	if _, err := EnsureTopics(ctx, newClient(t, b.Addrs(), opts...), []TopicSpec{{Name: "secured-file", Partitions: 1}}); err != nil {
		t.Fatalf("log in with the password from the file: %v", err)
	}
}

// What a user gets wrong fails with an error that says what to fix: at
// startup for what is local (an unset variable, a missing file), at the
// first request for what only the broker knows (a wrong password, a
// certificate from another CA).
func TestClientOptsErrors(t *testing.T) {
	b, files := securedBroker(t)
	other := testkit.TLS(t) // a CA that did not sign the broker's certificate
	t.Setenv("KANDLE_TEST_KAFKA_PASSWORD", "not the password")
	t.Setenv("KANDLE_TEST_EMPTY", "")
	// aws-msk-iam loads the AWS config in ClientOpts: keep it to these
	// static credentials, off this machine's ~/.aws and the network.
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIAKANDLETEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "kandle-test-secret")
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	for _, c := range []struct {
		name, yaml string
		startup    bool     // fails in ClientOpts, not at the first request
		want       []string // in the message
	}{
		{"wrong password", `
  tls: {enabled: true, ca_file: ` + files.CA + `}
  sasl: {mechanism: scram-sha-256, username: alice, password_env: KANDLE_TEST_KAFKA_PASSWORD}`,
			false, []string{`SASL scram-sha-256 login as "alice" failed`, "$KANDLE_TEST_KAFKA_PASSWORD"}},
		{"unknown CA", `
  tls: {enabled: true, ca_file: ` + other.CA + `}
  sasl: {mechanism: plain, username: alice, password_env: KANDLE_TEST_KAFKA_PASSWORD}`,
			false, []string{"not signed by a CA in " + other.CA + " (kafka.tls.ca_file)", "x509"}},
		{"plaintext to a TLS broker", `
  sasl: {mechanism: plain, username: alice, password_env: KANDLE_TEST_KAFKA_PASSWORD, allow_plaintext: true}`,
			false, []string{"add tls: {enabled: true}"}},
		{"no SASL for a SASL broker", `
  tls: {enabled: true, ca_file: ` + files.CA + `}`,
			false, []string{"the broker requires SASL: add a sasl block"}},
		{"mechanism the broker lacks", `
  tls: {enabled: true, ca_file: ` + files.CA + `}
  sasl: {mechanism: aws-msk-iam}`,
			false, []string{"the broker does not offer SASL mechanism aws-msk-iam"}},
		{"empty password variable", `
  tls: {enabled: true, ca_file: ` + files.CA + `}
  sasl: {mechanism: plain, username: alice, password_env: KANDLE_TEST_EMPTY}`,
			true, []string{"secured.yaml:6:59: kafka.sasl.password_env: environment variable KANDLE_TEST_EMPTY is unset or empty; export KANDLE_TEST_EMPTY="}},
		{"missing CA file", `
  tls: {enabled: true, ca_file: /nonexistent/ca.pem}`,
			true, []string{"secured.yaml:5:33: kafka.tls.ca_file: cannot read the CA file", "no such file"}},
		{"key of another certificate", `
  tls: {enabled: true, cert_file: ` + files.ClientCert + `, key_file: ` + other.ClientKey + `}`,
			true, []string{"kafka.tls.cert_file: cannot load the client certificate", "the key must belong to the certificate"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := kafkaConfig(t, c.yaml)
			opts, err := ClientOpts(cfg)
			if err == nil {
				if c.startup {
					t.Fatal("ClientOpts accepted the config")
				}
				err = CheckAuth(testCtx(t), newClient(t, b.Addrs(), opts...), cfg)
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			if strings.Contains(err.Error(), "not the password") {
				t.Errorf("error shows the password: %v", err)
			}
		})
	}
}

// Mutual TLS: a broker that requires client certificates accepts the one
// cert_file and key_file name, and refuses a client without one.
func TestClientOptsMutualTLS(t *testing.T) {
	files := testkit.TLS(t)
	cert, err := tls.LoadX509KeyPair(files.ServerCert, files.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(files.CA)
	if err != nil {
		t.Fatal(err)
	}
	clientCAs := x509.NewCertPool()
	clientCAs.AppendCertsFromPEM(pem)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.TLS(&tls.Config{
		Certificates: []tls.Certificate{cert}, ClientCAs: clientCAs, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)

	opts, err := ClientOpts(kafkaConfig(t, `
  tls: {enabled: true, ca_file: `+files.CA+`, cert_file: `+files.ClientCert+`, key_file: `+files.ClientKey+`}`))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	cl := newClient(t, c.ListenAddrs(), append(opts, kgo.AllowAutoTopicCreation())...)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "mtls", Value: []byte("hello")}).FirstErr(); err != nil {
		t.Fatalf("produce with a client certificate: %v", err)
	}

	cfg := topology.KafkaClient{TLS: topology.KafkaTLS{Enabled: true, CAFile: files.CA}}
	opts, err = ClientOpts(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = CheckAuth(ctx, newClient(t, c.ListenAddrs(), opts...), cfg)
	if err == nil || !strings.Contains(err.Error(), "set kafka.tls.cert_file and key_file") {
		t.Fatalf("a client without a certificate: %v, want a hint at cert_file", err)
	}
}

// SASL users and a data dir do not mix: kfake would reload the users it
// persisted over the ones asked for.
func TestDevBrokerSASLRejectsDataDir(t *testing.T) {
	_, err := StartDevBroker(WithDataDir(t.TempDir()), WithSASLUser("alice", "pw"))
	if err == nil || !strings.Contains(err.Error(), "cannot be combined with a data dir") {
		t.Fatalf("StartDevBroker: %v", err)
	}
}

// A TLS dev broker restarted on its data dir creates the seed topics that
// are new, through its own TLS connection to itself.
func TestDevBrokerTLSDataDirSeeds(t *testing.T) {
	files := testkit.TLS(t)
	dir := t.TempDir()
	addr := "127.0.0.1:" + strconv.Itoa(testkit.FreePort(t))
	b, err := StartDevBroker(WithListen(addr), WithDataDir(dir), WithTLSCert(files.ServerCert, files.ServerKey), WithSeedTopics(1, "trades"))
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	b = startBroker(t, WithListen(addr), WithDataDir(dir), WithTLSCert(files.ServerCert, files.ServerKey), WithSeedTopics(1, "trades"), WithSeedTopics(2, "candles"))
	opts, err := ClientOpts(topology.KafkaClient{TLS: topology.KafkaTLS{Enabled: true, CAFile: files.CA}})
	if err != nil {
		t.Fatal(err)
	}
	ends, err := EndOffsets(testCtx(t), newClient(t, b.Addrs(), opts...), "trades", "candles")
	if err != nil {
		t.Fatal(err)
	}
	if len(ends["trades"]) != 1 || len(ends["candles"]) != 2 {
		t.Fatalf("after a TLS restart: %v, want trades with 1 partition and candles with 2", ends)
	}
}
