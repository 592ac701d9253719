package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/connectors/kafka"
	"github.com/kandle/kandle/internal/testkit"
)

// silenceTopology watches devices with two short levels, so the wall
// clock reaches them within the test; idle_timeout (the caught-up rule)
// is as shipped.
const silenceTopology = `
name: silent
group: silent
brokers: [%[1]s]
metrics: ""
commit_interval: 50ms
sources:
  readings: {topic: readings, partitions: 3, fields: {key: device, time: ts, price: value, qty: "", id: ""}}
processors:
  watch:
    kind: silence
    from: readings
    carry: [owner]
    output: {topic: silence.events, partitions: 3}
    levels:
      - {name: unreachable, after: 8s, action: status}
      - {name: alert1, after: 14s, action: alert}
dead_letter: {topic: silent.dlq}
`

// newSilenceCluster starts a dev broker process and writes topology (a
// format with the broker address as %[1]s and extra args after it) for
// `kandle run` instances; the readings topic exists with 3 partitions.
func newSilenceCluster(t *testing.T, topology string, args ...any) *cluster {
	t.Helper()
	dir, err := os.MkdirTemp("", "kandle-silence-*")
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, start: time.Now(), dir: dir, insts: map[string]*instance{},
		opts: clusterOpts{sessionTimeout: minSessionTimeout, txnTimeout: 5 * time.Second},
		addr: fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))}
	t.Cleanup(func() {
		for _, in := range c.insts {
			in.p.kill()
		}
		if c.cl != nil {
			c.cl.Close()
		}
		if c.broker != nil {
			c.broker.kill()
		}
		if t.Failed() || os.Getenv("KANDLE_KEEP_LOGS") == "1" {
			t.Logf("process logs, state and topologies kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	c.startBroker()
	c.topFile = filepath.Join(dir, "silent.yaml")
	if err := os.WriteFile(c.topFile, fmt.Appendf(nil, topology, append([]any{c.addr}, args...)...), 0o644); err != nil {
		t.Fatal(err)
	}
	if c.cl, err = kgo.NewClient(kgo.SeedBrokers(c.addr), kgo.ProducerLinger(0), kgo.RetryTimeout(time.Minute)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kafka.EnsureTopics(ctx, c.cl, []kafka.TopicSpec{{Name: "readings", Partitions: 3}}); err != nil {
		t.Fatal(err)
	}
	return c
}

// sendReadings produces one reading per device id, stamped now.
func sendReadings(t *testing.T, c *cluster, devs ...int) time.Time {
	t.Helper()
	now := time.Now()
	var rs []*kgo.Record
	for _, d := range devs {
		id := fmt.Sprintf("d%02d", d)
		rs = append(rs, &kgo.Record{Topic: "readings", Key: []byte(id), Timestamp: now,
			Value: fmt.Appendf(nil, `{"device":%q,"ts":%d,"value":1,"owner":"o%d"}`, id, now.UnixMilli(), d%3)})
	}
	pctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.cl.ProduceSync(pctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce readings: %v", err)
	}
	return now
}

// TestSilenceCrashFiresOnce runs two `kandle run` instances against the dev
// broker, SIGKILLs and restarts them around the levels' due times (each
// restart also rebalances the partitions), and checks in the committed
// output that every level of every device fired exactly once, never
// before its due time, and that a device reporting again recovers once.
func TestSilenceCrashFiresOnce(t *testing.T) {
	testkit.WallClockTest(t)
	c := newSilenceCluster(t, silenceTopology)
	send := func(devs ...int) time.Time { return sendReadings(t, c, devs...) }
	all := make([]int, 24)
	for i := range all {
		all[i] = i
	}
	c.startInstance("a", true)
	c.startInstance("b", true)
	t0 := send(all...)
	c.logf("24 devices reported")
	time.Sleep(3 * time.Second)  // wall-clock schedule of the faults (the test's subject is wall time)
	send(18, 19, 20, 21, 22, 23) // these re-arm: due 3s later
	c.logf("6 devices reported again")
	time.Sleep(time.Until(t0.Add(7500 * time.Millisecond)))
	c.insts["a"].p.kill()
	c.logf("a: SIGKILL just before the first due time")
	time.Sleep(time.Until(t0.Add(9 * time.Second)))
	c.startInstance("a", false)
	time.Sleep(time.Until(t0.Add(13500 * time.Millisecond)))
	c.insts["b"].p.kill()
	c.logf("b: SIGKILL just before the second due time")
	time.Sleep(time.Until(t0.Add(15 * time.Second)))
	c.startInstance("b", false)

	type ev struct {
		Device  string `json:"device"`
		Event   string `json:"event"`
		DueAt   string `json:"due_at"`
		FiredAt string `json:"fired_at"`
		Owner   string `json:"owner"`
		Highest string `json:"highest"`
	}
	collect := func() (map[string]int, []ev) {
		n := map[string]int{}
		var evs []ev
		for _, r := range testkit.ReadTopic(t, []string{c.addr}, "silence.events") {
			var e ev
			if err := json.Unmarshal(r.Value, &e); err != nil {
				t.Fatalf("event %s: %v", r.Value, err)
			}
			if string(r.Key) != e.Device {
				t.Fatalf("event key %q for device %q", r.Key, e.Device)
			}
			n[e.Device+" "+e.Event]++
			evs = append(evs, e)
		}
		return n, evs
	}
	want := 24 * 2
	deadline := time.Now().Add(90 * time.Second)
	var n map[string]int
	var evs []ev
	for {
		n, evs = collect()
		if len(evs) >= want || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	// Late duplicates would show up after the count is reached: look again
	// once both instances have had time to fire anything pending.
	time.Sleep(8 * time.Second)
	n, evs = collect()
	var bad []string
	for d := range 24 {
		for _, lvl := range []string{"unreachable", "alert1"} {
			if k := fmt.Sprintf("d%02d %s", d, lvl); n[k] != 1 {
				bad = append(bad, fmt.Sprintf("%s fired %d times", k, n[k]))
			}
		}
	}
	for _, e := range evs {
		due, _ := time.Parse(time.RFC3339Nano, e.DueAt)
		fired, _ := time.Parse(time.RFC3339Nano, e.FiredAt)
		if fired.Before(due) {
			bad = append(bad, fmt.Sprintf("%s %s fired at %s before its due time %s", e.Device, e.Event, e.FiredAt, e.DueAt))
		}
		if e.Owner == "" {
			bad = append(bad, e.Device+" "+e.Event+" lacks the carried owner")
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Fatalf("%d events in total; problems:\n%s\na: %s\nb: %s", len(evs), strings.Join(bad, "\n"),
			c.insts["a"].p.tail(3000), c.insts["b"].p.tail(3000))
	}
	c.logf("every level fired exactly once (%d events)", len(evs))

	send(5)
	deadline = time.Now().Add(60 * time.Second)
	for n["d05 recovered"] == 0 && time.Now().Before(deadline) {
		time.Sleep(300 * time.Millisecond)
		n, evs = collect()
	}
	if n["d05 recovered"] != 1 {
		t.Fatalf("d05 reported again: %d recovered events, want 1", n["d05 recovered"])
	}
	for _, e := range evs {
		if e.Event == "recovered" && (e.Device != "d05" || e.Highest != "alert1") {
			t.Fatalf("unexpected recovered event %+v", e)
		}
	}
}
