package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/kandle/kandle/internal/testkit"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestSilenceTombstoneRetires: a Kafka tombstone (the device id as key, a
// null value) retires the device in a running `kandle run`: it never fires,
// also after a SIGKILL and restart (its timer is gone from the state the
// new process restores), while the other devices fire every level once.
func TestSilenceTombstoneRetires(t *testing.T) {
	testkit.WallClockTest(t)
	c := newSilenceCluster(t, silenceTopology)
	c.startInstance("a", true)
	sendReadings(t, c, 0, 1, 2)
	pctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.cl.ProduceSync(pctx, &kgo.Record{Topic: "readings", Key: []byte("d00"), Value: nil}).FirstErr(); err != nil {
		t.Fatalf("produce tombstone: %v", err)
	}
	c.logf("d00 retired by a tombstone")
	time.Sleep(2 * time.Second) // past a commit (50ms interval): the retirement is in the checkpoint
	c.insts["a"].p.kill()
	c.startInstance("a", false)
	c.logf("a: SIGKILL and restart")

	count := func() map[string]int {
		n := map[string]int{}
		for _, r := range testkit.ReadTopic(t, []string{c.addr}, "silence.events") {
			var e struct{ Device, Event string }
			if err := json.Unmarshal(r.Value, &e); err != nil {
				t.Fatalf("event %s: %v", r.Value, err)
			}
			n[e.Device+" "+e.Event]++
		}
		return n
	}
	deadline := time.Now().Add(90 * time.Second)
	n := count()
	for (n["d01 alert1"] == 0 || n["d02 alert1"] == 0) && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
		n = count()
	}
	time.Sleep(3 * time.Second) // d00 would have fired with the others
	n = count()
	for _, k := range []string{"d01 unreachable", "d01 alert1", "d02 unreachable", "d02 alert1"} {
		if n[k] != 1 {
			t.Errorf("%s fired %d times, want 1", k, n[k])
		}
	}
	if n["d00 unreachable"]+n["d00 alert1"] != 0 {
		t.Errorf("the retired d00 fired: %v", n)
	}
	if t.Failed() {
		t.Logf("a: %s", c.insts["a"].p.tail(3000))
	}
}
