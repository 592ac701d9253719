package main

// This file is the fixture the crash harness (crash_test.go) and the fault
// tests (faults_test.go) share: a `kandle dev-broker` process, `kandle run`
// instances as processes, a trade producer, and the comparison of the
// read-committed outputs with one uninterrupted `kandle replay`.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/connectors/kafka"
	"github.com/kandle/kandle/internal/gen"
	"github.com/kandle/kandle/internal/testkit"
)

// clusterTopology is the topology every instance runs: a 1m candle stage
// with a 5m → 15m → 1h rollup chain and a direct 5m stage. Idle advance is
// off (it follows the wall clock, which replay never does) and so is the
// future guard (the generated trades lie in the past).
const clusterTopology = `
name: crash
group: crash
brokers: [%[1]s]
metrics: ""
commit_interval: 50ms
sources:
  trades: {topic: trades, partitions: 6}
processors:
  c1m: {kind: candles, from: trades, timeframe: 1m, lateness: 2s, idle_timeout: 0s, max_future: 0s, output: {topic: %[2]sc.1m, partitions: 4}}
  c5m: {kind: rollup, from: c1m, timeframe: 5m, output: {topic: %[2]sc.5m, partitions: 3}}
  c15m: {kind: rollup, from: c5m, timeframe: 15m, output: {topic: %[2]sc.15m, partitions: 2}}
  c1h: {kind: rollup, from: c15m, timeframe: 1h, output: {topic: %[2]sc.1h, partitions: 1}}
  d5m: {kind: candles, from: trades, timeframe: 5m, lateness: 2s, idle_timeout: 0s, max_future: 0s, output: {topic: %[2]sd.5m, partitions: 3}}
dead_letter: {topic: %[2]sdlq}
`

// stages are the processor names of clusterTopology (one consumer group each).
var stages = []string{"c1m", "c5m", "c15m", "c1h", "d5m"}

// outTopics are the topics compared with the replay; the replay topology
// writes the same topics with the prefix "replay.".
var outTopics = []string{"c.1m", "c.5m", "c.15m", "c.1h", "d.5m", "dlq"}

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
	seq     int // state dir counter
	gen     *gen.Generator
	cl      *kgo.Client // producer and admin
	adm     *kadm.Client
	sent    int
	opts    clusterOpts
}

type clusterOpts struct {
	sessionTimeout, txnTimeout time.Duration
	persistBroker              bool // dev broker with --data-dir, so it can restart
}

type instance struct {
	name     string
	stateDir string
	p        *kproc
}

func newCluster(t *testing.T, total int, o clusterOpts) *cluster {
	t.Helper()
	dir, err := os.MkdirTemp("", "kandle-"+t.Name()+"-*")
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, start: time.Now(), dir: dir, insts: map[string]*instance{}, opts: o,
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
	if o.persistBroker {
		c.brData = filepath.Join(dir, "broker-data")
	}
	c.startBroker()
	c.topFile = c.writeTopology("crash.yaml", "")
	c.repFile = c.writeTopology("replay.yaml", "replay.")
	c.cl, err = kgo.NewClient(kgo.SeedBrokers(c.addr), kgo.ProducerLinger(5*time.Millisecond),
		kgo.RetryTimeout(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	c.adm = kadm.NewClient(c.cl)
	specs := []kafka.TopicSpec{{Name: "trades", Partitions: 6}}
	for _, tp := range outTopics {
		specs = append(specs, kafka.TopicSpec{Name: "replay." + tp, Partitions: 1})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kafka.EnsureTopics(ctx, c.cl, specs); err != nil {
		t.Fatal(err)
	}
	cfg := gen.DefaultConfig()
	cfg.Symbols = []string{"BTC", "ETH", "SOL", "ADA", "DOT", "XRP", "BNB", "AVAX", "LTC", "LINK", "ATOM", "NEAR", "UNI", "XLM", "TRX", "ETC"}
	// Event times span 4h per 200k records so every rollup closes windows.
	cfg.Count, cfg.Seed, cfg.Span = total, 7, time.Duration(total)*72*time.Millisecond
	cfg.Start = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	cfg.Disorder, cfg.DupRate, cfg.MalformedRate = time.Second, 0.02, 0.005
	if c.gen, err = gen.New(cfg); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *cluster) writeTopology(name, prefix string) string {
	path := filepath.Join(c.dir, name)
	if err := os.WriteFile(path, fmt.Appendf(nil, clusterTopology, c.addr, prefix), 0o644); err != nil {
		c.t.Fatal(err)
	}
	return path
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
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
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
	in.p = c.spawn(name, "run", "-t", c.topFile, "-instance", name, "-state-dir", in.stateDir,
		"-transaction-timeout", c.opts.txnTimeout.String(), "-session-timeout", c.opts.sessionTimeout.String())
	c.insts[name] = in
	c.logf("%s: started (state %s)", name, filepath.Base(in.stateDir))
	return in
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

// produce sends the generator's next n records (fewer at its end) and
// returns how many it sent.
func (c *cluster) produce(n int) int {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var rs []*kgo.Record
	for range n {
		k, v, ok := c.gen.Next()
		if !ok {
			break
		}
		rs = append(rs, &kgo.Record{Topic: "trades", Key: k, Value: v})
	}
	if err := c.cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		c.t.Fatalf("produce trades: %v", err)
	}
	c.sent += len(rs)
	return len(rs)
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
	if len(want["c.1h"]) < 16 || len(want["c.1m"]) < 16*30 {
		c.t.Fatalf("replay made too few candles to prove anything: %s", counts(want))
	}
	return want
}

// outputs reads the committed records of every compared topic (with the
// prefix); dead letters become "stage reason partition offset".
func (c *cluster) outputs(prefix string) map[string][]string {
	c.t.Helper()
	out := map[string][]string{}
	for _, tp := range outTopics {
		vals := []string{}
		for _, r := range testkit.ReadTopic(c.t, []string{c.addr}, prefix+tp) {
			v := string(r.Value)
			if tp == "dlq" {
				var d struct {
					Reason, Stage     string
					Partition, Offset int64
				}
				if err := json.Unmarshal(r.Value, &d); err != nil {
					c.t.Fatalf("dead letter %s: %v", r.Value, err)
				}
				v = fmt.Sprintf("%s %s p%d@%d", d.Stage, d.Reason, d.Partition, d.Offset)
			}
			vals = append(vals, v)
		}
		sort.Strings(vals)
		out[tp] = vals
	}
	return out
}

func counts(m map[string][]string) string {
	var parts []string
	for _, tp := range outTopics {
		parts = append(parts, fmt.Sprintf("%s=%d", tp, len(m[tp])))
	}
	return strings.Join(parts, " ")
}

// waitExact polls the live outputs until they equal want as multisets (no
// candle missing, none extra, none twice). On timeout it prints the
// difference, SIGQUITs the instances (goroutine dumps land in their logs)
// and fails.
func (c *cluster) waitExact(want map[string][]string, within time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := c.outputs("")
		diff := diffMultisets(want, got)
		if diff == "" {
			c.logf("live outputs equal the replay exactly: %s", counts(got))
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

// diffMultisets describes how got differs from want, topic by topic ("" if equal).
func diffMultisets(want, got map[string][]string) string {
	var b strings.Builder
	for _, tp := range outTopics {
		w, g := map[string]int{}, map[string]int{}
		for _, v := range want[tp] {
			w[v]++
		}
		for _, v := range got[tp] {
			g[v]++
		}
		var extra, missing []string
		for v, n := range g {
			if n > w[v] {
				extra = append(extra, fmt.Sprintf("×%d (want ×%d) %s", n, w[v], v))
			}
		}
		for v, n := range w {
			if g[v] < n {
				missing = append(missing, v)
			}
		}
		sort.Strings(extra)
		sort.Strings(missing)
		if len(extra)+len(missing) > 0 {
			fmt.Fprintf(&b, "%s: %d extra or doubled, %d missing (of %d)\n", tp, len(extra), len(missing), len(want[tp]))
		}
		for i, v := range extra {
			if i == 3 {
				break
			}
			fmt.Fprintf(&b, "  extra %s\n", v)
		}
		for i, v := range missing {
			if i == 3 {
				break
			}
			fmt.Fprintf(&b, "  missing %s\n", v)
		}
	}
	return b.String()
}

// members returns how many members each stage's consumer group has.
func (c *cluster) members() map[string]int {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	groups := make([]string, len(stages))
	for i, s := range stages {
		groups[i] = "crash." + s
	}
	dg, err := c.adm.DescribeGroups(ctx, groups...)
	if err != nil {
		c.t.Fatalf("describe groups: %v", err)
	}
	out := map[string]int{}
	for _, s := range stages {
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
	for _, s := range stages {
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
		n, m := len(c.running()), c.members()
		ok := true
		for _, s := range stages {
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
		for _, s := range stages {
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

// produceInBackground sends the rest of the generator's records in chunks
// with a pause between them, so trades keep flowing while instances die.
// The returned channel yields the goroutine's result once; c.sent and c.gen
// belong to the goroutine until then.
func (c *cluster) produceInBackground(ctx context.Context, chunk int, pause time.Duration) <-chan error {
	done := make(chan error, 1)
	go func() {
		for {
			var rs []*kgo.Record
			for range chunk {
				k, v, ok := c.gen.Next()
				if !ok {
					break
				}
				rs = append(rs, &kgo.Record{Topic: "trades", Key: k, Value: v})
			}
			if len(rs) == 0 {
				done <- nil
				return
			}
			if err := c.cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
				done <- fmt.Errorf("produce trades: %w", err)
				return
			}
			c.sent += len(rs)
			select {
			case <-time.After(pause):
			case <-ctx.Done():
				done <- ctx.Err()
				return
			}
		}
	}()
	return done
}

// The crash harness: the topology runs as separate `kandle run`
// processes while ≥ 200k generated trades flow; instances are SIGKILLed at
// random points (≥ 10 times), restarted with their old disk or an empty one,
// added and stopped gracefully. Afterwards every output topic's
// read-committed records and the dead letters equal, as multisets, those of
// one uninterrupted `kandle replay` of the same input.
//
// KANDLE_SOAK=1 (make soak) runs 1M trades and ≥ 40 kills;
// KANDLE_CRASH_SEED repeats a run's actions.
func TestCrashHarness(t *testing.T) {
	// Each kill waits for the groups to settle (the dead member's session,
	// 6s), so production is paced to span about minKills × 6s.
	total, minKills, chunk, pause, catchUp := 200_000, 10, 4_000, 1200*time.Millisecond, 3*time.Minute
	if os.Getenv("KANDLE_SOAK") == "1" {
		total, minKills, chunk, pause, catchUp = 1_000_000, 40, 4_000, 1000*time.Millisecond, 10*time.Minute
	}
	c := newCluster(t, total, clusterOpts{sessionTimeout: minSessionTimeout, txnTimeout: 5 * time.Second})
	r := rng(t)
	next := 1
	newName := func() string { n := fmt.Sprintf("i%d", next); next++; return n }
	for range 3 {
		c.startInstance(newName(), true)
	}
	ctx, cancel := context.WithCancel(context.Background())
	prod := c.produceInBackground(ctx, chunk, pause)
	defer func() { // the producer goroutine is waited for on every path
		cancel()
		if prod != nil {
			<-prod
		}
	}()
	kills, added, stopped, killsWhileFlowing := 0, 0, 0, 0
	for prod != nil || kills < minKills {
		select {
		case err := <-prod:
			if err != nil {
				t.Fatal(err)
			}
			prod = nil
			killsWhileFlowing = kills
			c.logf("producer: all %d records sent, %d SIGKILLs so far", c.sent, kills)
		case <-time.After(time.Duration(500+r.IntN(1500)) * time.Millisecond):
		}
		// Kill only once every running instance is a member of every stage
		// group. The dev broker (kfake) starts a member's session timer only
		// when its JoinGroup reply is delivered, so a process that dies
		// during its first join stays a member forever once the leader syncs
		// and keeps its partitions; Kafka expires it. See the report of #3.
		c.waitSettled(30 * time.Second)
		run := c.running()
		switch x := r.IntN(10); {
		case x < 7 || len(run) <= 2: // SIGKILL at a random point
			name := run[r.IntN(len(run))]
			c.insts[name].p.kill()
			kills++
			c.logf("%s: SIGKILL (#%d)", name, kills)
			switch y := r.IntN(10); {
			case y < 5: // same instance, same disk: fences its previous incarnation
				c.startInstance(name, false)
			case y < 8: // same instance id on a new machine: state from the changelog
				c.startInstance(name, true)
			default: // gone for good; a new instance takes its place
				c.startInstance(newName(), true)
			}
		case x < 9 && len(run) < 4:
			added++
			c.startInstance(newName(), true)
		default:
			name := run[r.IntN(len(run))]
			d, ok := c.insts[name].p.term(15 * time.Second)
			if !ok {
				t.Fatalf("%s did not stop within %s of SIGTERM", name, d)
			}
			stopped++
			c.logf("%s: SIGTERM, exited in %s", name, d.Round(time.Millisecond))
		}
	}
	for len(c.running()) < 2 {
		c.startInstance(newName(), true)
	}
	c.logf("chaos over: %d SIGKILLs (%d while trades were produced), %d instances added, %d stopped gracefully; running %v",
		kills, killsWhileFlowing, added, stopped, c.running())
	want := c.replay()
	c.waitExact(want, catchUp)
}
