package engine_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kandle/kandle/candle"
	kkin "github.com/kandle/kandle/connectors/kinesis"
	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/internal/gen"
	"github.com/kandle/kandle/internal/testkit"
	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/topology"
)

const kinesisTopology = `
name: kin
brokers: [%s]
metrics: ""
commit_interval: 50ms
sources:
  ticks:
    kind: kinesis
    partitions: 2
    kinesis: {stream: ticks, endpoint: %s, dynamodb_endpoint: %s, lease_duration: 2s, poll_interval: 50ms%s}
processors:
  # The shipped lateness, idle_timeout and max_future: the input is stamped
  # with the wall clock as it is put (kinesisProducer).
  c1s: {kind: candles, from: ticks, timeframe: 1s, output: {topic: k.1s, partitions: 2}}
  c5s: {kind: rollup, from: c1s, timeframe: 5s, output: {topic: k.5s, partitions: 1}}
dead_letter: {topic: kin.dlq}
`

// Two instances share a 4-shard stream through DynamoDB leases while trades
// stamped with the wall clock are put in real time; one instance (its own
// process) is SIGKILLed mid-stream and its shards move; a shard is split
// mid-stream. With the shipped defaults (idle advance, future guard), the
// candles of every window the input closes equal one uninterrupted replay of
// the stream, whether the instances poll the shards or read them with
// enhanced fan-out (replay always polls).
func TestKinesisSharedKilledAndResharded(t *testing.T) {
	testkit.WallClockTest(t)
	t.Run("Polling", func(t *testing.T) {
		testkit.WallClockTest(t) // each subtest has its own emulators, broker and instances
		testKinesisSharedKilledAndResharded(t, "")
	})
	t.Run("FanOut", func(t *testing.T) {
		testkit.WallClockTest(t)
		testKinesisSharedKilledAndResharded(t, ", enhanced_fan_out: kandle-kin")
	})
}

// testKinesisSharedKilledAndResharded runs the scenario with extra settings
// appended to the source's kinesis mapping.
func testKinesisSharedKilledAndResharded(t *testing.T, kinesisExtra string) {
	top, path, seeds, client := kinesisSetup(t, "ticks:4", kinesisTopology, kinesisExtra)
	prod := startKinesisProducer(t, client, "ticks", 300, 0)
	defer prod.stop()
	a := startEngine(t, top, t.TempDir(), "a")
	defer a.stop(t)
	child := startChildInstance(t, path, "b")
	time.Sleep(6 * time.Second) // the scenario's pace: both instances hold leases and work
	child.kill(t)

	// Split the first shard at the middle of its hash range.
	sh := listKinesisShards(t, client, "ticks")[0]
	splitShard(t, client, "ticks", sh)
	time.Sleep(8 * time.Second) // trades go on into the children, a takes b's shards
	sent, sentKeys, lastTS := prod.stop()
	t.Logf("put %d records in real time (%s)", len(sent), prod.explain(top.Processors["c1s"].IdleTimeout, nil))

	var want map[string][]string
	topics := []string{"k.1s", "k.5s"}
	deadline := time.Now().Add(90 * time.Second)
	for {
		want = kinesisReplay(t, top, seeds)
		got := map[string][]string{}
		for _, topic := range topics {
			for _, r := range testkit.ReadTopic(t, seeds, topic) {
				if !engine.IsQuietRecord(r) {
					got[topic] = append(got[topic], string(r.Value))
				}
			}
			sort.Strings(got[topic])
		}
		// Caught up and idle, the live shards go on closing windows by the
		// wall clock after the input ends; the replay cannot.
		diff := diffTopics(topics, want, closedByInput(t, want, got))
		if diff == "" && len(want["k.1s"]) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("live Kinesis candles differ from replay:\n%s%s\ninstance b log:\n%s", diff,
				prod.explain(top.Processors["c1s"].IdleTimeout, deadLetterReasons(t, seeds, "kin.dlq")), tail(child.log.String(), 3000))
		}
		time.Sleep(time.Second)
	}
	// 14 s of trades, closed up to 2 s (lateness) before the last; a
	// starved producer (-race, a loaded machine) puts 11-12 s of them.
	if len(want["k.1s"]) < 10*8 {
		t.Fatalf("only %d 1s candles", len(want["k.1s"]))
	}
	checkKinesisOffsets(t, top, seeds, *sh.ShardId)
	// An oracle that shares no resharding code: every record in put order
	// through one partition. No trade is late (disorder < lateness), so up to
	// the point every shard's watermark has passed, the candles are the same.
	p, err := engine.NewPipeline(top, processors.FixedClock{T: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	oracle := map[string][]string{}
	cutoff := lastTS - 4000 // every shard's watermark is past it (lateness 2s, disorder 1s)
	p.OnCandle = func(_, topic string, c *candle.Candle, _ int32) {
		if c.CloseTime <= cutoff {
			oracle[topic] = append(oracle[topic], string(c.AppendJSON(nil)))
		}
	}
	for i, v := range sent {
		if err := p.Feed("ticks", 0, int64(i), sentKeys[i], v); err != nil {
			t.Fatal(err)
		}
	}
	before := map[string][]string{}
	for topic, cs := range want {
		for _, js := range cs {
			if c, _ := candle.ParseJSON([]byte(js)); c.CloseTime <= cutoff {
				before[topic] = append(before[topic], js)
			}
		}
		sort.Strings(oracle[topic])
	}
	// At least one 5s candle of every symbol: the trades before the cutoff
	// span 8-10 s under load, which holds one or two 5s windows as the
	// run's start falls.
	if diff := diffTopics(topics, oracle, before); diff != "" || len(oracle["k.5s"]) < 10 {
		t.Fatalf("Kinesis candles differ from a single-partition run of the same records (%d 5s candles):\n%s", len(oracle["k.5s"]), diff)
	}
}

// checkKinesisOffsets checks what `kandle offsets` reports for the stream
// after the split of shard split, with instance b dead: the split shard
// finished (or its lease already deleted, its children having started), its
// two children naming it, every open shard held by instance a.
func checkKinesisOffsets(t *testing.T, top *topology.Topology, seeds []string, split string) {
	t.Helper()
	all, err := engine.Offsets(context.Background(), top, seeds)
	if err != nil {
		t.Fatalf("offsets: %v", err)
	}
	var leases []kkin.LeaseInfo
	for _, g := range all {
		if g.Name == "c1s" {
			leases = g.Shards
		}
	}
	children := 0
	for _, l := range leases {
		switch {
		case l.Shard == split && l.Checkpoint != kkin.ShardEnd:
			t.Errorf("offsets: split shard %s has checkpoint %q, want %s", l.Shard, l.Checkpoint, kkin.ShardEnd)
		case l.Shard != split && l.Checkpoint != kkin.ShardEnd && !strings.HasPrefix(l.Owner, "a-"):
			t.Errorf("offsets: open shard %s is held by %q, want instance a", l.Shard, l.Owner)
		}
		if len(l.Parents) == 1 && l.Parents[0] == split {
			children++
		}
	}
	if len(leases) < 5 || len(leases) > 6 || children != 2 {
		t.Fatalf("offsets: want 5 open leases (and maybe the finished %s), 2 of them its children; got %+v", split, leases)
	}
}

// kinesisProducer puts generated trades (10 symbols, duplicates, malformed
// records, disorder below the lateness) into a stream in real time: each
// stamped with the wall clock (less its disorder) when it is due, keyed by
// its symbol.
//
// On a loaded machine the emulator puts fewer records a second than are
// due. A producer that caught up on every due record fell ever further
// behind the clock in full 500-record puts (load ~20 on 2 cores: 20 s
// behind, over 5 s between two puts). But a caught-up shard that receives
// nothing for the shipped idle_timeout rightly advances by the wall clock,
// and the next put's trades, stamped long before it, arrived late:
// dead-lettered live, counted by replay. So a put carries at most putBatch
// records, and the producer never lags the clock by more than one put: the
// records due before that are skipped (never put, not in sent). A put's
// trades are then stamped well within idle_timeout + lateness of their
// arrival, unless one put alone takes about idle_timeout (explain says
// so when the comparison fails).
type kinesisProducer struct {
	done, stopped chan struct{}
	mu            sync.Mutex
	sent, keys    [][]byte      // every record and its partition key, in put order
	lastTS        int64         // the newest undisturbed event time put
	lastPut       time.Time     // when the last put returned
	pause         time.Duration // the longest time between the returns of two puts
}

// putBatch is the most records a producer's put carries (kinesisProducer).
const putBatch = 100

// startKinesisProducer puts rate records a second into stream until stop
// (or, with d > 0, for d).
func startKinesisProducer(t *testing.T, client *awskinesis.Client, stream string, rate float64, d time.Duration) *kinesisProducer {
	t.Helper()
	start := time.Now().Truncate(time.Millisecond)
	cfg := gen.DefaultConfig()
	cfg.Symbols = []string{"BTC", "ETH", "SOL", "ADA", "DOT", "XRP", "BNB", "AVAX", "LINK", "ATOM"}
	cfg.Count, cfg.Span, cfg.Start, cfg.Rate, cfg.Disorder = 0, 0, start, rate, time.Second
	cfg.DupRate, cfg.MalformedRate = 0.02, 0.01
	g, err := gen.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := &kinesisProducer{done: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(p.stopped)
		tick := time.NewTicker(25 * time.Millisecond)
		defer tick.Stop()
		n := 0
		for {
			select {
			case <-p.done:
				return
			case <-tick.C:
			}
			elapsed := time.Since(start)
			if d > 0 && elapsed > d {
				return
			}
			due := int(elapsed.Seconds() * rate)
			for ; n < due-putBatch; n++ {
				g.Next() // too old to put in real time (see kinesisProducer)
			}
			var batch []types.PutRecordsRequestEntry
			var vals, keys [][]byte
			for ; n < due && len(batch) < putBatch; n++ {
				key, value, _ := g.Next()
				batch = append(batch, types.PutRecordsRequestEntry{PartitionKey: aws.String(string(key)), Data: value})
				vals, keys = append(vals, value), append(keys, key)
			}
			if len(batch) == 0 {
				continue
			}
			out, err := client.PutRecords(context.Background(), &awskinesis.PutRecordsInput{StreamName: aws.String(stream), Records: batch})
			if err != nil || aws.ToInt32(out.FailedRecordCount) != 0 {
				t.Errorf("put records: %v (failed %d)", err, aws.ToInt32(out.FailedRecordCount))
				return
			}
			p.mu.Lock()
			if now := time.Now(); !p.lastPut.IsZero() && now.Sub(p.lastPut) > p.pause {
				p.pause = now.Sub(p.lastPut)
			}
			p.lastPut = time.Now()
			p.sent, p.keys = append(p.sent, vals...), append(p.keys, keys...)
			p.lastTS = start.Add(time.Duration(float64(n-1) / rate * float64(time.Second))).UnixMilli()
			p.mu.Unlock()
		}
	}()
	return p
}

// stop ends the producer (once running) and returns what it put.
func (p *kinesisProducer) stop() (sent, keys [][]byte, lastTS int64) {
	select {
	case <-p.done:
	default:
		close(p.done)
	}
	<-p.stopped
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent, p.keys, p.lastTS
}

// explain says, for a failed comparison with replay, whether the producer
// paused for idle_timeout or longer (then the live shards may have
// advanced by the wall clock, and the trades put after the pause were
// late: the premise of a real-time input failed, not the engine) and how
// many dead letters of each reason the live run wrote.
func (p *kinesisProducer) explain(idle time.Duration, reasons map[string]int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := fmt.Sprintf("the producer's longest pause between puts: %s", p.pause.Round(time.Millisecond))
	if reasons != nil {
		s += fmt.Sprintf("; live dead letters by reason: %v", reasons)
	}
	if p.pause >= idle {
		s += fmt.Sprintf("\nthe producer paused for idle_timeout (%s) or longer: caught-up shards advanced by the wall clock, so trades put after the pause could be late live (dead-lettered) and on time in replay; the machine was too loaded for a real-time producer", idle)
	}
	return s
}

// deadLetterReasons counts the committed dead letters of topic by reason.
func deadLetterReasons(t *testing.T, seeds []string, topic string) map[string]int {
	t.Helper()
	reasons := map[string]int{}
	for _, r := range testkit.ReadTopic(t, seeds, topic) {
		for _, h := range r.Headers {
			if h.Key == "kandle.reason" {
				reasons[string(h.Value)]++
			}
		}
	}
	return reasons
}

func kinesisReplay(t *testing.T, top *topology.Topology, seeds []string) map[string][]string {
	t.Helper()
	var rec recordingOutput
	if _, err := engine.Replay(context.Background(), top, seeds, engine.ReplayOptions{
		Started: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), Out: &rec}); err != nil {
		t.Fatal(err)
	}
	for k := range rec.byTopic {
		sort.Strings(rec.byTopic[k])
	}
	return rec.byTopic
}

func startEngine(t *testing.T, top *topology.Topology, dir, instance string) *running {
	f := &fixture{t: t, top: top}
	return f.start(dir, instance)
}

func diffTopics(topics []string, want, got map[string][]string) string {
	saved := outputTopics
	defer func() { outputTopics = saved }()
	outputTopics = topics
	return diffOutputs(want, got)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// kinesisSetup starts the services of a live Kinesis test (streams as for
// kinesisServices) and a dev broker, and writes and loads topology: a
// format taking the broker, the Kinesis and the DynamoDB endpoints, then
// extra.
func kinesisSetup(t *testing.T, streams, topologyFormat string, extra ...any) (top *topology.Topology, path string, seeds []string, client *awskinesis.Client) {
	t.Helper()
	kin, ddb := kinesisServices(t, streams)
	seeds = devBroker(t)
	path = filepath.Join(t.TempDir(), "topology.yaml")
	if err := os.WriteFile(path, fmt.Appendf(nil, topologyFormat, append([]any{seeds[0], kin.URL(), ddb.URL()}, extra...)...), 0o644); err != nil {
		t.Fatal(err)
	}
	top, err := topology.Load(path, topology.Registry{})
	if err != nil {
		t.Fatal(err)
	}
	client, _, err = kkin.NewClients(context.Background(), "us-east-1", kin.URL(), ddb.URL())
	if err != nil {
		t.Fatal(err)
	}
	return top, path, seeds, client
}

// childInstance is a kandle instance in its own process (this test binary,
// see TestMain), so a test can SIGKILL it.
type childInstance struct {
	name string
	cmd  *exec.Cmd
	log  strings.Builder // its output; read it once it is killed
}

// startChildInstance runs the topology at path as instance name until the
// test ends or kills it.
func startChildInstance(t *testing.T, path, name string) *childInstance {
	t.Helper()
	c := &childInstance{name: name, cmd: exec.Command(os.Args[0], "-test.run", "^$")}
	c.cmd.Env = append(os.Environ(), "KANDLE_TEST_TOPOLOGY="+path, "KANDLE_TEST_INSTANCE="+name, "KANDLE_TEST_STATE="+t.TempDir())
	c.cmd.Stdout, c.cmd.Stderr = &c.log, &c.log
	c.cmd.SysProcAttr = testkit.ChildAttr(false)
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.cmd.Process.Kill(); _ = c.cmd.Wait() })
	return c
}

// kill SIGKILLs the instance and waits for it to exit.
func (c *childInstance) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = c.cmd.Wait()
	t.Logf("instance %s killed", c.name)
}

// kinesisServices starts what a live Kinesis stage talks to: kinesis-mock
// with streams ("name:shards,...") and dynalite for its lease table.
func kinesisServices(t *testing.T, streams string) (kin, ddb *testkit.Service) {
	t.Helper()
	return testkit.KinesisMock(t, streams), testkit.Dynalite(t)
}
