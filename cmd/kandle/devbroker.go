package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/kandle/kandle/connectors/kafka"
)

func cmdDevBroker(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "dev-broker", "[--listen 127.0.0.1:9092] [--tls-cert cert.pem --tls-key key.pem] [--sasl-user user:pass]... [flags]",
		"Runs an in-process Kafka-protocol broker (franz-go kfake) that any Kafka client can use — kcat,\n"+
			"kandle itself, your services. Transactions and consumer groups work. Stop with Ctrl-C.\n\n"+
			"With --tls-cert/--tls-key it accepts TLS connections only, and with --sasl-user it requires a SASL\n"+
			"login (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512), so a topology's kafka block can be tried locally:\n"+
			"  kandle dev-broker --tls-cert server.pem --tls-key server-key.pem --sasl-user alice:secret\n"+
			"  kcat -b 127.0.0.1:9092 -X security.protocol=SASL_SSL -X sasl.mechanisms=SCRAM-SHA-256 \\\n"+
			"       -X sasl.username=alice -X sasl.password=secret -X ssl.ca.location=ca.pem -L")
	listenAddr := fs.String("listen", "127.0.0.1:9092", "host:port to listen on (loopback only; port 0 picks a free one)")
	parts := fs.Int("partitions", 3, "partitions of auto-created topics")
	topics := fs.String("topics", "", "comma-separated topics to create at start")
	dataDir := fs.String("data-dir", "", "persist topics here across restarts (default: memory only; not with --sasl-user)")
	tlsCert := fs.String("tls-cert", "", "PEM certificate to serve TLS with (needs --tls-key); clients must trust its CA, and it must name the\naddress clients dial (e.g. IP SAN 127.0.0.1). Default: plaintext")
	tlsKey := fs.String("tls-key", "", "PEM private key of --tls-cert")
	var users []string
	fs.Func("sasl-user", "require SASL and add a user as `user:password` (repeatable); each may log in with PLAIN,\nSCRAM-SHA-256 or SCRAM-SHA-512. The password is visible in the process list: use throwaway ones", func(v string) error {
		name, pass, ok := strings.Cut(v, ":")
		if !ok || name == "" || pass == "" {
			return errors.New("want user:password, e.g. alice:secret")
		}
		users = append(users, v)
		return nil
	})
	if err := e.parseNoArgs(fs, args); err != nil {
		return err
	}
	if (*tlsCert == "") != (*tlsKey == "") {
		return errors.New("--tls-cert and --tls-key go together: give the PEM certificate and its private key")
	}
	opts := []kafka.DevBrokerOption{kafka.WithListen(*listenAddr), kafka.WithDefaultPartitions(*parts), kafka.WithLogger(e.log)}
	if ts := splitList(*topics); len(ts) > 0 {
		opts = append(opts, kafka.WithSeedTopics(int32(*parts), ts...))
	}
	if *dataDir != "" {
		opts = append(opts, kafka.WithDataDir(*dataDir))
	}
	var mode []string
	if *tlsCert != "" {
		opts = append(opts, kafka.WithTLSCert(*tlsCert, *tlsKey))
		mode = append(mode, "TLS")
	}
	var names []string
	for _, u := range users {
		name, pass, _ := strings.Cut(u, ":")
		opts = append(opts, kafka.WithSASLUser(name, pass))
		names = append(names, name)
	}
	if len(names) > 0 {
		mode = append(mode, "SASL PLAIN/SCRAM-SHA-256/SCRAM-SHA-512 as "+strings.Join(names, ", "))
	}
	b, err := kafka.StartDevBroker(opts...)
	if err != nil {
		return err
	}
	defer b.Close()
	if len(mode) == 0 {
		mode = []string{"plaintext"}
	}
	fmt.Fprintf(e.stdout, "dev broker listening on %s (%s)\n", b.Addrs()[0], strings.Join(mode, "; "))
	<-ctx.Done()
	return nil
}
