package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/connectors/dynamodb"
	"github.com/kandle/kandle/decimal"
	"github.com/kandle/kandle/internal/testkit"
	"github.com/kandle/kandle/topology"
)

const devicesQueryTopology = `
name: devq
brokers: [127.0.0.1:1]
metrics: ""
sources:
  readings: {topic: readings, partitions: 1, fields: {key: device, time: ts, price: value, qty: "", id: ""}}
processors:
  watch: {kind: silence, from: readings, levels: [{name: unreachable, after: 3d}]}
sinks:
  latest:
    kind: dynamodb
    from: readings
    endpoint: %[1]s
    provision: true
    table: {name: latest, sk_type: S}
    pk: "{symbol}"
    sk: "latest"
  alerts:
    kind: dynamodb
    from: [watch]
    endpoint: %[1]s
    provision: true
    table:
      name: device_events
      sk_type: S
      gsis:
        by_level: {pk: level, pk_type: S, sk: sk, sk_type: S}
    pk: "DEVICE#{owner}"
    sk: "{device}#{event}"
`

// TestQueryDevices: kandle query reads the latest readings of many devices
// at once (items, strongly consistent) and every device at one level
// through a declared GSI (index), and refuses a consistent index read.
func TestQueryDevices(t *testing.T) {
	ddb := testkit.Dynalite(t)
	top := writeFile(t, "devq.yaml", fmt.Sprintf(devicesQueryTopology, ddb.URL()))
	tp, err := topology.Load(top, sinkRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	latest, err := dynamodb.New(ctx, *tp.Sinks["latest"].Config.(*dynamodb.Config))
	if err != nil {
		t.Fatal(err)
	}
	var ts []candle.Trade
	for d := range 150 {
		for r := range 2 {
			ts = append(ts, candle.Trade{Key: fmt.Sprintf("d%03d", d), TS: int64(1_767_225_600_000 + r*1000),
				Price: decimal.MustParse(fmt.Sprintf("%d.%d", 20+r, d)), Qty: decimal.MustParse("1")})
		}
	}
	if err := latest.WriteTrades(ctx, ts); err != nil {
		t.Fatal(err)
	}
	if err := latest.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for d := range 150 {
		keys = append(keys, fmt.Sprintf("d%03d", d))
	}
	out, errOut, code := runKandle(t, "query", "-t", top, "-sink", "latest", "-consistent", "items", strings.Join(append(keys, "nope"), ","))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 150 || !strings.Contains(lines[7], `"price":"21.7"`) || !strings.Contains(lines[7], `"symbol":"d007"`) {
		t.Fatalf("items (exit %d): %d lines, line 8 %q\n%s", code, len(lines), lines[min(7, len(lines)-1)], errOut)
	}

	alerts, err := dynamodb.New(ctx, *tp.Sinks["alerts"].Config.(*dynamodb.Config))
	if err != nil {
		t.Fatal(err)
	}
	if err := alerts.WriteEvents(ctx, [][]byte{
		[]byte(`{"device":"d1","event":"unreachable","level":"unreachable","fired_at":"2026-01-04T00:00:00.000Z","owner":"o1"}`),
		[]byte(`{"device":"d2","event":"unreachable","level":"unreachable","fired_at":"2026-01-05T00:00:00.000Z","owner":"o2"}`),
		[]byte(`{"device":"d1","event":"recovered","level":"recovered","recovered_at":"2026-01-06T00:00:00.000Z","owner":"o1"}`),
	}); err != nil {
		t.Fatal(err)
	}
	if err := alerts.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = runKandle(t, "query", "-t", top, "-sink", "alerts", "index", "by_level", "unreachable")
	if code != 0 || strings.Count(out, "\n") != 2 || !strings.Contains(out, `"device":"d1"`) || !strings.Contains(out, `"device":"d2"`) {
		t.Fatalf("index (exit %d):\n%s%s", code, out, errOut)
	}
	if _, errOut, code := runKandle(t, "query", "-t", top, "-sink", "alerts", "-consistent", "index", "by_level", "unreachable"); code != 1 || !strings.Contains(errOut, "eventually consistently") {
		t.Fatalf("a consistent GSI read: exit %d, %s", code, errOut)
	}
}
