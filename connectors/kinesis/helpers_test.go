package kinesis

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// env is one kinesis-mock plus one dynalite with clients.
type env struct {
	kin    *kinesis.Client
	ddb    *dynamodb.Client
	stream string
}

func newEnv(t *testing.T, stream string, shards int) *env {
	t.Helper()
	type res struct {
		url string
	}
	// Start both emulators concurrently: each takes about a second.
	var km, dl string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); dl = testkit.Dynalite(t).URL() }()
	km = testkit.KinesisMock(t, fmt.Sprintf("%s:%d", stream, shards)).URL()
	wg.Wait()
	if dl == "" {
		t.FailNow()
	}
	ctx := context.Background()
	kin, ddb, err := NewClients(ctx, "us-east-1", km, dl,
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")))
	if err != nil {
		t.Fatal(err)
	}
	e := &env{kin: kin, ddb: ddb, stream: stream}
	e.waitActive(t)
	return e
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
	nocp   bool
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
	if !r.nocp {
		if err := s.Lease.Checkpoint(ctx, b.Records[len(b.Records)-1].Seq); err != nil {
			return err
		}
	}
	r.add(event{kind: "batch", shard: s.ID, recs: b.Records})
	return nil
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

type consumerRun struct {
	c    *Consumer
	h    *recorder
	stop context.CancelFunc
	done chan error
}

func (e *env) startConsumer(t *testing.T, owner string, h *recorder) *consumerRun {
	t.Helper()
	c, err := NewConsumer(e.kin, e.ddb, ConsumerConfig{
		Stream: e.stream, LeaseTable: "leases", Owner: owner,
		LeaseDuration: time.Second, ShardSyncInterval: 300 * time.Millisecond, PollInterval: 50 * time.Millisecond,
	}, h, WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &consumerRun{c: c, h: h, stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	t.Cleanup(func() { r.close(t) })
	return r
}

func (r *consumerRun) close(t *testing.T) {
	t.Helper()
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
