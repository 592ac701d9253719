package main

import (
	"context"
	"fmt"

	"github.com/kandle/kandle/connectors/kafka"
)

func cmdDevBroker(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "dev-broker", "[--listen 127.0.0.1:9092] [flags]",
		"Runs an in-process Kafka-protocol broker (franz-go kfake) that any Kafka client can use — kcat,\n"+
			"kandle itself, your services. Transactions and consumer groups work. Stop with Ctrl-C.")
	listenAddr := fs.String("listen", "127.0.0.1:9092", "host:port to listen on (loopback only; port 0 picks a free one)")
	parts := fs.Int("partitions", 3, "partitions of auto-created topics")
	topics := fs.String("topics", "", "comma-separated topics to create at start")
	dataDir := fs.String("data-dir", "", "persist topics here across restarts (default: memory only)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	opts := []kafka.DevBrokerOption{kafka.WithListen(*listenAddr), kafka.WithDefaultPartitions(*parts), kafka.WithLogger(e.log)}
	if ts := splitList(*topics); len(ts) > 0 {
		opts = append(opts, kafka.WithSeedTopics(int32(*parts), ts...))
	}
	if *dataDir != "" {
		opts = append(opts, kafka.WithDataDir(*dataDir))
	}
	b, err := kafka.StartDevBroker(opts...)
	if err != nil {
		return err
	}
	defer b.Close()
	fmt.Fprintf(e.stdout, "dev broker listening on %s\n", b.Addrs()[0])
	<-ctx.Done()
	return nil
}
