package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kandle/kandle/internal/testkit"
)

// outageShape runs revise_within on its candle stages: c5s with a 15s → 1m
// rollup chain above it (the shape of a 1m stage with its rollups, scaled
// like the crash harness's so that a minute of input closes windows at
// every level), and d1m, a 1m candles stage, directly. c.5s has the
// trades' partition count, so the revisions cascade into c15s in process
// (fused into c5s, unless unfused: TestUnfused, KANDLE_TEST_FUSE=off) and into c1m through a
// topic. The horizon (1h)
// holds the whole outage; lateness, idle_timeout and max_future are the
// shipped defaults.
var outageShape = clusterShape{
	processors: `  c5s: {kind: candles, from: trades, timeframe: 5s, revise_within: 1h, output: {topic: %[2]sc.5s, partitions: 6}}
  c15s: {kind: rollup, from: c5s, timeframe: 15s, output: {topic: %[2]sc.15s, partitions: 3}}
  c1m: {kind: rollup, from: c15s, timeframe: 1m, output: {topic: %[2]sc.1m, partitions: 2}}
  d1m: {kind: candles, from: trades, timeframe: 1m, revise_within: 1h, output: {topic: %[2]sd.1m, partitions: 3}}`,
	stages:       []string{"c5s", "c15s", "c1m", "d1m"},
	candleTopics: []string{"c.5s", "c.15s", "c.1m", "d.1m"},
	mustClose:    []string{"c.15s", "c.1m", "d.1m"},
}

// The outage: live input for outageLead, then the producer stops sending
// for outageLen while its trades keep their real-time stamps, then it
// sends that backlog and goes on live for outageTail.
const (
	outageLead = 15 * time.Second
	outageLen  = 30 * time.Second
	outageTail = 15 * time.Second
)

// A producer outage longer than the idle advance, with the shipped
// defaults: while the producer is silent the caught-up group advances its
// watermarks with the wall clock and closes the windows of the outage (gap
// candles, and the minute that was open, with the trades it had); the
// backlog then arrives late for them. With revise_within those trades are
// not dead-lettered late: they revise the closed windows, and the rollups
// above them. Afterwards the newest revision of every window of every
// output topic equals the candle of one uninterrupted `kandle replay` of
// the same input (which, reading the backlog in order, never needed a
// revision), revisions came out in order (0, 1, 2, … per window), every
// topic has revised windows of every symbol, and no record was
// dead-lettered late. The instances also write every candle topic to a
// DynamoDB table, Valkey and an S3 Parquet lake (their sink stages, shipped
// settings but the lake's flush_age), and each store ends with that
// candle, at the highest rev the topic has for the window, for every
// window (clusterSinks.wait): the backlog's revisions reach every store and none
// goes back.
func TestOutageBacklogBecomesRevisions(t *testing.T) { testOutage(t, false) }

// The same, with both instances SIGKILLed, one after the other, while the
// backlog is processed (the first restarts on its disk, the second on an
// empty one): their sink stages are killed mid-write too, and redeliver.
func TestOutageBacklogBecomesRevisionsUnderKills(t *testing.T) { testOutage(t, true) }

func testOutage(t *testing.T, kills bool) {
	testkit.WallClockTest(t)
	c := newCluster(t, clusterOpts{sessionTimeout: minSessionTimeout, txnTimeout: 5 * time.Second, shape: outageShape, revisions: true})
	sinks := c.startSinks()
	c.startInstances(2)
	// The outage starts between :45 and :53 of a minute: the idle advance
	// (idle_timeout 5s, lateness 2s) closes that minute's windows at about
	// :07 of the next one, and the backlog arrives from :15 on, so the 1m
	// windows (d1m, c1m) are closed when it comes and must be revised.
	for s := time.Now().Add(outageLead).Second(); s < 45 || s > 53; s = time.Now().Add(outageLead).Second() {
		time.Sleep(250 * time.Millisecond)
	}
	gen := c.startGen(genRate, outageLead+outageLen+outageTail)
	c.pause(gen, outageLead)
	gen.signal(syscall.SIGSTOP)
	c.logf("gen: SIGSTOP, the producer holds its trades for %s", outageLen)
	c.pause(gen, outageLen)
	gen.signal(syscall.SIGCONT)
	c.logf("gen: SIGCONT, the backlog goes out")
	if kills {
		r := rng(t)
		run := c.running()
		r.Shuffle(len(run), func(i, j int) { run[i], run[j] = run[j], run[i] })
		for i, fresh := range []bool{false, true} { // each instance once
			time.Sleep(time.Duration(200+r.IntN(1500)) * time.Millisecond)
			name := run[i]
			c.insts[name].p.kill()
			c.logf("%s: SIGKILL (#%d) during the revision burst", name, i+1)
			c.startInstance(name, fresh)
		}
	}
	c.waitGen(gen, outageTail+time.Minute)
	want := c.replay()
	c.waitExact(want, 2*time.Minute)
	sinks.wait(want, time.Minute)

	for _, tp := range c.opts.shape.candleTopics {
		c.logf("%s: %d windows revised live, %d in the replay", tp, c.revised[tp], c.revised["replay."+tp])
		if c.revised[tp] < len(clusterSymbols) {
			t.Errorf("%s: %d windows revised, want at least one per symbol (%d): the backlog did not revise the windows the idle advance closed",
				tp, c.revised[tp], len(clusterSymbols))
		}
		if c.revised["replay."+tp] != 0 {
			t.Errorf("%s: the replay revised %d windows; reading the backlog in order it has no late trade", tp, c.revised["replay."+tp])
		}
	}
	var dead []string
	for _, d := range c.outputs("")["dlq"] {
		if f := strings.Fields(d); len(f) >= 2 && (f[1] == "late" || f[1] == "beyond_horizon" || f[1] == "unknown_trade") {
			dead = append(dead, d)
		}
	}
	if len(dead) > 0 {
		t.Errorf("%d records of the backlog were dead-lettered, not revised, e.g.:\n  %s", len(dead), strings.Join(dead[:min(5, len(dead))], "\n  "))
	}
}

// pause waits d, failing the test if the generator or an instance exits
// meanwhile.
func (c *cluster) pause(gen *kproc, d time.Duration) {
	c.t.Helper()
	select {
	case <-gen.done:
		c.t.Fatalf("kandle gen exited during the test's %s wait: %v\n%s", d, gen.err, gen.tail(3000))
	case <-time.After(d):
	}
	c.checkNoSelfExit()
}
