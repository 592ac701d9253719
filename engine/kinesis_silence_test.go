package engine_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/internal/testkit"
	"github.com/kandle/kandle/processors"
)

// kinesisSilenceTopology is a silence processor on a one-shard Kinesis
// stream, idle_timeout, lateness and max_future as shipped.
const kinesisSilenceTopology = `
name: ksil
brokers: [%[1]s]
metrics: ""
commit_interval: 50ms
sources:
  readings:
    kind: kinesis
    partitions: 1
    kinesis: {stream: dev, endpoint: %[2]s, dynamodb_endpoint: %[3]s, lease_duration: 2s, poll_interval: 50ms}
    fields: {key: device, time: ts, values: [temperature, humidity], qty: "", id: ""}
processors:
  quiet:
    kind: silence
    from: readings
    carry: [owner]
    output: {topic: ksil.quiet, partitions: 1}
    levels:
      - {name: l1, after: 3s, action: status}
      - {name: l2, after: 6s, action: alert}
dead_letter: {topic: ksil.dlq}
`

// A silence processor on a Kinesis shard keeps its state in the shard's
// Pebble range, as on a Kafka partition (the shard opens with
// state=pebble), and its timers survive restarts exactly: an instance
// stops while levels are pending, a restart on the same disk goes on from
// Pebble and the changelog tail, and a third instance on an empty disk
// rebuilds the Pebble range from the changelog. Every level of every
// device fires exactly once, each device recovers once, and the events
// equal a replay of the stream.
func TestKinesisSilenceStateInPebbleAcrossRestarts(t *testing.T) {
	testkit.WallClockTest(t)
	top, _, seeds, client := kinesisSetup(t, "dev:1", kinesisSilenceTopology)
	const devices = 20
	var logs lockedBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	f := &fixture{t: t, top: top}
	prod := startDeviceProducer(t, client, "dev", devices)
	defer prod.stop()
	start := time.Now()
	at := func(d time.Duration) { time.Sleep(time.Until(start.Add(d))) }

	dir := t.TempDir()
	a := f.start(dir, "a", engine.WithLogger(logger))
	at(2 * time.Second)
	prod.silence(0, devices/2) // their levels come due in b and c
	at(4 * time.Second)
	a.stop(t)
	b := f.start(dir, "b", engine.WithLogger(logger)) // a restart: same disk
	at(6 * time.Second)
	prod.silence(devices/2, devices) // all silent: the shard idles, the wall clock fires
	at(8 * time.Second)
	b.stop(t)
	c := f.start(t.TempDir(), "c", engine.WithLogger(logger)) // a new machine: empty disk
	defer c.stop(t)
	// Every level comes due at most 6s after a device's last reading, the
	// shard idle for idle_timeout (5s) after the last one put.
	time.Sleep(time.Until(prod.lastPut().Add(14 * time.Second)))
	back := time.Now()
	prod.report(0, devices)
	time.Sleep(time.Second)
	prod.stop()

	opened := strings.Count(logs.String(), `msg="shard opened"`)
	inPebble := strings.Count(logs.String(), "state=pebble")
	if opened < 3 || inPebble != opened {
		t.Fatalf("%d shard opens, %d with state in Pebble; want every one of at least 3:\n%s", opened, inPebble, logs.String())
	}
	var live, want []silenceEvent
	var evDiff string
	for deadline := time.Now().Add(40 * time.Second); ; {
		_, want, _ = kinesisReplayEvents(t, top, seeds)
		// After the input the devices are silent again: the live levels of
		// that silence fire by the wall clock, which a replay has not.
		live = live[:0]
		for _, e := range readSilenceEvents(t, seeds, "ksil.quiet") {
			if ing, _ := time.Parse(time.RFC3339Nano, e.LastIngested); e.Event == processors.RecoveredEvent || ing.Before(back) {
				live = append(live, e)
			}
		}
		if evDiff = diffEvents(want, live); evDiff == "" && len(live) >= devices*3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("live silence events differ from replay (%d live, %d replayed):\n%s", len(live), len(want), evDiff)
		}
		time.Sleep(time.Second)
	}
	n := map[string]int{}
	for _, e := range live {
		n[e.Device+" "+e.Event]++
	}
	var bad []string
	for d := range devices {
		for _, ev := range []string{"l1", "l2", processors.RecoveredEvent} {
			if k := fmt.Sprintf("dev-%03d %s", d, ev); n[k] != 1 {
				bad = append(bad, fmt.Sprintf("%s: %d events", k, n[k]))
			}
		}
	}
	if len(bad) > 0 || len(live) != devices*3 {
		t.Fatalf("%d silence events, want %d; problems:\n%s", len(live), devices*3, strings.Join(bad, "\n"))
	}
}

// lockedBuffer is a bytes.Buffer safe for concurrent writers (a logger's).
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
