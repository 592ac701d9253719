package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/connectors/kafka"
	"github.com/kandle/kandle/decimal"
	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/internal/testkit"
	"github.com/kandle/kandle/topology"
)

// poisonTopology uses the shipped defaults (lateness, idle_timeout,
// max_future, max_record_bytes): what users run.
const poisonTopology = `
name: poison
brokers: [%s]
metrics: ""
commit_interval: 50ms
sources:
  trades: {topic: trades, partitions: 1}
processors:
  c1m: {kind: candles, from: trades, timeframe: 1m, output: {topic: c.1m, partitions: 1}}
  c5m: {kind: rollup, from: c1m, timeframe: 5m, output: {topic: c.5m, partitions: 1}}
dead_letter: {topic: poison.dlq}
`

// poisonInput is trades before and after a 900 kB record of control
// characters, with the exact-decimal cases.
type poisonInput struct {
	t0     time.Time // open of the first 1m window
	poison []byte
}

func producePoison(t *testing.T, seeds []string) poisonInput {
	t.Helper()
	// Recent event times (within max_future, not ancient) so the shipped
	// defaults apply as in production.
	t0 := time.Now().UTC().Add(-30 * time.Minute).Truncate(5 * time.Minute)
	in := poisonInput{t0: t0, poison: bytes.Repeat([]byte{0x01, 0x02, 0x1b, 0x7f, 0x00, '\n'}, 150_000)}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kafka.EnsureTopics(context.Background(), cl, []kafka.TopicSpec{{Name: "trades", Partitions: 1}}); err != nil {
		t.Fatal(err)
	}
	trade := func(sec int, price, qty string) *kgo.Record {
		return &kgo.Record{Topic: "trades", Key: []byte("TOK"), Value: fmt.Appendf(nil,
			`{"symbol":"TOK","ts":%d,"price":"%s","qty":"%s","trade_id":%d}`, t0.Add(time.Duration(sec)*time.Second).UnixMilli(), price, qty, sec)}
	}
	recs := []*kgo.Record{
		trade(1, "8356.7124", "61.674945886431317500"),
		{Topic: "trades", Key: []byte("TOK"), Value: in.poison},
		trade(2, "0.000000000000000001", "0.000000000000000001"),
		trade(61, "99999999999999999999.999999999999999999", "99999999999999999999.999999999999999999"),
		trade(400, "1", "1"), // closes the first 5m window
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return in
}

// checkPoisonOutputs waits for the dead letter of the poison record and the
// candles of the trades around it: exact quote volumes through 1m and 5m.
func checkPoisonOutputs(t *testing.T, seeds []string, in poisonInput, within time.Duration) {
	t.Helper()
	p1 := decimal.Product(decimal.MustParse("8356.7124"), decimal.MustParse("61.674945886431317500")).
		Add(decimal.Product(decimal.MustParse("0.000000000000000001"), decimal.MustParse("0.000000000000000001")))
	big := decimal.MustParse("99999999999999999999.999999999999999999")
	p2 := decimal.Product(big, big)
	want1m := map[int64]decimal.Sum{in.t0.UnixMilli(): p1, in.t0.Add(time.Minute).UnixMilli(): p2}
	want5m := p1.Add(p2)
	deadline := time.Now().Add(within)
	var problem string
	for time.Now().Before(deadline) {
		problem = ""
		var dl []string
		for _, r := range testkit.ReadTopic(t, seeds, "poison.dlq") {
			if !json.Valid(r.Value) {
				t.Fatalf("dead letter is not valid JSON: %.200q", r.Value)
			}
			if len(r.Value) > engine.MaxDeadLetterBytes {
				t.Fatalf("dead letter of %d bytes", len(r.Value))
			}
			dl = append(dl, string(r.Value))
		}
		found := false
		for _, d := range dl {
			var e struct {
				Reason    string
				Truncated bool   `json:"record_truncated"`
				Bytes     int    `json:"record_bytes"`
				Record    string `json:"record"`
			}
			if err := json.Unmarshal([]byte(d), &e); err != nil {
				t.Fatalf("dead letter %.200q: %v", d, err)
			}
			if e.Reason == "oversized" && e.Truncated && e.Bytes == len(in.poison) && strings.HasPrefix(string(in.poison), e.Record) && e.Record != "" {
				found = true
			}
		}
		if !found {
			problem = fmt.Sprintf("no truncated dead letter of the poison record among %d", len(dl))
		}
		got1m := map[int64]decimal.Sum{}
		for _, r := range testkit.ReadTopic(t, seeds, "c.1m") {
			if !json.Valid(r.Value) {
				t.Fatalf("candle is not valid JSON: %q", r.Value)
			}
			c, err := candle.ParseJSON(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			if !c.Gap {
				got1m[c.OpenTime] = c.QuoteVolume
			}
		}
		for open, q := range want1m {
			if g, ok := got1m[open]; !ok || !g.Equal(q) {
				problem += fmt.Sprintf("; 1m %s: quote_volume %s (present %v), want %s", time.UnixMilli(open).UTC(), g, ok, q)
			}
		}
		var got5m *candle.Candle
		for _, r := range testkit.ReadTopic(t, seeds, "c.5m") {
			c, err := candle.ParseJSON(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			if c.OpenTime == in.t0.UnixMilli() {
				got5m = &c
			}
		}
		if got5m == nil || !got5m.QuoteVolume.Equal(want5m) || got5m.Trades != 3 {
			problem += fmt.Sprintf("; 5m candle %+v, want quote_volume %s over 3 trades", got5m, want5m)
		}
		if problem == "" {
			return
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Fatalf("after %s: %s", within, problem)
}

// poisonSetup starts a dev broker with the poison input and parses the
// topology for it.
func poisonSetup(t *testing.T) ([]string, *topology.Topology, poisonInput) {
	seeds := devBroker(t)
	top, err := topology.Parse("poison.yaml", fmt.Appendf(nil, poisonTopology, seeds[0]), topology.Registry{})
	if err != nil {
		t.Fatal(err)
	}
	return seeds, top, producePoison(t, seeds)
}

// A 900 kB record of control characters through a live stage: the stage
// writes a truncated dead letter, commits and moves on to later records.
func TestPoisonRecordLive(t *testing.T) {
	testkit.WallClockTest(t)
	seeds, top, in := poisonSetup(t)
	f := &fixture{t: t, seeds: seeds, top: top}
	r := f.start(t.TempDir(), "a")
	defer r.stop(t)
	checkPoisonOutputs(t, seeds, in, 90*time.Second)
}

// The same input through `kandle replay` writing to the topics: the replay
// finishes (no MESSAGE_TOO_LARGE) with the same dead letter and candles.
func TestPoisonRecordReplay(t *testing.T) {
	testkit.WallClockTest(t)
	seeds, top, in := poisonSetup(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// Output topics exist, as they do where a live topology ran before.
	if _, err := kafka.EnsureTopics(context.Background(), cl, []kafka.TopicSpec{
		{Name: "c.1m", Partitions: 1}, {Name: "c.5m", Partitions: 1}, {Name: "poison.dlq", Partitions: 1}}); err != nil {
		t.Fatal(err)
	}
	out, err := engine.NewTopicOutput(context.Background(), top, seeds, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := engine.Replay(ctx, top, seeds, engine.ReplayOptions{Started: time.Now(), Out: out}); err != nil {
		t.Fatalf("replay: %v", err)
	}
	if err := out.Close(ctx); err != nil {
		t.Fatalf("replay output: %v", err)
	}
	checkPoisonOutputs(t, seeds, in, 30*time.Second)
}
