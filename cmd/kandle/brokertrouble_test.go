package main

import (
	"os"
	"testing"
	"time"

	"github.com/kandle/kandle/internal/testkit"
)

// Broker trouble between the instances and the broker. Each of three
// `kandle run` instances reaches the dev broker through its own proxy
// (testkit.StartKafkaProxy), and while `kandle gen` produces real-time
// trades the proxies do, in a fixed cycle to seeded victims:
//
//   - stall one instance's responses past the transaction timeout: its
//     requests still reach the broker, which aborts the open transaction on
//     its own timeout while the instance waits for the answers (an EndTxn
//     among them);
//   - cut one instance's connections three times in a row at random moments
//     (with a 50ms commit interval, mostly in the middle of a commit);
//   - hold all of one instance's traffic for longer than the session
//     timeout, as a network partition does: the groups move its partitions
//     away, and it comes back as a zombie that must be fenced and rejoin.
//
// Everything runs with the shipped lateness, idle_timeout, max_future and
// max_idle. No instance may exit by itself, and afterwards the
// read-committed outputs equal one uninterrupted replay: nothing doubled,
// nothing missing.
//
// KANDLE_SOAK=1 (make soak) runs 8 minutes of input; KANDLE_CRASH_SEED
// repeats a run's choices of victims.
func TestBrokerTroubleThroughProxies(t *testing.T) {
	testkit.WallClockTest(t)
	span, catchUp := 60*time.Second, 3*time.Minute
	if os.Getenv("KANDLE_SOAK") == "1" {
		span, catchUp = 8*time.Minute, 10*time.Minute
	}
	c := newCluster(t, clusterOpts{sessionTimeout: minSessionTimeout, txnTimeout: 5 * time.Second})
	names := []string{"i1", "i2", "i3"}
	c.proxies = map[string]*testkit.Proxy{}
	for _, n := range names {
		c.proxies[n] = testkit.StartKafkaProxy(t, c.addr)
		c.startInstance(n, true)
	}
	c.named = len(names)
	c.waitSettled(30 * time.Second)
	r := rng(t)
	gen := c.startGen(genRate, span)
	alive := func() {
		t.Helper()
		for _, n := range names {
			if p := c.insts[n].p; p.exited() {
				t.Fatalf("%s exited by itself (%v):\n%s", n, p.err, p.tail(4000))
			}
		}
	}
	faults := map[string]int{}
	for step := 0; ; step++ {
		select {
		case <-gen.done:
		case <-time.After(time.Duration(2000+r.IntN(2000)) * time.Millisecond):
		}
		if gen.exited() {
			break
		}
		alive()
		victim := names[r.IntN(len(names))]
		p := c.proxies[victim]
		var fault string
		switch step % 3 {
		case 0:
			d := c.opts.txnTimeout + 2*time.Second
			fault = "responses stalled past the transaction timeout"
			c.logf("%s: %s (%s)", victim, fault, d)
			p.Stall(d)
			time.Sleep(d)
		case 1:
			fault = "connections cut three times"
			for i := range 3 {
				time.Sleep(time.Duration(100+r.IntN(700)) * time.Millisecond)
				p.Cut()
				c.logf("%s: connections cut (%d of 3)", victim, i+1)
			}
		default:
			d := c.opts.sessionTimeout + 3*time.Second
			fault = "all traffic held past the session timeout"
			c.logf("%s: %s (%s)", victim, fault, d)
			p.Blackhole(d)
			time.Sleep(d)
		}
		faults[fault]++
		alive()
		c.waitSettled(time.Minute)
	}
	c.waitGen(gen, time.Minute)
	c.logf("faults over: %v", faults)
	if len(faults) < 3 {
		t.Fatalf("the input ended before every kind of fault happened: %v", faults)
	}
	want := c.replay()
	c.waitExact(want, catchUp)
	alive()
}
