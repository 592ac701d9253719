package main

import (
	"bufio"
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/connectors/kafka"
	"github.com/kandle/kandle/internal/gen"
	"github.com/kandle/kandle/topology"
)

func cmdGen(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "gen", "[-brokers host:port -topic trades [-t topology.yaml]] [generator flags]",
		"Generates a deterministic synthetic trade stream (random-walk prices as exact decimals) and writes it\n"+
			"as JSON lines to stdout, or produces it to a Kafka topic keyed by symbol when -brokers is given.\n"+
			"For a secured cluster, -t names a topology whose kafka block (TLS, SASL) the producer uses.")
	cfg := gen.DefaultConfig()
	cfg.RegisterFlags(fs)
	brokers := fs.String("brokers", "", "comma-separated Kafka seed brokers; empty writes JSON lines to stdout")
	topic := fs.String("topic", "trades", "topic to produce to (with -brokers)")
	top := fs.String("t", "", "topology YAML whose kafka block (TLS and SASL settings) the producer uses (with -brokers)")
	if err := e.parseNoArgs(fs, args); err != nil {
		return err
	}
	var kcfg topology.KafkaClient // zero: plaintext, no SASL
	if *top != "" {
		t, err := loadTopology(*top)
		if err != nil {
			return reportTopology(e, err)
		}
		kcfg = t.Kafka
	}
	g, err := gen.New(cfg)
	if err != nil {
		return err
	}
	if seeds := splitList(*brokers); len(seeds) > 0 {
		sec, err := kafka.ClientOpts(kcfg)
		if err != nil {
			return err
		}
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.AllowAutoTopicCreation()}, sec...)...)
		if err != nil {
			return err
		}
		defer cl.Close()
		if err := kafka.CheckAuth(ctx, cl, kcfg); err != nil {
			return err
		}
		n, err := gen.Produce(ctx, cl, *topic, g, g.Interval())
		c := g.Counts()
		fmt.Fprintf(e.stderr, "produced %d records to %s (%d trades, %d duplicates, %d malformed)\n", n, *topic, c.Trades, c.Duplicates, c.Malformed)
		return err
	}
	w := bufio.NewWriter(e.stdout)
	defer w.Flush()
	_, err = gen.WriteJSONLines(w, g)
	return err
}
