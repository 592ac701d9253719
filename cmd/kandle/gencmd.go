package main

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/connectors/kafka"
	"github.com/kandle/kandle/internal/gen"
	"github.com/kandle/kandle/topology"
)

func cmdGen(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "gen", "[-brokers host:port -topic trades [-t topology.yaml]] [generator flags]",
		"Generates a deterministic synthetic trade stream (random-walk prices as exact decimals) and writes it\n"+
			"as JSON lines to stdout, or produces it to a Kafka topic keyed by symbol when -brokers is given.\n"+
			"For a secured cluster, -t names a topology whose kafka block (TLS, SASL) the producer uses.\n"+
			"--profile devices makes a fleet of devices reporting once a day (the fields of testdata/topologies/devices.yaml),\n"+
			"some of which go silent for days and come back; each record's Kafka timestamp is its reading time.")
	cfg := gen.DefaultConfig()
	cfg.RegisterFlags(fs)
	fleet := gen.DefaultFleetConfig()
	profile := fs.String("profile", "trades", "what to generate: trades or devices")
	fs.IntVar(&fleet.Devices, "devices", fleet.Devices, "--profile devices: number of devices")
	fs.IntVar(&fleet.Days, "days", fleet.Days, "--profile devices: days of readings")
	fs.DurationVar(&fleet.Every, "every", fleet.Every, "--profile devices: report interval of a healthy device")
	fs.Float64Var(&fleet.SilentFrac, "silent-frac", fleet.SilentFrac, "--profile devices: fraction of devices that go silent once (that fraction of them never comes back)")
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
	var g gen.Stream
	switch *profile {
	case "trades":
		tg, err := gen.New(cfg)
		if err != nil {
			return err
		}
		g = tg
	case "devices":
		fleet.Seed, fleet.Start = cfg.Seed, cfg.Start
		fg, err := gen.NewDeviceFleet(fleet)
		if err != nil {
			return err
		}
		g = fg
		if *topic == "trades" {
			*topic = "device-readings"
		}
		fmt.Fprintf(e.stderr, "%d devices, %d readings; silent: %s\n", fleet.Devices, fg.Len(), describeSilences(fg))
	default:
		return fmt.Errorf("unknown --profile %q: use trades or devices", *profile)
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
		n, err := gen.Produce(ctx, cl, *topic, g, cfg.Interval())
		if tg, ok := g.(*gen.Generator); ok {
			c := tg.Counts()
			fmt.Fprintf(e.stderr, "produced %d records to %s (%d trades, %d duplicates, %d malformed)\n", n, *topic, c.Trades, c.Duplicates, c.Malformed)
		} else {
			fmt.Fprintf(e.stderr, "produced %d readings to %s\n", n, *topic)
		}
		return err
	}
	w := bufio.NewWriter(e.stdout)
	defer w.Flush()
	_, err := gen.WriteJSONLines(w, g)
	return err
}

// describeSilences lists the fleet's silent devices: "dev-001 2024-01-03→2024-01-11, …".
func describeSilences(f *gen.DeviceFleet) string {
	var parts []string
	for _, id := range slices.Sorted(maps.Keys(f.Silences)) {
		s := f.Silences[id]
		back := "never back"
		if !s[1].IsZero() {
			back = s[1].UTC().Format("2006-01-02T15:04")
		}
		parts = append(parts, fmt.Sprintf("%s %s→%s", id, s[0].UTC().Format("2006-01-02T15:04"), back))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
