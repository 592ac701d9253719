package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The lake sink's partitions move between two instances twice while
// flushes are in flight (every S3 PUT takes 150 ms, so each flush of many
// day objects is long): a second instance that runs only the lake sink
// joins mid-stream and later leaves. Each object is read, merged and
// written by one owner at a time, so no update is lost or rolled back: the
// lake equals the candle topics exactly, each candle once.
func TestLakePartitionMovesMidFlush(t *testing.T) {
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
	want := h.topicCandles()
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
	want := h.topicCandles()
	h.waitSinks(want, wantLedger(t, cfg), 90*time.Second)
	if n := strings.Count(h.log.String(), "dev broker listening on "+h.broker); n != 2 {
		t.Fatalf("the broker started %d times, want 2 (once again after the outage)", n)
	}
}
