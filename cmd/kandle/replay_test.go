package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/internal/testkit"
)

const replayCLITopology = `
name: rcli
brokers: [%s]
metrics: ""
sources:
  trades: {topic: trades, partitions: 2}
processors:
  c1m: {kind: candles, from: trades, timeframe: 1m, output: {topic: rcli.1m, partitions: 2}}
  c5m: {kind: rollup, from: c1m, timeframe: 5m, output: {topic: rcli.5m, partitions: 1}}
dead_letter: {topic: rcli.dlq}
`

// `kandle replay --out topics` into a cluster that has only the input topic
// (and does not create topics on use) creates the output and dead-letter
// topics before reading, and writes every candle to them.
func TestReplayOutTopicsCreatesMissingTopics(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "trades"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seeds := c.ListenAddrs()
	file := filepath.Join(t.TempDir(), "rcli.yaml")
	if err := os.WriteFile(file, fmt.Appendf(nil, replayCLITopology, seeds[0]), 0o600); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	var recs []*kgo.Record
	for i := range 40 {
		sym := []string{"BTC", "ETH"}[i%2]
		recs = append(recs, &kgo.Record{Topic: "trades", Key: []byte(sym),
			Value: fmt.Appendf(nil, `{"symbol":%q,"ts":%d,"price":"%d","qty":"1","trade_id":%d}`, sym, t0.Add(time.Duration(i)*30*time.Second).UnixMilli(), 100+i, i)})
	}
	recs = append(recs, &kgo.Record{Topic: "trades", Key: []byte("BTC"), Value: []byte(`{not json`)})
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// To a file first: what the topics must hold afterwards.
	var want, errb bytes.Buffer
	if code := realMain(context.Background(), []string{"replay", "-t", file, "--out", "-"}, &want, &errb); code != 0 {
		t.Fatalf("replay --out -: exit %d\n%s", code, errb.String())
	}
	var wantCandles []string
	for _, l := range strings.Split(strings.TrimSpace(want.String()), "\n") {
		if !strings.HasPrefix(l, "dlq ") {
			wantCandles = append(wantCandles, l)
		}
	}
	errb.Reset()
	var out bytes.Buffer
	if code := realMain(context.Background(), []string{"replay", "-t", file, "--out", "topics"}, &out, &errb); code != 0 {
		t.Fatalf("replay --out topics into a cluster without the output topics: exit %d\n%s", code, errb.String())
	}
	var got []string
	for _, topic := range []string{"rcli.1m", "rcli.5m"} {
		for _, r := range testkit.ReadTopic(t, seeds, topic) {
			got = append(got, string(r.Value))
		}
	}
	sortStrings(got)
	sortStrings(wantCandles)
	if strings.Join(got, "\n") != strings.Join(wantCandles, "\n") {
		t.Errorf("output topics hold %d candles, the replay to stdout wrote %d:\ngot  %q\nwant %q", len(got), len(wantCandles), got, wantCandles)
	}
	if dl := testkit.ReadTopic(t, seeds, "rcli.dlq"); len(dl) != 1 || !strings.Contains(string(dl[0].Value), "malformed_json") {
		t.Errorf("dead-letter topic holds %d records, want the one malformed record", len(dl))
	}
}

// Nothing answers at the brokers' address: exit status 1 and a message that
// names the brokers and says what to do, within the --timeout.
func TestReplayUnreachableBrokerExitsOne(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	file := filepath.Join(t.TempDir(), "rcli.yaml")
	if err := os.WriteFile(file, fmt.Appendf(nil, replayCLITopology, addr), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{"-", "topics"} {
		var stdout, stderr bytes.Buffer
		start := time.Now()
		code := realMain(context.Background(), []string{"replay", "-t", file, "--out", out, "--timeout", "2s"}, &stdout, &stderr)
		if code != 1 {
			t.Errorf("--out %s: exit %d, want 1\n%s", out, code, stderr.String())
		}
		for _, want := range []string{"kandle replay: ", "cannot reach the brokers", addr, "--timeout"} {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("--out %s: stderr lacks %q:\n%s", out, want, stderr.String())
			}
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("--out %s: took %s with --timeout 2s", out, d)
		}
		if stdout.Len() > 0 {
			t.Errorf("--out %s: wrote a result although nothing was read: %q", out, stdout.String())
		}
	}
}
