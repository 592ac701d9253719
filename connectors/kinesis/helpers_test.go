package kinesis

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kandle/kandle/internal/testkit"
)

// env is one kinesis-mock plus one dynalite with clients, shared by the
// subtests of TestKinesis (starting node emulators costs seconds on a busy
// machine). Each subtest uses its own stream and lease table.
type env struct {
	kin    *kinesis.Client
	ddb    *dynamodb.Client
	stream string
	table  string
	// efo is the stream consumer name consumers read through (enhanced
	// fan-out); empty: polling.
	efo string
	// maxEvents ends every fan-out subscription after this many events, so
	// tests renew subscriptions from their continuation as AWS makes
	// readers do every 5 minutes.
	maxEvents int
}

// streams pre-created in kinesis-mock, one per subtest; fan-out runs of the
// consumer tests use the efo- copies.
const streams = "share:4,crash:4,split:1,range:3,sink:2,flaky:2,resume:1,once:4," +
	"efo-share:4,efo-crash:4,efo-split:1,efo-resume:1,efo-once:4,efo-flaky:2"

func newEnv(t *testing.T) *env {
	t.Helper()
	t0 := time.Now()
	var km, dl string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); dl = testkit.Dynalite(t).URL() }()
	km = testkit.KinesisMock(t, streams).URL()
	wg.Wait()
	if dl == "" {
		t.FailNow()
	}
	t.Logf("emulators up after %v", time.Since(t0).Round(time.Millisecond))
	kin, ddb, err := NewClients(context.Background(), "us-east-1", km, dl,
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")))
	if err != nil {
		t.Fatal(err)
	}
	return &env{kin: kin, ddb: ddb}
}

// on returns the env bound to stream (and its own lease table), once active.
func (e *env) on(t *testing.T, stream string) *env {
	t.Helper()
	c := *e
	c.stream, c.table = stream, stream+"-leases"
	c.waitActive(t)
	return &c
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// waitActive polls until the stream is ACTIVE (created, or after a reshard).
func (e *env) waitActive(t *testing.T) {
	t.Helper()
	eventually(t, 20*time.Second, "stream active", func() bool {
		out, err := e.kin.DescribeStreamSummary(context.Background(), &kinesis.DescribeStreamSummaryInput{StreamName: &e.stream})
		return err == nil && out.StreamDescriptionSummary.StreamStatus == ktypes.StreamStatusActive
	})
}

// put writes records "key:n" for n in [from, to) spread over keys, one
// PutRecords per call, and returns their payloads in order.
func (e *env) put(t *testing.T, keys int, from, to int) {
	t.Helper()
	for start := from; start < to; start += 250 {
		var entries []ktypes.PutRecordsRequestEntry
		for n := start; n < min(start+250, to); n++ {
			k := "k" + strconv.Itoa(n%keys)
			entries = append(entries, ktypes.PutRecordsRequestEntry{PartitionKey: aws.String(k), Data: []byte(k + ":" + strconv.Itoa(n))})
		}
		out, err := e.kin.PutRecords(context.Background(), &kinesis.PutRecordsInput{StreamName: &e.stream, Records: entries})
		if err != nil {
			t.Fatal(err)
		}
		if aws.ToInt32(out.FailedRecordCount) != 0 {
			t.Fatalf("%d records failed", aws.ToInt32(out.FailedRecordCount))
		}
	}
}

func eventually(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	start := time.Now()
	defer func() { t.Logf("%s after %v", what, time.Since(start).Round(time.Millisecond)) }()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// event is one handler call, in global order.
type event struct {
	kind  string // open, batch, end, lost
	shard string
	recs  []Record
}

// recorder is a Handler that logs every call and checkpoints after each batch.
type recorder struct {
	mu     sync.Mutex
	events []event
	nocp   atomic.Bool // process without checkpointing
}

func (r *recorder) add(e event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) Open(ctx context.Context, s Shard) (string, error) {
	r.add(event{kind: "open", shard: s.ID})
	return "", nil
}

func (r *recorder) Records(ctx context.Context, s Shard, b Batch) error {
	// Process first, then checkpoint: at-least-once.
	r.add(event{kind: "batch", shard: s.ID, recs: b.Records})
	if r.nocp.Load() {
		return nil
	}
	return s.Lease.Checkpoint(ctx, b.Records[len(b.Records)-1].Seq)
}

func (r *recorder) End(ctx context.Context, s Shard, children []string) error {
	r.add(event{kind: "end", shard: s.ID, recs: nil})
	return nil
}

func (r *recorder) Lost(s Shard) { r.add(event{kind: "lost", shard: s.ID}) }

func (r *recorder) snapshot() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// payloads returns every delivered payload in delivery order.
func payloads(evs []event) []string {
	var p []string
	for _, e := range evs {
		for _, r := range e.recs {
			p = append(p, string(r.Data))
		}
	}
	return p
}

// distinct counts distinct payloads and redeliveries.
func distinct(p []string) (n, dup int) {
	seen := map[string]bool{}
	for _, s := range p {
		if seen[s] {
			dup++
		}
		seen[s] = true
	}
	return len(seen), dup
}

// checkKeyOrder asserts that, per key, payload numbers never go backwards
// except by redelivering ones already seen.
func checkKeyOrder(t *testing.T, p []string) {
	t.Helper()
	last := map[string]int{}
	for _, s := range p {
		k, v, _ := strings.Cut(s, ":")
		n, _ := strconv.Atoi(v)
		if prev, ok := last[k]; ok && n < prev {
			t.Fatalf("key %s: %d delivered after %d", k, n, prev)
		}
		last[k] = n
	}
}

// checkSessionOrder asserts that within each shard session (Open to
// Lost/End) every key's payload numbers increase: a new owner may redeliver
// from its checkpoint, but never reorders.
func checkSessionOrder(t *testing.T, evs []event) {
	t.Helper()
	last := map[string]map[string]int{}
	for _, e := range evs {
		switch e.kind {
		case "open":
			last[e.shard] = map[string]int{}
		case "batch":
			for _, r := range e.recs {
				k, v, _ := strings.Cut(string(r.Data), ":")
				n, _ := strconv.Atoi(v)
				if prev, ok := last[e.shard][k]; ok && n <= prev {
					t.Fatalf("shard %s key %s: %d delivered after %d in one session", e.shard, k, n, prev)
				}
				last[e.shard][k] = n
			}
		}
	}
}

type consumerRun struct {
	c    *Consumer
	h    *recorder
	stop context.CancelFunc
	done chan error
}

func (e *env) startConsumer(t *testing.T, owner string, h *recorder) *consumerRun {
	t.Helper()
	r := e.startConsumerH(t, owner, h)
	r.h = h
	return r
}

func (e *env) startConsumerH(t *testing.T, owner string, h Handler) *consumerRun {
	t.Helper()
	c, err := NewConsumer(e.kin, e.ddb, ConsumerConfig{
		Stream: e.stream, LeaseTable: e.table, Owner: owner, EnhancedFanOut: e.efo,
		LeaseDuration: time.Second, ShardSyncInterval: 300 * time.Millisecond, PollInterval: 50 * time.Millisecond,
	}, h, WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	c.maxEvents = e.maxEvents
	ctx, cancel := context.WithCancel(context.Background())
	r := &consumerRun{c: c, stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	t.Cleanup(func() { r.close(t) })
	return r
}

func (r *consumerRun) close(t *testing.T) {
	t.Helper()
	t0 := time.Now()
	defer func() { t.Logf("%s closed after %v", r.c.Owner(), time.Since(t0).Round(time.Millisecond)) }()
	r.stop()
	select {
	case err, ok := <-r.done:
		if ok && err != nil {
			t.Errorf("Run: %v", err)
		}
		if ok {
			close(r.done)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("consumer %s did not stop", r.c.Owner())
	}
}
