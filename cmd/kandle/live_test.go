package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kandle/kandle/internal/testkit"
)

// Live equals replay under faults, as shipped: a group of `kandle run`
// processes with the default lateness, idle_timeout, max_future and
// max_idle consumes what `kandle gen` produces in real time (disorder below
// the lateness) into six partitions, while every few seconds an instance is
// SIGKILLed and restarted (on its old disk, on an empty one, or replaced),
// a new one joins, or one leaves with SIGTERM. An outside producer (kcat)
// also sends records with bad clocks and bad keys, as a misconfigured
// producer would:
//
//   - a trade stamped ts 0 (an unset clock): late, it changes no candle;
//   - a trade stamped half of max_future ahead of the clock: accepted, and
//     it must not make on-time trades late;
//   - a trade stamped beyond max_future (an hour beyond, so that it is still
//     ahead when the replay runs): rejected as future;
//   - a trade whose record key names another symbol, and one without a key
//     (spread by kcat's murmur2_random partitioner, like a producer that
//     forgets the key): rejected as key_mismatch, never a second final.
//
// Afterwards the read-committed candles of every timeframe equal those of
// one uninterrupted `kandle replay` of the same input (see diffLive), the
// dead letters are the same, no on-time trade was dead-lettered late, and
// each injected record got the reason above from both candle stages.
//
// KANDLE_SOAK=1 (make soak) runs 10 minutes of input at twice the rate;
// KANDLE_CRASH_SEED repeats a run's choices of victims.
func TestLiveEqualsReplayUnderFaults(t *testing.T) {
	testkit.WallClockTest(t)
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatal("kcat is not installed: run `bash scripts/test-deps.sh` (Debian package kcat)")
	}
	rate, span, catchUp := genRate, 60*time.Second, 3*time.Minute
	if os.Getenv("KANDLE_SOAK") == "1" {
		rate, span, catchUp = 2*genRate, 10*time.Minute, 10*time.Minute
	}
	c := newCluster(t, clusterOpts{sessionTimeout: minSessionTimeout, txnTimeout: 5 * time.Second})
	maxFuture := shippedMaxFuture(t, c.topFile)
	r := rng(t)
	c.startInstances(3)
	gen := c.startGen(rate, span)

	var injected map[string]string
	faults := map[string]int{}
	for step := 0; ; step++ {
		select {
		case <-gen.done:
		case <-time.After(3 * time.Second):
		}
		if gen.exited() {
			break
		}
		if step == 2 { // the partitions have watermarks by now
			injected = injectBadRecords(t, c, kcat, maxFuture)
		}
		c.waitSettled(30 * time.Second)
		faults[c.fault(r, step)]++
	}
	c.waitGen(gen, time.Minute)
	for len(c.running()) < 2 {
		c.startInstance(c.newName(), true)
	}
	c.logf("faults over: %v; running %v", faults, c.running())
	if injected == nil {
		t.Fatal("the input ended before the bad records were injected")
	}
	want := c.replay()
	c.waitExact(want, catchUp)
	checkInjected(t, c.outputs("")["dlq"], injected)
}

// fault does the step-th fault of a fixed cycle to a random running
// instance, so that every kind happens in a bounded run: SIGKILL with a
// restart on the same disk, a join, SIGKILL with a restart on an empty disk,
// a leave (SIGTERM), SIGKILL with a new instance in its place, SIGTERM with
// a restart on the same disk. Two instances always keep running.
func (c *cluster) fault(r *rand.Rand, step int) string {
	c.t.Helper()
	run := c.running()
	victim := run[r.IntN(len(run))]
	term := func() {
		c.t.Helper()
		d, ok := c.insts[victim].p.term(15 * time.Second)
		if !ok {
			c.t.Fatalf("%s did not stop within %s of SIGTERM:\n%s", victim, d, c.insts[victim].p.tail(3000))
		}
		c.logf("%s: SIGTERM, exited in %s", victim, d.Round(time.Millisecond))
	}
	kill := func() {
		c.insts[victim].p.kill()
		c.logf("%s: SIGKILL", victim)
	}
	switch step % 6 {
	case 0:
		kill()
		c.startInstance(victim, false)
		return "kill+restart"
	case 1:
		if len(run) < 4 {
			c.startInstance(c.newName(), true)
			return "join"
		}
		fallthrough
	case 3:
		if len(run) > 2 {
			term()
			return "leave"
		}
		c.startInstance(c.newName(), true)
		return "join"
	case 2:
		kill()
		c.startInstance(victim, true)
		return "kill+restart on an empty disk"
	case 4:
		kill()
		c.startInstance(c.newName(), true)
		return "kill+replace"
	default:
		term()
		c.startInstance(victim, false)
		return "term+restart"
	}
}

// shippedMaxFuture is the max_future the generated topology's candle stages
// run with: the shipped default, since the topology does not set it.
func shippedMaxFuture(t *testing.T, path string) time.Duration {
	t.Helper()
	top, err := loadTopology(path)
	if err != nil {
		t.Fatal(err)
	}
	p := top.Processors["c5s"]
	if p == nil || p.MaxFuture <= 0 {
		t.Fatalf("the shipped max_future is off (%v): this test expects the future guard on by default", p)
	}
	return p.MaxFuture
}

// injectBadRecords sends the bad-clock and bad-key records with kcat and
// returns the reason each must be dead-lettered with by name ("" =
// accepted).
func injectBadRecords(t *testing.T, c *cluster, kcat string, maxFuture time.Duration) map[string]string {
	t.Helper()
	now := time.Now()
	rec := func(sym, id string, ts int64) string {
		return fmt.Sprintf(`{"symbol":%q,"ts":%d,"price":"100","qty":"1","trade_id":"%s%s"}`, sym, ts, injectedID, id)
	}
	keyed := []string{
		"SOL:" + rec("SOL", "ts0", 0),
		"ETH:" + rec("ETH", "ahead", now.Add(maxFuture/2).UnixMilli()),
		"BTC:" + rec("BTC", "future", now.Add(maxFuture+time.Hour).UnixMilli()),
		"BTC:" + rec("XRP", "miskeyed", now.UnixMilli()),
	}
	keyless := []string{rec("ADA", "keyless", now.UnixMilli())}
	dir := t.TempDir()
	for _, f := range []struct {
		name  string
		lines []string
		args  []string
	}{
		{"keyed.txt", keyed, []string{"-K:"}},
		{"keyless.txt", keyless, nil},
	} {
		path := filepath.Join(dir, f.name)
		if err := os.WriteFile(path, []byte(strings.Join(f.lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		args := append([]string{"-b", c.addr, "-P", "-t", "trades", "-X", "partitioner=murmur2_random"}, f.args...)
		if out, err := exec.Command(kcat, append(args, "-l", path)...).CombinedOutput(); err != nil {
			t.Fatalf("kcat produce: %v\n%s", err, out)
		}
	}
	c.logf("kcat: injected ts 0, +%s, +%s, a mis-keyed and a keyless trade", maxFuture/2, maxFuture+time.Hour)
	return map[string]string{"ts0": "late", "ahead": "", "future": "future", "miskeyed": "key_mismatch", "keyless": "key_mismatch"}
}

// checkInjected checks that each injected record was dead-lettered once by
// each candle stage with its reason, or never when it is accepted.
func checkInjected(t *testing.T, dlq []string, want map[string]string) {
	t.Helper()
	for id, reason := range want {
		for _, stage := range []string{"c5s", "d15s"} {
			var got []string
			for _, v := range dlq {
				if f := strings.Fields(v); len(f) >= 2 && f[0] == stage && strings.Contains(v, `"`+injectedID+id+`"`) {
					got = append(got, f[1])
				}
			}
			switch {
			case reason == "" && len(got) > 0:
				t.Errorf("%s: the trade %s%s is within max_future and must be accepted; dead-lettered %v", stage, injectedID, id, got)
			case reason != "" && (len(got) != 1 || got[0] != reason):
				t.Errorf("%s: the trade %s%s must be dead-lettered once with reason %s; got %v", stage, injectedID, id, reason, got)
			}
		}
	}
}
