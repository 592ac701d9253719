package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/internal/testkit"
	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/topology"
)

// kinesisKindsTopology reads one device stream three ways: plain candles
// of one value, multi-metric candles (a series per device and metric) and
// silence levels. Lateness, idle_timeout and max_future are as shipped.
const kinesisKindsTopology = `
name: kres
brokers: [%[1]s]
metrics: ""
commit_interval: 50ms
sources:
  readings:
    kind: kinesis
    partitions: 2
    kinesis: {stream: dev, endpoint: %[2]s, dynamodb_endpoint: %[3]s, lease_duration: 2s, poll_interval: 50ms}
    fields: {key: device, time: ts, values: [temperature, humidity], qty: "", id: ""}
  temps:
    kind: kinesis
    partitions: 2
    kinesis: {stream: dev, endpoint: %[2]s, dynamodb_endpoint: %[3]s, lease_duration: 2s, poll_interval: 50ms}
    fields: {key: device, time: ts, price: temperature, qty: "", id: ""}
processors:
  t2s: {kind: candles, from: temps, timeframe: 2s, output: {topic: kres.t2s, partitions: 2}}
  m10s: {kind: candles, from: readings, timeframe: 10s, output: {topic: kres.m10s, partitions: 2}}
  quiet:
    kind: silence
    from: readings
    carry: [owner]
    output: {topic: kres.quiet, partitions: 2}
    levels:
      - {name: l1, after: 5s, action: status}
      - {name: l2, after: 10s, action: alert}
      - {name: l3, after: 15s, action: alert}
dead_letter: {topic: kres.dlq}
`

// Every processor kind follows a Kinesis split and a merge: 50 devices on a
// 2-shard stream read by a candles, a multi-metric candles and a silence
// processor, two instances, one of them SIGKILLed; a shard is split while
// silence timers are pending and its children merged later, while others
// are. The candles closed by the input equal a replay of the stream (which
// hands state over the same way); every silence level of every device fires
// exactly once and each device recovers once, as in the replay.
func TestKinesisReshardEveryKind(t *testing.T) {
	testkit.WallClockTest(t)
	top, path, seeds, client := kinesisSetup(t, "dev:2", kinesisKindsTopology)
	ctx := context.Background()
	const devices = 50
	prod := startDeviceProducer(t, client, "dev", devices)
	defer prod.stop()
	a := startEngine(t, top, t.TempDir(), "a")
	defer a.stop(t)
	child := startChildInstance(t, path, "b")
	start := time.Now()
	at := func(d time.Duration) { time.Sleep(time.Until(start.Add(d))) } // the scenario's wall-clock schedule

	at(3 * time.Second)
	prod.silence(0, 25) // their levels come due across the split and the merge
	at(4 * time.Second)
	sh := listKinesisShards(t, client, "dev")[0]
	kids := splitShard(t, client, "dev", sh)
	t.Logf("split %s into %v", *sh.ShardId, kids)
	at(7 * time.Second) // between the split and the merge
	child.kill(t)
	at(9 * time.Second)
	prod.silence(25, 38)
	at(11 * time.Second)
	if _, err := client.MergeShards(ctx, &awskinesis.MergeShardsInput{StreamName: aws.String("dev"),
		ShardToMerge: &kids[0], AdjacentShardToMerge: &kids[1]}); err != nil {
		t.Fatal(err)
	}
	waitStreamActive(t, client, "dev")
	t.Logf("merged %v", kids)
	at(14 * time.Second)
	prod.silence(38, devices) // all silent
	// Every level of every device comes due 15s after its last reading put
	// (a starved producer may put it late): the devices come back once 4s
	// after that, when every level has fired by the wall clock.
	time.Sleep(time.Until(prod.lastPut().Add(19 * time.Second)))
	back := time.Now()
	prod.report(0, devices)
	time.Sleep(time.Second)
	sent := prod.stop()
	t.Logf("put %d readings in real time", len(sent))

	candleTopics := []string{"kres.t2s", "kres.m10s"}
	var (
		want         map[string][]string
		live, wantEv []silenceEvent
		diff, evDiff string
	)
	deadline := time.Now().Add(40 * time.Second)
	for {
		var wantDL []string
		want, wantEv, wantDL = kinesisReplayEvents(t, top, seeds)
		got := map[string][]string{}
		for _, topic := range candleTopics {
			for _, r := range testkit.ReadTopic(t, seeds, topic) {
				if !engine.IsQuietRecord(r) {
					got[topic] = append(got[topic], string(r.Value))
				}
			}
			sort.Strings(got[topic])
		}
		// After the input, the devices are silent again: the live levels
		// of that silence fire by the wall clock, which a replay has not.
		live = live[:0]
		for _, e := range readSilenceEvents(t, seeds, "kres.quiet") {
			if ing, _ := time.Parse(time.RFC3339Nano, e.LastIngested); e.Event == processors.RecoveredEvent || ing.Before(back) {
				live = append(live, e)
			}
		}
		diff = diffTopics(candleTopics, want, closedByInput(t, want, got))
		evDiff = diffEvents(wantEv, live)
		dlDiff := diffLines(wantDL, liveDeadLetters(t, seeds, "kres.dlq"))
		if diff == "" && evDiff == "" && dlDiff == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("live output differs from replay:\ncandles:\n%s\nsilence:\n%s\ndead letters:\n%s\ninstance b log:\n%s",
				diff, evDiff, dlDiff, tail(child.log.String(), 3000))
		}
		time.Sleep(time.Second)
	}
	// Exactly once: every level of every device, and one recovery each.
	n := map[string]int{}
	for _, e := range live {
		n[e.Device+" "+e.Event]++
	}
	var bad []string
	for d := range devices {
		for _, ev := range []string{"l1", "l2", "l3", processors.RecoveredEvent} {
			if k := fmt.Sprintf("dev-%03d %s", d, ev); n[k] != 1 {
				bad = append(bad, fmt.Sprintf("%s: %d events", k, n[k]))
			}
		}
	}
	if len(bad) > 0 || len(live) != devices*4 {
		t.Fatalf("%d silence events, want %d; problems:\n%s", len(live), devices*4, strings.Join(bad, "\n"))
	}
	// The replay applies the same handoff as the live run: an oracle that
	// shares no resharding code checks it, every reading in put order
	// through one partition. No reading is late (each is stamped when put),
	// so the candles of readings closing before every shard's watermark
	// passed the devices' return (lateness 2s, and a margin) are the same,
	// gap candles included, for every candle kind: the 10s windows of
	// devices silent since before the split stay open in a child shard
	// until after the merge, so they test that a child passes on the keys
	// it was handed and never touched.
	p, err := engine.NewPipeline(top, processors.FixedClock{T: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	cutoff := back.UnixMilli() - 3000
	oracle := map[string][]string{}
	oracleGaps := map[string][]string{}
	p.OnCandle = func(_, topic string, c *candle.Candle, _ int32) {
		switch {
		case c.CloseTime > cutoff:
		case c.Gap:
			oracleGaps[topic] = append(oracleGaps[topic], string(c.AppendJSON(nil)))
		default:
			oracle[topic] = append(oracle[topic], string(c.AppendJSON(nil)))
		}
	}
	for i, r := range sent {
		for _, src := range []string{"readings", "temps"} {
			if err := p.Feed(src, 0, int64(i), r[0], r[1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	before, beforeGaps := map[string][]string{}, map[string][]string{}
	for _, topic := range candleTopics {
		for _, js := range want[topic] {
			switch c, _ := candle.ParseJSON([]byte(js)); {
			case c.CloseTime > cutoff:
			case c.Gap:
				beforeGaps[topic] = append(beforeGaps[topic], js)
			default:
				before[topic] = append(before[topic], js)
			}
		}
		sort.Strings(oracle[topic])
		sort.Strings(oracleGaps[topic])
	}
	if diff := diffTopics(candleTopics, oracleGaps, beforeGaps); diff != "" {
		t.Errorf("gap candles differ from a single-partition run of the same readings:\n%s", diff)
	}
	if diff := diffTopics(candleTopics, oracle, before); diff != "" || len(oracle["kres.t2s"]) < 2*devices || len(oracle["kres.m10s"]) < 2*devices {
		t.Fatalf("Kinesis candles differ from a single-partition run of the same readings (%d 2s candles, %d 10s candles):\n%s",
			len(oracle["kres.t2s"]), len(oracle["kres.m10s"]), diff)
	}
	// Both candle processors made candles of every device (every series).
	for topic, wantKeys := range map[string]int{"kres.t2s": devices, "kres.m10s": devices * 2} {
		keys := map[string]bool{}
		for _, js := range want[topic] {
			c, err := candle.ParseJSON([]byte(js))
			if err != nil {
				t.Fatal(err)
			}
			keys[c.Symbol] = true
		}
		if len(keys) != wantKeys {
			t.Errorf("%s: candles of %d keys, want %d", topic, len(keys), wantKeys)
		}
	}
}

// deviceProducer puts one reading per active device every 500 ms,
// stamped with the wall clock and keyed by the device.
type deviceProducer struct {
	mu       sync.Mutex
	active   []bool
	once     []bool // devices to report once at the next tick
	n        int
	sent     [][2][]byte // every reading put and its partition key, in put order
	last     time.Time   // when the last reading was put
	building bool        // a batch is being put
	done     chan struct{}
	stopped  chan struct{}
}

func startDeviceProducer(t *testing.T, client *awskinesis.Client, stream string, devices int) *deviceProducer {
	t.Helper()
	p := &deviceProducer{active: make([]bool, devices), once: make([]bool, devices), done: make(chan struct{}), stopped: make(chan struct{})}
	for i := range p.active {
		p.active[i] = true
	}
	go func() {
		defer close(p.stopped)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-p.done:
				return
			case <-tick.C:
			}
			p.mu.Lock()
			var batch []types.PutRecordsRequestEntry
			now := time.Now().UnixMilli()
			for d := range p.active {
				if !p.active[d] && !p.once[d] {
					continue
				}
				p.once[d] = false
				dev := fmt.Sprintf("dev-%03d", d)
				hum := fmt.Sprintf(`,"humidity":%d`, 40+p.n%7)
				if d >= 25 && p.n%7 == 3 {
					hum = "" // a reading of one metric (of a device that reports for long enough to have others)
				}
				v := fmt.Appendf(nil, `{"device":%q,"ts":%d,"temperature":"2%d.%d"%s,"owner":"o%d"}`, dev, now, p.n%10, p.n%7, hum, d%3)
				batch = append(batch, types.PutRecordsRequestEntry{PartitionKey: aws.String(dev), Data: v})
				p.sent = append(p.sent, [2][]byte{[]byte(dev), v})
				p.n++
			}
			p.building = len(batch) > 0
			p.mu.Unlock()
			if len(batch) == 0 {
				continue
			}
			out, err := client.PutRecords(context.Background(), &awskinesis.PutRecordsInput{StreamName: aws.String(stream), Records: batch})
			if err != nil || aws.ToInt32(out.FailedRecordCount) != 0 {
				t.Errorf("put records: %v (failed %d)", err, aws.ToInt32(out.FailedRecordCount))
				return
			}
			p.mu.Lock()
			p.last, p.building = time.Now(), false
			p.mu.Unlock()
		}
	}()
	return p
}

// lastPut returns when the last reading was put, once every device
// silenced before the call has stopped (a put in flight has ended).
func (p *deviceProducer) lastPut() time.Time {
	for {
		p.mu.Lock()
		pending := p.building
		last := p.last
		p.mu.Unlock()
		if !pending {
			return last
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// silence stops devices [from, to).
func (p *deviceProducer) silence(from, to int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for d := from; d < to; d++ {
		p.active[d] = false
	}
}

// report puts one reading of each device [from, to) at the next tick.
func (p *deviceProducer) report(from, to int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for d := from; d < to; d++ {
		p.once[d] = true
	}
}

// stop ends the producer and returns the readings it put and their keys.
func (p *deviceProducer) stop() [][2][]byte {
	select {
	case <-p.done:
	default:
		close(p.done)
	}
	<-p.stopped
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent
}

// splitShard splits sh at the middle of its hash range and returns its two
// children once the stream is active again.
func splitShard(t *testing.T, client *awskinesis.Client, stream string, sh types.Shard) []string {
	t.Helper()
	lo, _ := new(big.Int).SetString(*sh.HashKeyRange.StartingHashKey, 10)
	hi, _ := new(big.Int).SetString(*sh.HashKeyRange.EndingHashKey, 10)
	mid := new(big.Int).Rsh(new(big.Int).Add(lo, hi), 1)
	if _, err := client.SplitShard(context.Background(), &awskinesis.SplitShardInput{StreamName: aws.String(stream),
		ShardToSplit: sh.ShardId, NewStartingHashKey: aws.String(mid.String())}); err != nil {
		t.Fatal(err)
	}
	waitStreamActive(t, client, stream)
	var kids []string
	for _, s := range listKinesisShards(t, client, stream) {
		if s.ParentShardId != nil && *s.ParentShardId == *sh.ShardId {
			kids = append(kids, *s.ShardId)
		}
	}
	if len(kids) != 2 {
		t.Fatalf("split of %s made %v", *sh.ShardId, kids)
	}
	return kids
}

func listKinesisShards(t *testing.T, client *awskinesis.Client, stream string) []types.Shard {
	t.Helper()
	out, err := client.ListShards(context.Background(), &awskinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		t.Fatal(err)
	}
	return out.Shards
}

func waitStreamActive(t *testing.T, client *awskinesis.Client, stream string) {
	t.Helper()
	for i := 0; ; i++ {
		d, err := client.DescribeStreamSummary(context.Background(), &awskinesis.DescribeStreamSummaryInput{StreamName: aws.String(stream)})
		if err == nil && d.StreamDescriptionSummary.StreamStatus == types.StreamStatusActive {
			return
		}
		if i > 200 {
			t.Fatal("stream not active after a reshard")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// silenceEvent is a silence event without what depends on when the clock
// was looked at (fired_at, and silent_ms of a level): the wall clock fires
// a live level, the next record's ingestion time a replayed one.
type silenceEvent struct {
	Device       string `json:"device"`
	Event        string `json:"event"`
	Action       string `json:"action,omitempty"`
	Owner        string `json:"owner"`
	LastSeen     string `json:"last_seen"`
	LastIngested string `json:"last_ingested"`
	DueAt        string `json:"due_at,omitempty"`
	Highest      string `json:"highest,omitempty"`
	RecoveredAt  string `json:"recovered_at,omitempty"`
	SilentMS     int64  `json:"silent_ms"`
}

func parseSilenceEvent(t *testing.T, key string, v []byte) silenceEvent {
	t.Helper()
	var e silenceEvent
	if err := json.Unmarshal(v, &e); err != nil || e.Device != key {
		t.Fatalf("event %s (key %q): %v", v, key, err)
	}
	if e.Event != processors.RecoveredEvent {
		e.SilentMS = 0
	}
	return e
}

func readSilenceEvents(t *testing.T, seeds []string, topic string) []silenceEvent {
	t.Helper()
	var evs []silenceEvent
	for _, r := range testkit.ReadTopic(t, seeds, topic) {
		evs = append(evs, parseSilenceEvent(t, string(r.Key), r.Value))
	}
	return evs
}

func diffEvents(want, got []silenceEvent) string {
	key := func(evs []silenceEvent) []string {
		var out []string
		for _, e := range evs {
			b, _ := json.Marshal(e)
			out = append(out, string(b))
		}
		return out
	}
	if len(want) == 0 {
		return "the replay made no events"
	}
	return diffLines(key(want), key(got))
}

// diffLines says which lines the replay and the live run hold a different
// number of times (at most 30 of them).
func diffLines(want, got []string) string {
	w, g := map[string]int{}, map[string]int{}
	for _, l := range want {
		w[l]++
	}
	for _, l := range got {
		g[l]++
	}
	var lines []string
	for k, n := range w {
		if g[k] != n {
			lines = append(lines, fmt.Sprintf("replay %d, live %d: %s", n, g[k], k))
		}
	}
	for k, n := range g {
		if _, ok := w[k]; !ok {
			lines = append(lines, fmt.Sprintf("replay 0, live %d: %s", n, k))
		}
	}
	slices.Sort(lines)
	if len(lines) > 30 {
		lines = append(lines[:30], fmt.Sprintf("… %d more", len(lines)-30))
	}
	return strings.Join(lines, "\n")
}

// deadLetterLine is what a replay and a live run agree on about a dead
// letter (the live detail adds the shard's sequence number).
func deadLetterLine(stage string, reason processors.Reason, partition int32, offset int64, record string) string {
	return fmt.Sprintf("%s %s p%d@%d %s", stage, reason, partition, offset, record)
}

func liveDeadLetters(t *testing.T, seeds []string, topic string) []string {
	t.Helper()
	var out []string
	for _, r := range testkit.ReadTopic(t, seeds, topic) {
		var dl struct {
			Reason    processors.Reason `json:"reason"`
			Stage     string            `json:"stage"`
			Partition int32             `json:"partition"`
			Offset    int64             `json:"offset"`
			Record    string            `json:"record"`
		}
		if err := json.Unmarshal(r.Value, &dl); err != nil {
			t.Fatalf("dead letter %s: %v", r.Value, err)
		}
		out = append(out, deadLetterLine(dl.Stage, dl.Reason, dl.Partition, dl.Offset, dl.Record))
	}
	return out
}

// eventRecorder records a replay's candles, events and dead letters.
type eventRecorder struct {
	recordingOutput
	t           *testing.T
	events      []silenceEvent
	deadLetters []string
}

func (r *eventRecorder) Event(_, _ string, ev *processors.Event) error {
	r.events = append(r.events, parseSilenceEvent(r.t, ev.Key, ev.Value))
	return nil
}

func (r *eventRecorder) DeadLetter(stage string, rej *processors.Rejection) error {
	r.deadLetters = append(r.deadLetters, deadLetterLine(stage, rej.Reason, rej.Partition, rej.Offset, string(rej.Value)))
	return nil
}

func kinesisReplayEvents(t *testing.T, top *topology.Topology, seeds []string) (map[string][]string, []silenceEvent, []string) {
	t.Helper()
	rec := &eventRecorder{t: t}
	if _, err := engine.Replay(context.Background(), top, seeds, engine.ReplayOptions{
		Started: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), Out: rec}); err != nil {
		t.Fatal(err)
	}
	for k := range rec.byTopic {
		sort.Strings(rec.byTopic[k])
	}
	return rec.byTopic, rec.events, rec.deadLetters
}
