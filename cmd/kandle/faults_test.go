package main

// Fault tests: each fault the issue names — a zombie instance after a
// rebalance, a transaction left open by a dead instance, a broker restart and
// a graceful stop — happens to `kandle run` processes while trades flow, and
// afterwards the read-committed outputs still equal one replay exactly.

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kandle/kandle/internal/testkit"
)

// startProducing runs `kandle gen` producing span of real-time trades in
// the background; the returned func waits for it and fails on error.
func startProducing(t *testing.T, c *cluster, span time.Duration) (wait func()) {
	t.Helper()
	p := c.startGen(genRate, span)
	return func() {
		t.Helper()
		c.waitGen(p, span+time.Minute)
	}
}

// A zombie: an instance frozen (SIGSTOP) with an open transaction until the
// group moves its partitions away, then thawed (SIGCONT). Its stale
// transaction must never become visible, it must stop writing and rejoin,
// and the final outputs equal the replay.
func TestZombieInstanceIsFenced(t *testing.T) {
	testkit.WallClockTest(t)
	c := newCluster(t, clusterOpts{sessionTimeout: minSessionTimeout, txnTimeout: 5 * time.Second})
	for _, n := range []string{"i1", "i2", "i3"} {
		c.startInstance(n, true)
	}
	c.waitMembers(3, 30*time.Second)
	wait := startProducing(t, c, 25*time.Second)
	time.Sleep(2 * time.Second) // mid-stream: i1 holds an open transaction
	z := c.insts["i1"]
	z.p.signal(syscall.SIGSTOP)
	c.logf("i1: SIGSTOP")
	d := c.waitMembers(2, 60*time.Second)
	c.logf("group rebalanced i1's partitions away after %s", d.Round(time.Millisecond))
	time.Sleep(2 * time.Second) // the others commit on i1's former partitions
	z.p.signal(syscall.SIGCONT)
	c.logf("i1: SIGCONT (zombie wakes up)")
	d = c.waitMembers(3, 60*time.Second)
	c.logf("i1 rejoined after %s", d.Round(time.Millisecond))
	if z.p.exited() {
		t.Fatalf("the zombie exited instead of rejoining:\n%s", z.p.tail(3000))
	}
	wait()
	want := c.replay()
	c.waitExact(want, 2*time.Minute)
	if log := z.p.tail(1 << 20); !strings.Contains(log, "transaction aborted") {
		t.Logf("note: the zombie's log shows no aborted transaction (it was frozen between transactions)")
	} else {
		c.logf("the zombie's stale transaction was aborted, as its log shows")
	}
}

// A transaction timeout: an instance SIGKILLed mid-transaction never comes
// back. Its open transaction holds back read-committed readers until the
// transaction timeout aborts it; then the survivor owns every partition,
// makes progress, and the outputs are exact.
func TestDeadInstanceTransactionTimesOut(t *testing.T) {
	testkit.WallClockTest(t)
	c := newCluster(t, clusterOpts{sessionTimeout: minSessionTimeout, txnTimeout: 5 * time.Second})
	c.startInstance("i1", true)
	c.startInstance("i2", true)
	c.waitMembers(2, 30*time.Second)
	wait := startProducing(t, c, 20*time.Second)
	time.Sleep(2 * time.Second)
	c.insts["i1"].p.kill()
	killed := time.Now()
	c.logf("i1: SIGKILL mid-transaction (not restarted)")
	d := c.waitMembers(1, 60*time.Second)
	c.logf("i2 alone in every group after %s", d.Round(time.Millisecond))
	wait()
	want := c.replay()
	c.waitExact(want, 2*time.Minute)
	c.logf("caught up %s after the kill", time.Since(killed).Round(time.Millisecond))
}

// A broker restart: the dev broker (persisting to --data-dir) is stopped
// and started again mid-stream. Instances reconnect and resume; nothing is
// lost or doubled.
func TestBrokerRestart(t *testing.T) {
	testkit.WallClockTest(t)
	c := newCluster(t, clusterOpts{sessionTimeout: minSessionTimeout, txnTimeout: 5 * time.Second, persistBroker: true})
	c.startInstance("i1", true)
	c.startInstance("i2", true)
	c.waitMembers(2, 30*time.Second)
	wait := startProducing(t, c, 20*time.Second)
	time.Sleep(3 * time.Second) // mid-stream: transactions are open
	c.restartBroker(time.Second)
	wait()
	want := c.replay()
	c.waitExact(want, 2*time.Minute)
	for _, n := range []string{"i1", "i2"} {
		if c.insts[n].p.exited() {
			t.Errorf("%s exited during the broker restart:\n%s", n, c.insts[n].p.tail(3000))
		}
	}
}

// A graceful stop: SIGTERM commits what is open and leaves the groups, so
// the stopped instance exits within 15s and its partitions move to the
// others at once — far sooner than the session timeout, which is set to 45s
// here so that only a clean LeaveGroup can explain a fast hand-over.
func TestGracefulStopHandsOver(t *testing.T) {
	testkit.WallClockTest(t)
	c := newCluster(t, clusterOpts{sessionTimeout: 45 * time.Second, txnTimeout: 5 * time.Second})
	c.startInstance("i1", true)
	c.startInstance("i2", true)
	c.waitMembers(2, 30*time.Second)
	wait := startProducing(t, c, 20*time.Second)
	time.Sleep(2 * time.Second)
	stop := func(name string) {
		t.Helper()
		p := c.insts[name].p
		d, ok := p.term(15 * time.Second)
		if !ok {
			t.Fatalf("%s did not exit within 15s of SIGTERM:\n%s", name, p.tail(3000))
		}
		c.logf("%s: SIGTERM, exited in %s", name, d.Round(time.Millisecond))
		if p.err != nil {
			t.Errorf("%s exited with %v after SIGTERM:\n%s", name, p.err, p.tail(3000))
		}
	}
	stop("i2")
	h := c.waitMembers(1, 10*time.Second)
	c.logf("i1 alone in every group %s after i2 exited", h.Round(time.Millisecond))

	// A stop in the middle of a rebalance (i3 joining) is just as prompt.
	c.startInstance("i3", true)
	time.Sleep(500 * time.Millisecond)
	stop("i1")
	h = c.waitMembers(1, 10*time.Second)
	c.logf("i3 alone in every group %s after i1 exited", h.Round(time.Millisecond))
	wait()
	want := c.replay()
	c.waitExact(want, 2*time.Minute)
}

// A graceful stop while the group is rebalancing around a dead member (i1
// SIGKILLed, i4 joining): the join round cannot finish before the dead
// member's session expires, kgo's End waits for a heartbeat and Close lets
// the in-flight JoinGroup finish. The stop is still bounded: the engine
// spends at most 5s ending its transaction and 5s leaving, then exits.
func TestGracefulStopDuringRebalance(t *testing.T) {
	testkit.WallClockTest(t)
	c := newCluster(t, clusterOpts{sessionTimeout: minSessionTimeout, txnTimeout: 5 * time.Second})
	for _, n := range []string{"i1", "i2", "i3"} {
		c.startInstance(n, true)
	}
	c.waitMembers(3, 30*time.Second)
	wait := startProducing(t, c, 20*time.Second)
	time.Sleep(2 * time.Second)
	c.insts["i1"].p.kill()
	c.logf("i1: SIGKILL")
	c.startInstance("i4", true)
	time.Sleep(time.Second)
	p := c.insts["i2"].p
	d, ok := p.term(15 * time.Second)
	if !ok {
		t.Fatalf("i2 did not exit within 15s of SIGTERM:\n%s", p.tail(3000))
	}
	c.logf("i2: SIGTERM during the rebalance, exited in %s", d.Round(time.Millisecond))
	h := c.waitMembers(2, 30*time.Second)
	c.logf("i3 and i4 share every group %s after i2 exited", h.Round(time.Millisecond))
	wait()
	want := c.replay()
	c.waitExact(want, 2*time.Minute)
}
