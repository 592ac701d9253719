package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/connectors/kafka"
	kkin "github.com/kandle/kandle/connectors/kinesis"
	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/internal/testkit"
	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/topology"
)

// tripKind is a tally (kinds_test.go) whose processor panics on the record
// "boom": a processor bug that one record triggers.
type tripKind struct{ tallyKind }

func (tripKind) Facts() topology.KindFacts {
	return topology.KindFacts{Name: "trip", Doc: "Counts records; panics on the record \"boom\"."}
}

func (tripKind) NewProcessor(*engine.Partition) (processors.Processor, error) {
	return &trip{tally{n: map[string]int{}, dirty: map[string]bool{}}}, nil
}

type trip struct{ tally }

func (t *trip) Process(rec processors.Record, out *processors.Output) {
	if string(rec.Value) == "boom" {
		panic("trip: the record is boom")
	}
	t.tally.Process(rec, out)
}

const tripTopology = `
name: trip
brokers: [%s]
metrics: ""
commit_interval: 50ms
sources:
  trades: {topic: trades, partitions: 2}
processors:
  n: {kind: trip, from: trades}
dead_letter: {topic: trip.dlq}
`

// A record that panics its processor does not stop kandle: each panic
// aborts the transaction and rebuilds the partition from its last commit,
// and at its second panic the record is dead-lettered (internal_error)
// instead of processed again. Every other record is counted exactly once,
// and Run never returns.
func TestProcessorPanicDeadLettersTheRecord(t *testing.T) {
	testkit.WallClockTest(t)
	seeds := devBroker(t)
	top, err := topology.Parse("trip.yaml", fmt.Appendf(nil, tripTopology, seeds[0]),
		topology.Registry{Processors: map[string]topology.ProcessorKind{"trip": tripKind{}}})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	if _, err := kafka.EnsureTopics(ctx, cl, []kafka.TopicSpec{{Name: "trades", Partitions: 2}}); err != nil {
		t.Fatal(err)
	}
	keys := []string{"a", "b", "c", "d"}
	want := map[string]int{}
	var recs []*kgo.Record
	for i := range 200 {
		k := keys[i%len(keys)]
		v := "x"
		if i == 101 { // key b, in the middle of its partition
			v = "boom"
		} else {
			want[k]++
		}
		recs = append(recs, &kgo.Record{Topic: "trades", Key: []byte(k), Value: []byte(v)})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	eng, err := engine.New(top, engine.WithStateDir(t.TempDir()), engine.WithInstanceID("a"), engine.WithLogger(log),
		engine.WithRegisterer(reg), engine.WithSessionTimeout(6*time.Second), engine.WithTransactionTimeout(6*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- eng.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("engine: %v", err)
		}
	}()

	waitTripOutputs(t, seeds, want, done)
	if n := counter(t, reg, "kandle_rejected_total", "internal_error"); n != 1 {
		t.Errorf("kandle_rejected_total{reason=internal_error} = %v, want 1", n)
	}
	if n := counter(t, reg, "kandle_panics_total", ""); n != 2 {
		t.Errorf("kandle_panics_total = %v, want 2 (the record's two panics)", n)
	}
	replayEqualsTrip(t, top, seeds, log)
}

// replayEqualsTrip replays topology trip and checks that it gives what the
// live run wrote: the same events and the same dead letter (the record
// that panicked, internal_error), the panic handled as live handles it.
func replayEqualsTrip(t *testing.T, top *topology.Topology, seeds []string, log *slog.Logger) {
	t.Helper()
	var buf bytes.Buffer
	if _, err := engine.Replay(context.Background(), top, seeds, engine.ReplayOptions{Started: time.Now(),
		Out: &engine.WriterOutput{W: &buf}, Logger: log}); err != nil {
		t.Fatalf("replay: %v", err)
	}
	var events, dls []string
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if d, ok := strings.CutPrefix(l, "dlq "); ok {
			dls = append(dls, deadLetterFacts(t, []byte(d)))
		} else {
			events = append(events, l)
		}
	}
	var liveEvents, liveDLs []string
	for _, r := range testkit.ReadTopic(t, seeds, "trip.n") {
		liveEvents = append(liveEvents, string(r.Value))
	}
	for _, r := range testkit.ReadTopic(t, seeds, "trip.dlq") {
		liveDLs = append(liveDLs, deadLetterFacts(t, r.Value))
	}
	slices.Sort(events)
	slices.Sort(liveEvents)
	if !slices.Equal(events, liveEvents) {
		t.Errorf("replay events differ from live:\nreplay %d: %v\nlive %d: %v", len(events), events, len(liveEvents), liveEvents)
	}
	if !slices.Equal(dls, liveDLs) {
		t.Errorf("replay dead letters %q, live %q", dls, liveDLs)
	}
}

// deadLetterFacts is what a dead letter says about its record, without
// the input topic (which a replay to a file does not name).
func deadLetterFacts(t *testing.T, b []byte) string {
	t.Helper()
	var d struct {
		Reason, Detail, Stage, Record string
		Partition                     int32
		Offset                        int64
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dead letter %s: %v", b, err)
	}
	return fmt.Sprintf("%+v", d)
}

// waitTripOutputs waits until topology trip's outputs hold each key's
// count exactly once per record (want: the records per key, the boom
// record left out) and one dead letter, the boom record's, internal_error.
// Run (done) must not return meanwhile.
func waitTripOutputs(t *testing.T, seeds []string, want map[string]int, done <-chan error) {
	t.Helper()
	total := 0
	for _, n := range want {
		total += n
	}
	var problem string
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("Run returned while no signal came: %v", err)
		default:
		}
		problem = ""
		seen := map[string]bool{}
		got := map[string]int{}
		for _, r := range testkit.ReadTopic(t, seeds, "trip.n") {
			var ev struct {
				Key string
				N   int
			}
			if err := json.Unmarshal(r.Value, &ev); err != nil {
				t.Fatalf("event %q: %v", r.Value, err)
			}
			if seen[string(r.Value)] {
				t.Fatalf("event %s written twice", r.Value)
			}
			seen[string(r.Value)] = true
			got[ev.Key] = max(got[ev.Key], ev.N)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) || len(seen) != total {
			problem = fmt.Sprintf("counts %v (%d events), want %v (%d events)", got, len(seen), want, total)
			continue
		}
		var dl []string
		for _, r := range testkit.ReadTopic(t, seeds, "trip.dlq") {
			dl = append(dl, string(r.Value))
		}
		if len(dl) != 1 || !strings.Contains(dl[0], `"reason":"internal_error"`) || !strings.Contains(dl[0], `"record":"boom"`) {
			problem = fmt.Sprintf("dead letters %q, want the boom record's, reason internal_error", dl)
			continue
		}
		return
	}
	t.Fatal(problem)
}

const tripKinesisTopology = `
name: trip
brokers: [%s]
metrics: ""
commit_interval: 50ms
sources:
  trades:
    kind: kinesis
    partitions: 1
    kinesis: {stream: trades, endpoint: %s, dynamodb_endpoint: %s, lease_duration: 2s, poll_interval: 50ms}
processors:
  n: {kind: trip, from: trades}
dead_letter: {topic: trip.dlq}
`

// The same on a Kinesis shard: a panic gives the shard up, its next owner
// restores it from its last commit, and at the record's second panic the
// record is dead-lettered instead.
func TestKinesisProcessorPanicDeadLettersTheRecord(t *testing.T) {
	testkit.WallClockTest(t)
	kin, ddb := kinesisServices(t, "trades:1")
	seeds := devBroker(t)
	top, err := topology.Parse("trip.yaml", fmt.Appendf(nil, tripKinesisTopology, seeds[0], kin.URL(), ddb.URL()),
		topology.Registry{Processors: map[string]topology.ProcessorKind{"trip": tripKind{}}})
	if err != nil {
		t.Fatal(err)
	}
	client, _, err := kkin.NewClients(context.Background(), "us-east-1", kin.URL(), ddb.URL())
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"a", "b", "c", "d"}
	want := map[string]int{}
	var batch []types.PutRecordsRequestEntry
	for i := range 200 {
		k := keys[i%len(keys)]
		v := "x"
		if i == 101 {
			v = "boom"
		} else {
			want[k]++
		}
		batch = append(batch, types.PutRecordsRequestEntry{PartitionKey: aws.String(k), Data: []byte(v)})
	}
	out, err := client.PutRecords(context.Background(), &awskinesis.PutRecordsInput{StreamName: aws.String("trades"), Records: batch})
	if err != nil || aws.ToInt32(out.FailedRecordCount) != 0 {
		t.Fatalf("put records: %v (failed %d)", err, aws.ToInt32(out.FailedRecordCount))
	}
	reg := prometheus.NewRegistry()
	f := &fixture{t: t, top: top}
	r := f.start(t.TempDir(), "a", engine.WithRegisterer(reg))
	defer r.stop(t)
	waitTripOutputs(t, seeds, want, r.done)
	if n := counter(t, reg, "kandle_panics_total", ""); n != 2 {
		t.Errorf("kandle_panics_total = %v, want 2 (the record's two panics)", n)
	}
}

// An EndTxn that times out and an abort after it that fails leave the
// producer in a state nobody knows: its transaction may be open (the next
// Begin fails with "already in a transaction") or even committed. The stage
// drops its clients, rebuilds from the last commit and rejoins instead of
// stopping kandle, and the output equals a replay: nothing lost, nothing
// doubled.
func TestEndTxnFailureRebuildsTheStage(t *testing.T) {
	testkit.WallClockTest(t)
	for _, tc := range []struct {
		name   string
		commit bool // the broker commits the transaction the client reports failed
	}{{"left open", false}, {"committed anyway", true}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.produce(6000, 1, t0, time.Hour)
			want := f.replay()
			var (
				mu      sync.Mutex
				commits int
				broken  = map[*kgo.GroupTransactSession]bool{}
				fired   atomic.Int32
			)
			hook := func(ctx context.Context, sess *kgo.GroupTransactSession, try kgo.TransactionEndTry) (bool, error) {
				mu.Lock()
				inject := false
				if try == kgo.TryCommit {
					commits++
					inject = commits == 3 || commits == 4
				}
				bad := broken[sess]
				if inject {
					broken[sess] = true
				}
				mu.Unlock()
				switch {
				case inject:
					fired.Add(1)
					if tc.commit {
						if _, err := sess.End(ctx, try); err != nil {
							return false, err
						}
					}
					return false, fmt.Errorf("end transaction: %w", context.DeadlineExceeded)
				case bad:
					return false, fmt.Errorf("abort: %w", context.DeadlineExceeded)
				}
				return sess.End(ctx, try)
			}
			reg := prometheus.NewRegistry()
			r := f.start(t.TempDir(), "a", engine.WithEndTxnHook(hook), engine.WithRegisterer(reg))
			defer r.stop(t)
			f.waitFor(want, 90*time.Second)
			// The output must stay exact once the failed stages are back.
			for deadline := time.Now().Add(30 * time.Second); counter(t, reg, "kandle_stage_restarts_total", "") < 2; {
				if time.Now().After(deadline) {
					t.Fatal("the failed stages were not rebuilt within 30s")
				}
				time.Sleep(100 * time.Millisecond)
			}
			time.Sleep(3 * time.Second) // the restart backoff, a restore and a few commits
			f.waitFor(want, 30*time.Second)
			select {
			case err := <-r.done:
				t.Fatalf("Run returned while no signal came: %v", err)
			default:
			}
			if fired.Load() != 2 {
				t.Fatalf("%d failures injected, want 2", fired.Load())
			}
		})
	}
}

// The in-process pipeline (replay, kandle test) handles a panicking record
// as the live engine does, also when the record comes long after the
// processor's last checkpoint of its state: the processor is rebuilt as of
// before the record, the record panics it twice and is dead-lettered
// internal_error, and every other record is counted exactly once.
func TestPipelineProcessorPanic(t *testing.T) {
	top, err := topology.Parse("trip.yaml", fmt.Appendf(nil, tripTopology, "127.0.0.1:1"),
		topology.Registry{Processors: map[string]topology.ProcessorKind{"trip": tripKind{}}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := engine.NewPipeline(top, processors.FixedClock{T: time.Unix(0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	p.Log = slog.New(slog.NewTextHandler(&logs, nil))
	last := map[string]int{}
	var problems, rejected []string
	p.OnEvent = func(_, _ string, ev *processors.Event, _ int32) {
		var e struct {
			Key string
			N   int
		}
		if err := json.Unmarshal(ev.Value, &e); err != nil {
			t.Fatal(err)
		}
		if e.N != last[e.Key]+1 {
			problems = append(problems, fmt.Sprintf("%s counted %d after %d", e.Key, e.N, last[e.Key]))
		}
		last[e.Key] = e.N
	}
	p.OnReject = func(_ string, r *processors.Rejection) {
		rejected = append(rejected, fmt.Sprintf("%s p%d@%d %s", r.Reason, r.Partition, r.Offset, r.Value))
	}
	var panics []int
	p.OnPanic = func(_ string, rec *processors.Record, times int, _ any, stack []byte) {
		panics = append(panics, times)
		if !bytes.Contains(stack, []byte("(*trip).Process")) {
			t.Errorf("the stack does not show where the processor panicked:\n%s", stack)
		}
	}
	keys := []string{"a", "b", "c"}
	want := map[string]int{}
	for i := range 2000 {
		k, v := keys[i%len(keys)], "x"
		if i == 1300 { // past the first two checkpoints (every 512 records)
			v = "boom"
		} else {
			want[k]++
		}
		if err := p.Feed("trades", 0, int64(i), []byte(k), []byte(v)); err != nil {
			t.Fatalf("feed %d: %v", i, err)
		}
	}
	if len(problems) > 0 {
		t.Errorf("counts went wrong: %v", problems)
	}
	if !maps.Equal(last, want) {
		t.Errorf("final counts %v, want %v", last, want)
	}
	if fmt.Sprint(rejected) != "[internal_error p0@1300 boom]" {
		t.Errorf("dead letters %v, want the boom record's, internal_error", rejected)
	}
	if fmt.Sprint(panics) != "[1 2]" {
		t.Errorf("panics reported %v, want [1 2]", panics)
	}
	if n := strings.Count(logs.String(), "processor panicked"); n != 2 || !strings.Contains(logs.String(), "stack=") {
		t.Errorf("want 2 logged panics with their stacks, got %d:\n%s", n, logs.String())
	}
}
