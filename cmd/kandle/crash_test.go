package main

// This file is the fixture the crash harness (crash_test.go), the fault
// tests (faults_test.go) and the live test (live_test.go) share: a `kandle
// dev-broker` process, `kandle run` instances as processes with the shipped
// defaults, `kandle gen` producing real-time trades, and the comparison of
// the read-committed outputs with one uninterrupted `kandle replay`
// (compare_test.go).

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/connectors/kafka"
	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/internal/testkit"
)

// clusterTopology is the topology every instance runs; %[3]s is the
// processors block of the cluster's shape. Every processor runs with the
// shipped defaults (lateness, idle_timeout, max_future, max_idle): these
// tests prove that what users deploy equals a replay under faults, so
// nothing is switched off. The input is generated in real time (event times
// follow the wall clock), which is what the defaults are made for; short
// timeframes make a minute of input close windows of every stage.
const clusterTopology = `
name: crash
group: crash
brokers: [%[1]s]
metrics: ""
commit_interval: 50ms
sources:
  trades: {topic: trades, partitions: 6}
processors:
%[3]s
dead_letter: {topic: %[2]sdlq}
`

// clusterShape is the set of processors a cluster runs: the topology's
// processors block (%[2]s is the topic prefix), the processor names (one
// consumer group each) and the candle topics compared with the replay (the
// replay topology writes the same topics with the prefix "replay.").
type clusterShape struct {
	processors   string
	stages       []string
	candleTopics []string
	// mustClose are the candle topics where a replay of any test's input
	// closes windows of every symbol (the first candle topic needs three).
	mustClose []string
}

// shortChain, what make test runs: a 5s candle stage with a 15s → 1m rollup
// chain and a direct 15s stage. c.5s has the trades' partition count, so
// c15s runs fused into c5s (unless unfused: TestUnfused, KANDLE_TEST_FUSE=off); c1m, whose input
// has another, is a stage of its own.
var shortChain = clusterShape{
	processors: `  c5s: {kind: candles, from: trades, timeframe: 5s, output: {topic: %[2]sc.5s, partitions: 6}}
  c15s: {kind: rollup, from: c5s, timeframe: 15s, output: {topic: %[2]sc.15s, partitions: 3}}
  c1m: {kind: rollup, from: c15s, timeframe: 1m, output: {topic: %[2]sc.1m, partitions: 2}}
  d15s: {kind: candles, from: trades, timeframe: 15s, output: {topic: %[2]sd.15s, partitions: 3}}`,
	stages:       []string{"c5s", "c15s", "c1m", "d15s"},
	candleTopics: []string{"c.5s", "c.15s", "c.1m", "d.15s"},
	mustClose:    []string{"c.15s", "d.15s"},
}

// deepChain, what make soak's crash harness runs: the shape of a 1m stage
// with seven rollups above it (1m → 5m → … → 1M), scaled so that ten
// minutes of real-time input close windows at every level: 2s candles
// rolled up to 4s, 8s, … 256s, and the direct 15s stage. Each level is fed
// only by the one below it.
var deepChain = func() clusterShape {
	sh := clusterShape{processors: "  c2s: {kind: candles, from: trades, timeframe: 2s, output: {topic: %[2]sc.2s, partitions: 6}}\n",
		stages: []string{"c2s"}, candleTopics: []string{"c.2s"}}
	// Fused (unless unfused: TestUnfused, KANDLE_TEST_FUSE=off): c4s, c8s and c16s into c2s, c64s
	// into c32s, c256s into c128s; c32s and c128s read inputs with other
	// partition counts.
	parts := []int{6, 6, 3, 3, 2, 2, 2}
	for i, from := 0, 2; i < 7; i++ {
		tf := from * 2
		sh.processors += fmt.Sprintf("  c%[1]ds: {kind: rollup, from: c%[2]ds, timeframe: %[1]ds, output: {topic: %%[2]sc.%[1]ds, partitions: %[3]d}}\n", tf, from, parts[i])
		sh.stages = append(sh.stages, fmt.Sprintf("c%ds", tf))
		sh.candleTopics = append(sh.candleTopics, fmt.Sprintf("c.%ds", tf))
		from = tf
	}
	sh.processors += "  d15s: {kind: candles, from: trades, timeframe: 15s, output: {topic: %[2]sd.15s, partitions: 3}}"
	sh.stages = append(sh.stages, "d15s")
	sh.candleTopics = append(sh.candleTopics, "d.15s")
	sh.mustClose = sh.candleTopics // ten minutes of input close 256s windows
	return sh
}()

// outTopics are the topics compared with the replay: the candle topics and
// the dead letters.
func (sh clusterShape) outTopics() []string {
	return append(slices.Clone(sh.candleTopics), "dlq")
}

// clusterSymbols are the generated symbols (record keys).
var clusterSymbols = []string{"BTC", "ETH", "SOL", "ADA", "DOT", "XRP", "BNB", "AVAX", "LTC", "LINK", "ATOM", "NEAR", "UNI", "XLM", "TRX", "ETC"}

// cluster is a dev broker process plus kandle instances, all separate
// processes of the test binary (see TestMain).
type cluster struct {
	t       *testing.T
	start   time.Time
	dir     string // logs, state dirs and topology files; kept when the test fails or KANDLE_KEEP_LOGS=1
	addr    string
	topFile string
	repFile string
	broker  *kproc
	brData  string
	insts   map[string]*instance
	seq     int         // state dir counter
	named   int         // instances named so far (i1, i2, …)
	cl      *kgo.Client // admin
	adm     *kadm.Client
	sent    int      // records the generator processes reported
	gens    []*kproc // generator processes
	opts    clusterOpts
	proxies map[string]*testkit.Proxy // instances that reach the broker through a proxy
	// revised counts, with opts.revisions, the windows whose newest candle
	// has rev > 0, per topic (with its prefix), at the last outputs read.
	revised map[string]int
}

type clusterOpts struct {
	sessionTimeout, txnTimeout time.Duration
	persistBroker              bool         // dev broker with --data-dir, so it can restart
	shape                      clusterShape // the processors; shortChain when zero
	// revisions: the shape revises closed windows (revise_within), so a
	// candle topic holds several candles of a window; outputs compares the
	// newest of each (see latestRevisions).
	revisions bool
}

type instance struct {
	name     string
	stateDir string
	p        *kproc
}

func newCluster(t *testing.T, o clusterOpts) *cluster {
	t.Helper()
	dir, err := os.MkdirTemp("", "kandle-"+strings.ReplaceAll(t.Name(), "/", "_")+"-*")
	if err != nil {
		t.Fatal(err)
	}
	if o.shape.stages == nil {
		o.shape = shortChain
	}
	c := &cluster{t: t, start: time.Now(), dir: dir, insts: map[string]*instance{}, opts: o, revised: map[string]int{},
		addr: fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))}
	t.Cleanup(func() {
		for _, in := range c.insts {
			in.p.kill()
		}
		for _, g := range c.gens {
			g.kill()
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
	if o.persistBroker {
		c.brData = filepath.Join(dir, "broker-data")
	}
	if unfused(t) { // every rollup a stage of its own
		c.opts.shape.processors = strings.ReplaceAll(c.opts.shape.processors, "{kind: rollup,", "{kind: rollup, fuse: false,")
	}
	c.startBroker()
	c.topFile = c.writeTopology("crash.yaml", "")
	c.repFile = c.writeTopology("replay.yaml", "replay.")
	c.opts.shape.stages = stagesOf(t, c.topFile, c.opts.shape.stages)
	c.cl, err = kgo.NewClient(kgo.SeedBrokers(c.addr), kgo.RetryTimeout(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	c.adm = kadm.NewClient(c.cl)
	specs := []kafka.TopicSpec{{Name: "trades", Partitions: 6}}
	for _, tp := range c.opts.shape.outTopics() {
		specs = append(specs, kafka.TopicSpec{Name: "replay." + tp, Partitions: 1})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kafka.EnsureTopics(ctx, c.cl, specs); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *cluster) writeTopology(name, prefix string) string {
	path := filepath.Join(c.dir, name)
	if err := os.WriteFile(path, fmt.Appendf(nil, clusterTopology, c.addr, prefix, fmt.Sprintf(c.opts.shape.processors, c.addr, prefix)), 0o644); err != nil {
		c.t.Fatal(err)
	}
	return path
}

// stagesOf is the processors of the topology in path that run as stages
// (consumer groups): all but the fused ones.
func stagesOf(t *testing.T, path string, names []string) []string {
	t.Helper()
	top, err := loadTopology(path)
	if err != nil {
		t.Fatal(err)
	}
	fused, err := engine.FusedInto(top)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if _, ok := fused[n]; !ok {
			out = append(out, n)
		}
	}
	t.Logf("stages %v; fused %v", out, fused)
	return out
}

// logf logs an action with the time since the cluster started.
func (c *cluster) logf(format string, args ...any) {
	c.t.Helper()
	c.t.Logf("[%6.2fs] %s", time.Since(c.start).Seconds(), fmt.Sprintf(format, args...))
}

func (c *cluster) startBroker() {
	args := []string{"dev-broker", "--listen", c.addr, "--partitions", "1"}
	if c.brData != "" {
		args = append(args, "--data-dir", c.brData)
	}
	c.broker = c.spawn("broker", args...)
	waitTCP(c.t, c.addr)
}

// restartBroker stops the broker gracefully (so it persists its data dir)
// and starts it again on the same port after down.
func (c *cluster) restartBroker(down time.Duration) {
	c.t.Helper()
	c.logf("broker: SIGTERM (restart)")
	if d, ok := c.broker.term(30 * time.Second); !ok {
		c.t.Fatalf("dev broker did not stop within %s of SIGTERM", d)
	}
	time.Sleep(down)
	c.startBroker()
	c.logf("broker: started again")
}

// spawn starts the test binary as `kandle args...` (see TestMain), logging to dir/name.log.
func (c *cluster) spawn(name string, args ...string) *kproc {
	c.t.Helper()
	logf, err := os.OpenFile(filepath.Join(c.dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	fmt.Fprintf(logf, "==== [%6.2fs] kandle %s\n", time.Since(c.start).Seconds(), strings.Join(args, " "))
	cmd := exec.Command(os.Args[0], args...)
	level := cmp.Or(os.Getenv("KANDLE_TEST_CHILD_LOG_LEVEL"), "info") // debug shows kgo's group protocol
	cmd.Env = append(os.Environ(), asKandleEnv+"=1", "KANDLE_LOG_LEVEL="+level)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = testkit.ChildAttr(true)
	if err := cmd.Start(); err != nil {
		logf.Close()
		c.t.Fatalf("start kandle %s: %v", args[0], err)
	}
	p := &kproc{name: name, cmd: cmd, logPath: logf.Name(), done: make(chan struct{})}
	go func() { // owned by p: kill/term wait for done
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p
}

// startInstance runs `kandle run` as instance name. A fresh state dir is an
// empty disk (a new machine); otherwise the instance's previous dir is reused.
func (c *cluster) startInstance(name string, fresh bool) *instance {
	c.t.Helper()
	in := c.insts[name]
	if in == nil || fresh {
		c.seq++
		in = &instance{name: name, stateDir: filepath.Join(c.dir, fmt.Sprintf("state-%s-%d", name, c.seq))}
	}
	args := []string{"run", "-t", c.topFile, "-instance", name, "-state-dir", in.stateDir,
		"-transaction-timeout", c.opts.txnTimeout.String(), "-session-timeout", c.opts.sessionTimeout.String()}
	if p := c.proxies[name]; p != nil {
		args = append(args, "-brokers", p.Addr())
	}
	in.p = c.spawn(name, args...)
	c.insts[name] = in
	c.logf("%s: started (state %s)", name, filepath.Base(in.stateDir))
	return in
}

// newName names a new instance: i1, i2, …
func (c *cluster) newName() string {
	c.named++
	return fmt.Sprintf("i%d", c.named)
}

// startInstances starts n new instances on empty disks and waits until
// every stage group has them all as members.
func (c *cluster) startInstances(n int) {
	c.t.Helper()
	for range n {
		c.startInstance(c.newName(), true)
	}
	c.waitSettled(30 * time.Second)
}

// checkNoSelfExit fails the test when an instance exited without the test
// signalling it: kandle run ends only on a configuration error or a signal,
// whatever the brokers do.
func (c *cluster) checkNoSelfExit() {
	c.t.Helper()
	for _, n := range slices.Sorted(maps.Keys(c.insts)) {
		if p := c.insts[n].p; p.exited() && !p.ended.Load() {
			c.t.Fatalf("instance %s exited by itself (%v); its log %s ends:\n%s", n, p.err, p.logPath, p.tail(4000))
		}
	}
}

func (c *cluster) running() []string {
	var names []string
	for n, in := range c.insts {
		if !in.p.exited() {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// genRate is the records per second the cluster tests generate: a real
// time feed spread over all six partitions.
const genRate = 1000

// startGen runs `kandle gen` as a process producing d of real-time input at
// rate records/s, keyed by symbol: event times start at the wall clock and
// advance with it (the generator paces its records against its start), lag
// it by at most 300ms of disorder (below the default lateness), and 2% of the
// records are verbatim duplicates and 0.5% malformed. This is how a user
// feeds a deployed group; nothing in the input is stamped in the past.
func (c *cluster) startGen(rate int, d time.Duration) *kproc {
	c.t.Helper()
	n := int(float64(rate) * d.Seconds())
	p := c.spawn(fmt.Sprintf("gen%d", len(c.gens)+1), "gen", "-brokers", c.addr, "-topic", "trades",
		"-start", "now", "-span", "0s", "-rate", strconv.Itoa(rate), "-count", strconv.Itoa(n),
		"-seed", "7", "-disorder", "300ms", "-dup-rate", "0.02", "-malformed-rate", "0.005",
		"-symbols", strings.Join(clusterSymbols, ","))
	c.gens = append(c.gens, p)
	c.logf("gen: producing %d records at %d/s (%s of real-time trades)", n, rate, d)
	return p
}

// waitGen waits for a generator process, fails unless it exited cleanly,
// and adds the records it reports to c.sent.
func (c *cluster) waitGen(p *kproc, within time.Duration) {
	c.t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		p.kill()
		c.t.Fatalf("kandle gen did not finish within %s; log %s", within, p.logPath)
	}
	if p.err != nil {
		c.t.Fatalf("kandle gen: %v\n%s", p.err, p.tail(3000))
	}
	log := p.tail(1 << 16)
	i := strings.LastIndex(log, "produced ")
	var n int
	if i < 0 {
		c.t.Fatalf("kandle gen did not report what it produced:\n%s", p.tail(3000))
	}
	if _, err := fmt.Sscanf(log[i:], "produced %d records", &n); err != nil {
		c.t.Fatalf("kandle gen report %q: %v", log[i:], err)
	}
	c.sent += n
	c.logf("gen: done, %s", strings.TrimSpace(log[i:]))
}

// replay runs one uninterrupted `kandle replay` of everything produced into
// the replay.* topics and returns its outputs.
func (c *cluster) replay() map[string][]string {
	c.t.Helper()
	c.logf("replay: start (%d records)", c.sent)
	p := c.spawn("replay", "replay", "-t", c.repFile, "-brokers", c.addr, "--out", "topics")
	select {
	case <-p.done:
	case <-time.After(3 * time.Minute):
		p.kill()
		c.t.Fatalf("kandle replay did not finish within 3m; log %s", p.logPath)
	}
	if p.err != nil {
		c.t.Fatalf("kandle replay: %v\n%s", p.err, p.tail(4000))
	}
	want := c.outputs("replay.")
	c.logf("replay: done: %s", counts(want))
	// Every symbol has closed windows in every stage of mustClose, and
	// several in the finest one.
	for i, tp := range c.opts.shape.candleTopics {
		n, least := len(want[tp]), 0
		switch {
		case i == 0:
			least = 3 * len(clusterSymbols)
		case slices.Contains(c.opts.shape.mustClose, tp):
			least = len(clusterSymbols)
		}
		if n < least {
			c.t.Fatalf("replay made too few candles to prove anything: %s", counts(want))
		}
	}
	if two := twoFinals(want); two != "" {
		c.t.Errorf("the replay emitted more than one final for a window (one key on two partitions?):\n%s", two)
	}
	return want
}

// outputs reads the committed records of every compared topic (with the
// prefix); dead letters become "stage reason pP@O record". With
// opts.revisions a candle topic gives the newest revision of each window.
func (c *cluster) outputs(prefix string) map[string][]string {
	c.t.Helper()
	out := map[string][]string{}
	for _, tp := range c.opts.shape.outTopics() {
		vals := []string{}
		for _, r := range testkit.ReadTopic(c.t, []string{c.addr}, prefix+tp) {
			v := string(r.Value)
			if tp == "dlq" {
				var d struct {
					Reason, Stage, Record string
					RecordBase64          string `json:"record_base64"`
					Partition, Offset     int64
				}
				if err := json.Unmarshal(r.Value, &d); err != nil {
					c.t.Fatalf("dead letter %s: %v", r.Value, err)
				}
				v = fmt.Sprintf("%s %s p%d@%d %s%s", d.Stage, d.Reason, d.Partition, d.Offset, d.Record, d.RecordBase64)
			}
			vals = append(vals, v)
		}
		if c.opts.revisions && tp != "dlq" {
			var problem string
			vals, c.revised[prefix+tp], problem = latestRevisions(vals)
			if problem != "" {
				c.t.Fatalf("%s%s: revisions out of order:\n%s", prefix, tp, problem)
			}
		}
		sort.Strings(vals)
		out[tp] = vals
	}
	return out
}

func counts(m map[string][]string) string {
	var parts []string
	for _, tp := range append(candleTopicsOf(m), "dlq") {
		parts = append(parts, fmt.Sprintf("%s=%d", tp, len(m[tp])))
	}
	return strings.Join(parts, " ")
}

// waitExact polls the live outputs until they equal the replay's (see
// diffLive) and then checks that no on-time trade was dead-lettered late.
// On timeout it prints the difference, SIGQUITs the instances (goroutine
// dumps land in their logs) and fails.
func (c *cluster) waitExact(want map[string][]string, within time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for {
		c.checkNoSelfExit()
		got := c.outputs("")
		diff := diffLive(want, got)
		if diff == "" {
			c.logf("live outputs equal the replay exactly: %s (live: %s)", counts(want), counts(got))
			if late := onTimeLate(got["dlq"]); len(late) > 0 {
				c.t.Fatalf("%d on-time records were dead-lettered late (live and replay agree), e.g.:\n  %s",
					len(late), strings.Join(late[:min(5, len(late))], "\n  "))
			}
			return
		}
		if time.Now().After(deadline) {
			var logs strings.Builder
			logs.WriteString(c.groupReport())
			for n, in := range c.insts {
				fmt.Fprintf(&logs, "---- %s (%s) ----\n%s\n", n, in.p.logPath, in.p.tail(3000))
			}
			// The goroutine dumps go to the kept log files, not to the test output.
			for _, n := range c.running() {
				c.insts[n].p.signal(syscall.SIGQUIT)
			}
			for _, n := range c.running() {
				select {
				case <-c.insts[n].p.done:
				case <-time.After(5 * time.Second):
				}
			}
			c.t.Fatalf("live outputs differ from the replay after %s (want %s, got %s):\n%s\n%s",
				within, counts(want), counts(got), diff, logs.String())
		}
		time.Sleep(time.Second)
	}
}

// members returns how many members each stage's consumer group has.
func (c *cluster) members() map[string]int {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	groups := make([]string, len(c.opts.shape.stages))
	for i, s := range c.opts.shape.stages {
		groups[i] = "crash." + s
	}
	dg, err := c.adm.DescribeGroups(ctx, groups...)
	if err != nil {
		c.t.Fatalf("describe groups: %v", err)
	}
	out := map[string]int{}
	for _, s := range c.opts.shape.stages {
		g := dg["crash."+s]
		if g.State == "Stable" {
			out[s] = len(g.Members)
		} else {
			out[s] = -1 // rebalancing
		}
	}
	return out
}

// groupReport describes every stage group: its state and, per member, the
// partitions the leader assigned and those the member says it owns.
func (c *cluster) groupReport() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	for _, s := range c.opts.shape.stages {
		dg, err := c.adm.DescribeGroups(ctx, "crash."+s)
		if err != nil {
			fmt.Fprintf(&b, "group crash.%s: %v\n", s, err)
			continue
		}
		g := dg["crash."+s]
		fmt.Fprintf(&b, "group crash.%s: state %s, %d members, assigned %v\n", s, g.State, len(g.Members), g.AssignedPartitions().Sorted())
		for _, m := range g.Members {
			var assigned, owned []string
			if a, ok := m.Assigned.AsConsumer(); ok {
				for _, t := range a.Topics {
					assigned = append(assigned, fmt.Sprint(t.Topic, t.Partitions))
				}
			}
			if j, ok := m.Join.AsConsumer(); ok {
				for _, t := range j.OwnedPartitions {
					owned = append(owned, fmt.Sprint(t.Topic, t.Partitions))
				}
			}
			fmt.Fprintf(&b, "  member %s at %s: assigned %v, owned %v\n", m.MemberID, m.ClientHost, assigned, owned)
		}
	}
	return b.String()
}

// waitSettled polls until every stage group is stable with exactly the
// running instances as members.
func (c *cluster) waitSettled(within time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for {
		c.checkNoSelfExit()
		n, m := len(c.running()), c.members()
		ok := true
		for _, s := range c.opts.shape.stages {
			ok = ok && m[s] == n
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("consumer groups did not settle with the %d running instances within %s:\n%s", n, within, c.groupReport())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitMembers polls until every stage group is stable with n members and
// returns how long that took.
func (c *cluster) waitMembers(n int, within time.Duration) time.Duration {
	c.t.Helper()
	start := time.Now()
	for {
		m := c.members()
		ok := true
		for _, s := range c.opts.shape.stages {
			ok = ok && m[s] == n
		}
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > within {
			c.t.Fatalf("consumer groups did not settle with %d members within %s: %v", n, within, m)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// minSessionTimeout is the dev broker's group.min.session.timeout.ms (Kafka's default, 6s).
const minSessionTimeout = 6 * time.Second

// kproc is one child process. Its wait goroutine closes done.
type kproc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error
	ended   atomic.Bool // the test sent SIGKILL, SIGTERM or SIGQUIT: an exit it asked for
}

func (p *kproc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *kproc) signal(sig syscall.Signal) {
	if sig == syscall.SIGKILL || sig == syscall.SIGTERM || sig == syscall.SIGQUIT {
		p.ended.Store(true)
	}
	if !p.exited() {
		_ = syscall.Kill(p.cmd.Process.Pid, sig)
	}
}

// kill sends SIGKILL to the process (by pid) and waits for it.
func (p *kproc) kill() {
	p.signal(syscall.SIGCONT) // a stopped process is killed either way; this keeps the wait short
	p.signal(syscall.SIGKILL)
	<-p.done
}

// term sends SIGTERM and waits up to limit; it reports how long the process
// took and whether it exited (it is killed otherwise).
func (p *kproc) term(limit time.Duration) (time.Duration, bool) {
	start := time.Now()
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return time.Since(start), true
	case <-time.After(limit):
		d := time.Since(start)
		p.signal(syscall.SIGQUIT) // a goroutine dump in the log shows what it waited for
		select {
		case <-p.done:
		case <-time.After(3 * time.Second):
		}
		p.kill()
		return d, false
	}
}

func (p *kproc) tail(n int) string {
	b, _ := os.ReadFile(p.logPath)
	if len(b) > n {
		b = append([]byte("…"), b[len(b)-n:]...)
	}
	return string(bytes.TrimSpace(b))
}

// rng returns the test's random source, seeded from KANDLE_CRASH_SEED or
// the clock; the seed is logged so a failing run can be repeated.
func rng(t *testing.T) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("KANDLE_CRASH_SEED"); s != "" {
		fmt.Sscan(s, &seed)
	}
	t.Logf("random seed %d (set KANDLE_CRASH_SEED=%d to repeat the same actions)", seed, seed)
	return rand.New(rand.NewPCG(seed, seed>>1|1))
}

// The crash harness, with the shipped defaults: the topology runs
// as separate `kandle run` processes while `kandle gen` produces real-time
// trades; instances are SIGKILLed at random points (≥ 8 times), restarted
// with their old disk or an empty one, added and stopped gracefully.
// Afterwards every output topic's read-committed candles equal those of one
// uninterrupted `kandle replay` of the same input (see diffLive), the dead
// letters are the same, and no on-time trade was dead-lettered late.
//
// KANDLE_SOAK=1 (make soak) runs 10 minutes of input at twice the rate
// (1.2 M records) through deepChain, a candle stage with seven rollups
// above it, with ≥ 60 kills; KANDLE_CRASH_SEED repeats a run's actions.
func TestCrashHarness(t *testing.T) {
	testkit.WallClockTest(t)
	// Each kill waits for the groups to settle (the dead member's session,
	// 6s), so 75s of input see about ten kills.
	rate, span, minKills, catchUp, shape := genRate, 75*time.Second, 8, 3*time.Minute, shortChain
	if os.Getenv("KANDLE_SOAK") == "1" {
		rate, span, minKills, catchUp, shape = 2*genRate, 10*time.Minute, 60, 10*time.Minute, deepChain
	}
	c := newCluster(t, clusterOpts{sessionTimeout: minSessionTimeout, txnTimeout: 5 * time.Second, shape: shape})
	r := rng(t)
	c.startInstances(3)
	gen := c.startGen(rate, span)
	kills, added, stopped, killsWhileFlowing := 0, 0, 0, 0
	genDone := gen.done // nil once it fired, so the pause below always applies
	for genDone != nil || kills < minKills {
		select {
		case <-genDone:
			genDone = nil
			killsWhileFlowing = kills
			c.logf("gen: exited, %d SIGKILLs so far", kills)
		case <-time.After(time.Duration(500+r.IntN(1500)) * time.Millisecond):
		}
		// Kill only once every running instance is a member of every stage
		// group, so that every kill lands on a member that holds partitions.
		c.waitSettled(30 * time.Second)
		c.chaos(r, &kills, &added, &stopped)
	}
	c.waitGen(gen, time.Minute)
	for len(c.running()) < 2 {
		c.startInstance(c.newName(), true)
	}
	c.logf("chaos over: %d SIGKILLs (%d while trades were produced), %d instances added, %d stopped gracefully; running %v",
		kills, killsWhileFlowing, added, stopped, c.running())
	want := c.replay()
	c.waitExact(want, catchUp)
}

// chaos does one random fault to the running instances: mostly a SIGKILL
// (then the instance restarts on its old disk, on an empty one, or a new
// instance takes its place), else a new instance joins or one leaves with
// SIGTERM. Two instances always keep running.
func (c *cluster) chaos(r *rand.Rand, kills, added, stopped *int) {
	c.t.Helper()
	run := c.running()
	switch x := r.IntN(10); {
	case x < 7 || len(run) <= 2: // SIGKILL at a random point
		name := run[r.IntN(len(run))]
		c.insts[name].p.kill()
		*kills++
		c.logf("%s: SIGKILL (#%d)", name, *kills)
		switch y := r.IntN(10); {
		case y < 5: // same instance, same disk: fences its previous incarnation
			c.startInstance(name, false)
		case y < 8: // same instance id on a new machine: state from the changelog
			c.startInstance(name, true)
		default: // gone for good; a new instance takes its place
			c.startInstance(c.newName(), true)
		}
	case x < 9 && len(run) < 4:
		*added++
		c.startInstance(c.newName(), true)
	default:
		name := run[r.IntN(len(run))]
		d, ok := c.insts[name].p.term(15 * time.Second)
		if !ok {
			c.t.Fatalf("%s did not stop within %s of SIGTERM", name, d)
		}
		*stopped++
		c.logf("%s: SIGTERM, exited in %s", name, d.Round(time.Millisecond))
	}
}
