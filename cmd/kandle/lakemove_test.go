package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kandle/kandle/internal/testkit"
)

// The lake sink's partitions move between two instances twice while
// flushes are in flight (every S3 PUT takes 150 ms, so each flush of many
// day objects is long): a second instance that runs only the lake sink
// joins mid-stream and later leaves. Each object is read, merged and
// written by one owner at a time, so no update is lost or rolled back: the
// lake equals the candle topics exactly, each candle once.
func TestLakePartitionMovesMidFlush(t *testing.T) {
	testkit.WallClockTest(t)
	h := newSXHarness(t)
	defer h.shutdown()
	h.s3.stop()
	inner := h.s3.handler
	h.s3.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			time.Sleep(150 * time.Millisecond) // a slow store: flushes overlap the rebalance
		}
		inner.ServeHTTP(w, r)
	})
	h.s3.restart()
	h.startRun()

	cfg := sxStream(4000, 300*time.Minute)
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		h.produce(cfg, 2*time.Millisecond)
	}()
	waitObjects := func(min int, what string) {
		for deadline := time.Now().Add(30 * time.Second); ; {
			objs, err := h.s3.objects("bucket")
			if err == nil && len(objs) >= min {
				return
			}
			h.running()
			if time.Now().After(deadline) {
				t.Fatalf("%s: the lake has %d objects (%v), want %d", what, len(objs), err, min)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitObjects(4, "before the second instance")
	moved := func(mark int, want string) {
		for deadline := time.Now().Add(30 * time.Second); ; {
			if strings.Contains(h.log.String()[mark:], want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %q in the log within 30 s", want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	mark := len(h.log.String())
	ctx, stop := context.WithCancel(h.ctx)
	b := h.goKandle(ctx, &h.runWG, "run", "-t", h.top, "-state-dir", t.TempDir(), "-instance", "sxb",
		"-only", "lake", "-session-timeout", "6s")
	moved(mark, `msg="sink partitions assigned" sink=lake instance=sxb`)
	time.Sleep(3 * time.Second) // B owns some lake partitions and flushes them for a while
	mark = len(h.log.String())
	stop()
	<-b
	moved(mark, `msg="sink partitions assigned" sink=lake instance=sx `)
	t.Logf("second instance left; stream still being produced")

	<-produced
	h.waitClosed(cfg, 60*time.Second)
	want := h.waitSettled(cfg, 60*time.Second) // the closers' candles too
	deadline := time.Now().Add(60 * time.Second)
	for {
		got, _, probs := h.lakeCandles()
		probs = append(probs, diffCandles("s3", want, got)...)
		if len(probs) == 0 {
			break
		}
		h.running()
		if time.Now().After(deadline) {
			if len(probs) > 30 {
				probs = probs[:30]
			}
			t.Fatalf("the lake differs from the topics after two moves:\n%s", strings.Join(probs, "\n"))
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Logf("%d candles exact in the lake", len(want))
}

// The broker itself goes away mid-stream and comes back on the same
// address with its data: kandle run keeps running (its clients reconnect),
// and every sink ends exact.
func TestSinksSurviveBrokerRestart(t *testing.T) {
	testkit.WallClockTest(t)
	h := newSXHarness(t)
	defer h.shutdown()
	h.startRun()
	cfg := sxStream(3000, 200*time.Minute)
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		h.produce(cfg, time.Millisecond)
	}()
	time.Sleep(1500 * time.Millisecond) // mid-stream: the stream's pace, not a wait for a condition
	h.stopBroker()
	down := time.Now()
	time.Sleep(2 * time.Second) // the outage
	h.startBroker()
	t.Logf("broker down for %v", time.Since(down).Round(time.Millisecond))
	<-produced
	h.running()
	h.waitClosed(cfg, 90*time.Second)
	want := h.waitSettled(cfg, 90*time.Second) // the closers' candles too
	h.waitSinks(want, wantLedger(t, cfg), 90*time.Second)
	if n := strings.Count(h.log.String(), "dev broker listening on "+h.broker); n != 2 {
		t.Fatalf("the broker started %d times, want 2 (once again after the outage)", n)
	}
}

// zombieGate stands between one kandle instance and the shared S3 server.
// Once closed it takes the whole body of each PUT and holds the request, as
// a network that delays a cut-off instance's writes would; open lets the
// held PUTs reach the store, even though their client gave up long ago.
type zombieGate struct {
	inner   http.Handler
	mu      sync.Mutex
	closed  bool
	held    int
	release chan struct{}
	landed  sync.WaitGroup // held PUTs the store has not answered yet
}

func (g *zombieGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	closed := g.closed
	if closed && r.Method == http.MethodPut {
		g.held++
		g.landed.Add(1)
	}
	g.mu.Unlock()
	if !closed || r.Method != http.MethodPut {
		g.inner.ServeHTTP(w, r)
		return
	}
	defer g.landed.Done()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // the client is gone before its request was sent: nothing lands
	}
	<-g.release
	r = r.WithContext(context.WithoutCancel(r.Context()))
	r.Body = io.NopCloser(bytes.NewReader(body))
	g.inner.ServeHTTP(w, r)
}

func (g *zombieGate) heldPUTs() int { g.mu.Lock(); defer g.mu.Unlock(); return g.held }

// A zombie lake writer cannot roll the lake back. A second instance (b)
// takes some lake partitions; then it is cut off: its PUTs hang in the
// network (a gate holds them) and it leaves the group, so its partitions
// move back to the first instance (a), which rewrites the same day objects
// from b's last commit on and finishes the stream. Only then do b's held
// PUTs land. Each was conditional on the ETag b had read, so the store
// refuses it (412): the lake still equals the candle topics exactly.
// Without conditional writes the late PUTs overwrite a's newer objects and
// candles go missing.
func TestLakeZombieWriterFenced(t *testing.T) {
	testkit.WallClockTest(t)
	h := newSXHarness(t)
	defer h.shutdown()
	gate := &zombieGate{inner: h.s3.handler, release: make(chan struct{})}
	viaGate := httptest.NewServer(gate)
	defer viaGate.Close()
	defer func() { // never leave a handler blocked
		gate.mu.Lock()
		if gate.closed {
			gate.closed = false
			close(gate.release)
		}
		gate.mu.Unlock()
	}()
	top, err := os.ReadFile(h.top)
	if err != nil {
		t.Fatal(err)
	}
	topB := writeFile(t, "sx-b.yaml", strings.Replace(string(top), "endpoint: "+h.s3.url()+"\n", "endpoint: "+viaGate.URL+"\n", 1))
	h.startRun()

	cfg := sxStream(4000, 300*time.Minute)
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		h.produce(cfg, 2*time.Millisecond)
	}()
	waitLog := func(mark int, want string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; {
			if strings.Contains(h.log.String()[mark:], want) {
				return
			}
			h.running()
			if time.Now().After(deadline) {
				t.Fatalf("no %q in the log within 30 s", want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	mark := len(h.log.String())
	ctx, stop := context.WithCancel(h.ctx)
	defer stop()
	b := h.goKandle(ctx, &h.runWG, "run", "-t", topB, "-state-dir", t.TempDir(), "-instance", "sxb",
		"-only", "lake", "-session-timeout", "6s")
	waitLog(mark, `msg="sink partitions assigned" sink=lake instance=sxb`)
	time.Sleep(2 * time.Second) // b owns some lake partitions and flushes them a while

	// b is cut off: its next PUTs hang, then it leaves the group.
	gate.mu.Lock()
	gate.closed = true
	gate.mu.Unlock()
	for deadline := time.Now().Add(30 * time.Second); gate.heldPUTs() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("b wrote nothing within 30 s of being cut off")
		}
		time.Sleep(20 * time.Millisecond)
	}
	mark = len(h.log.String())
	stop()
	<-b
	waitLog(mark, `msg="sink partitions assigned" sink=lake instance=sx `)
	t.Logf("b cut off with %d PUT(s) in flight and gone; a owns every lake partition", gate.heldPUTs())

	<-produced
	h.waitClosed(cfg, 60*time.Second)
	want := h.waitSettled(cfg, 60*time.Second) // the closers' candles too
	for deadline := time.Now().Add(60 * time.Second); ; {
		got, _, probs := h.lakeCandles()
		probs = append(probs, diffCandles("s3", want, got)...)
		if len(probs) == 0 {
			break
		}
		h.running()
		if time.Now().After(deadline) {
			t.Fatalf("a did not complete the lake:\n%s", strings.Join(probs[:min(len(probs), 30)], "\n"))
		}
		time.Sleep(300 * time.Millisecond)
	}

	// Now b's writes land, late.
	gate.mu.Lock()
	gate.closed = false
	close(gate.release)
	held := gate.held
	gate.mu.Unlock()
	gate.landed.Wait()
	got, _, probs := h.lakeCandles()
	probs = append(probs, diffCandles("s3", want, got)...)
	if len(probs) > 0 {
		t.Fatalf("%d late PUT(s) of the cut-off instance rolled the lake back:\n%s", held, strings.Join(probs[:min(len(probs), 30)], "\n"))
	}
	t.Logf("%d late PUT(s) refused; %d candles exact in the lake", held, len(want))
}
