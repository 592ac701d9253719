package gen

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kandle/kandle/connectors/kafka"
	"github.com/twmb/franz-go/pkg/kgo"
)

func devBroker(t *testing.T) (*kgo.Client, []string) {
	t.Helper()
	b, err := kafka.StartDevBroker(kafka.WithSeedTopics(3, "trades"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl, b.Addrs()
}

func TestProduce(t *testing.T) {
	cl, addrs := devBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := DefaultConfig()
	cfg.Count, cfg.DupRate, cfg.MalformedRate = 5000, 0.01, 0.01
	n, err := Produce(ctx, cl, "trades", mustNew(t, cfg), 0)
	if err != nil || n != cfg.Count {
		t.Fatalf("Produce = %d, %v; want %d", n, err, cfg.Count)
	}

	// What the broker holds is what the generator makes: per partition in
	// order, keyed by symbol, each symbol in one partition.
	want := map[string][][]byte{}
	for _, r := range all(t, cfg) {
		want[string(r[0])] = append(want[string(r[0])], r[1])
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics("trades"))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	got := map[string][][]byte{}
	part := map[string]int32{}
	for read := 0; read < n; {
		fs := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d", read, n)
		}
		fs.EachRecord(func(r *kgo.Record) {
			k := string(r.Key)
			if p, ok := part[k]; ok && p != r.Partition {
				t.Fatalf("key %s in partitions %d and %d", k, p, r.Partition)
			}
			part[k] = r.Partition
			got[k] = append(got[k], r.Value)
			read++
		})
	}
	for k, vs := range want {
		if len(got[k]) != len(vs) {
			t.Fatalf("%s: %d records on the broker, want %d", k, len(got[k]), len(vs))
		}
		for i := range vs {
			if !bytes.Equal(got[k][i], vs[i]) {
				t.Fatalf("%s record %d: %s, want %s", k, i, got[k][i], vs[i])
			}
		}
	}
}

func TestProducePacingAndCancel(t *testing.T) {
	cl, _ := devBroker(t)
	cfg := DefaultConfig()
	cfg.Count = 40
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	n, err := Produce(ctx, cl, "trades", mustNew(t, cfg), 5*time.Millisecond)
	if err != nil || n != 40 {
		t.Fatalf("Produce = %d, %v", n, err)
	}
	// 40 records 5 ms apart cannot take less than 39 × 5 ms.
	if el := time.Since(start); el < 195*time.Millisecond {
		t.Fatalf("40 records paced 5ms apart took %v", el)
	}

	// An unbounded stream stops when ctx ends, reporting why.
	cfg.Count = 0
	ctx2, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	n, err = Produce(ctx2, cl, "trades", mustNew(t, cfg), time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Produce past its deadline: %d, %v; want context.DeadlineExceeded", n, err)
	}
	if n == 0 {
		t.Fatal("nothing produced before the cancel")
	}
}

type failWriter struct{ after int }

func (w *failWriter) Write(p []byte) (int, error) {
	if w.after -= len(p); w.after < 0 {
		return 0, errors.New("disk full")
	}
	return len(p), nil
}

func TestWriteJSONLinesError(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Count = 0 // unbounded: only the write error stops it
	n, err := WriteJSONLines(&failWriter{after: 1 << 20}, mustNew(t, cfg))
	if err == nil || n == 0 {
		t.Fatalf("WriteJSONLines = %d, %v; want a disk full error after some lines", n, err)
	}
}
