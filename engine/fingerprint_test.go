package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/internal/testkit"
	"github.com/kandle/kandle/topology"
)

// reparse swaps old for new in the fixture's topology file and parses it.
func (f *fixture) reparse(old, new string) *topology.Topology {
	f.t.Helper()
	src := fmt.Sprintf(e2eTopology, f.seeds[0])
	if !strings.Contains(src, old) {
		f.t.Fatalf("topology lacks %q", old)
	}
	top, err := topology.Parse("e2e.yaml", []byte(strings.Replace(src, old, new, 1)), topology.Registry{})
	if err != nil {
		f.t.Fatal(err)
	}
	return top
}

// runOnce runs the engine until it fails or the deadline; it returns Run's error
// (nil when it was still running at the deadline and stopped cleanly).
func (f *fixture) runFor(dir string, d time.Duration) error {
	f.t.Helper()
	r := f.start(dir, "a")
	select {
	case err := <-r.done:
		r.cancel()
		return err
	case <-time.After(d):
		r.stop(f.t)
		return nil
	}
}

// An edit that changes what a processor's state means is refused at start,
// naming every affected processor and what changed; the state on the broker
// is untouched, so undoing the edit runs on as before. A compatible edit
// (the rules lateness, max_idle, idle_timeout, max_future) starts on the
// existing state, is recorded, and the outputs stay exact.
func TestIncompatibleTopologyEditIsRefused(t *testing.T) {
	testkit.WallClockTest(t)
	f := newFixture(t)
	dir := t.TempDir()
	// The engines run with the shipped defaults on a clock that ticks from
	// the end of the input so far (see TestRestartResumesExactly).
	f.produce(3000, 1, t0, time.Hour)
	f.clock = clockAt(t0.Add(time.Hour))
	orig := f.top
	r := f.start(dir, "a")
	first := f.replay()
	f.waitFor(first, 90*time.Second)
	f.waitIdleAdvance(first, 60*time.Second) // the next input comes after an advance by the clock
	r.stop(t)
	next, end := segmentAfter(f.clock)

	// dedupe of c1m: c1m, and the rollups built on it, refuse.
	f.top = f.reparse("c1m: {kind: candles, from: trades, timeframe: 1m, lateness: 2s,", "c1m: {kind: candles, from: trades, timeframe: 1m, lateness: 2s, dedupe: false,")
	start := time.Now()
	err := f.runFor(dir, 60*time.Second)
	if !errors.Is(err, engine.ErrIncompatibleState) {
		t.Fatalf("start with dedupe true → false: err = %v, want ErrIncompatibleState", err)
	}
	if time.Since(start) > 30*time.Second {
		t.Errorf("refusal took %s", time.Since(start))
	}
	for _, want := range []string{
		"processor c1m: dedupe true → false since its state was written",
		"processor c5m: from.dedupe true → false since its state was written",
		"processor c1h: from.from.dedupe true → false since its state was written",
		"give each processor listed a new name", "undo the edit", "kandle plan -t e2e.yaml",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "processor d5m") {
		t.Errorf("d5m does not depend on c1m but is refused:\n%v", err)
	}
	// Nothing was consumed or written while refusing: the stored fingerprints
	// are still the original ones, and undoing the edit runs.
	stored, serr := engine.StoredFingerprints(context.Background(), orig, f.seeds)
	if serr != nil {
		t.Fatal(serr)
	}
	want, _ := orig.Fingerprint("c1m")
	if len(want.Changes(stored["c1m"])) != 0 || len(stored) != 4 {
		t.Errorf("stored fingerprints changed by a refused start: %v", stored)
	}

	// Records of an older kandle (fingerprint version 1, which listed the
	// rules as incompatible) keep the state too: the edit below starts on
	// them, and c1m's lateness then is carried on for state entries
	// written before the watermark was stored.
	writeVersion1(t, f, orig)

	// A compatible edit: the rules of c1m, the revision horizon turned on
	// included (c1m's rollups inherit it). The longer lateness holds c1m's
	// stored watermark still until event time catches up (the input
	// disorder is within both latenesses, so the replay under the new
	// settings is what an uninterrupted run gives).
	f.top = f.reparse("lateness: 2s, output: {topic: c.1m", "lateness: 5s, max_idle: 30m, idle_timeout: 1h, max_future: 2s, revise_within: 1h, output: {topic: c.1m")
	f.produce(3000, 2, next, end.Sub(next))
	f.clock = clockAt(end)
	r = f.start(dir, "a")
	f.waitFor(f.replay(), 90*time.Second)
	r.stop(t)
	stored, serr = engine.StoredFingerprints(context.Background(), f.top, f.seeds)
	if serr != nil {
		t.Fatal(serr)
	}
	for _, name := range []string{"c1m", "c5m", "c1h", "d5m"} {
		now, _ := f.top.Fingerprint(name)
		if got := stored[name]; len(now.Changes(got)) != 0 || len(now.CompatibleChanges(got)) != 0 {
			t.Errorf("after the rule edit %s's recorded fingerprint is %s, want %s", name, got.Encode(), now.Encode())
		}
		if horizon := strings.Contains(string(stored[name].Encode()), `["revise_within","1h0m0s"]`); horizon != (name != "d5m") {
			t.Errorf("%s's recorded fingerprint lists the revision horizon: %v, want %v: %s", name, horizon, name != "d5m", stored[name].Encode())
		}
	}
	if d, ok := stored["c1m"].StateLateness(); !ok || d != 2*time.Second {
		t.Errorf("c1m's record lost the lateness of its version 1 record: %s", stored["c1m"].Encode())
	}
}

// writeVersion1 records top's fingerprints as a kandle from before
// fingerprint version 2 did: lateness and max_idle in every candles
// processor's fields and in the "from." copies of its rollups.
func writeVersion1(t *testing.T, f *fixture, top *topology.Topology) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for name := range top.Processors {
		fp, err := top.Fingerprint(name)
		if err != nil {
			t.Fatal(err)
		}
		var fields [][2]string
		for _, fl := range fp.Fields {
			if strings.HasSuffix(fl.Name, "lateness") || strings.HasSuffix(fl.Name, "max_idle") {
				continue
			}
			fields = append(fields, [2]string{fl.Name, fl.Value})
			if strings.HasSuffix(fl.Name, "gap_fill") { // where version 1 listed the rules
				pre := strings.TrimSuffix(fl.Name, "gap_fill")
				fields = append(fields, [2]string{pre + "lateness", "2s"}, [2]string{pre + "max_idle", "24h0m0s"})
			}
		}
		v1, _ := json.Marshal(map[string]any{"v": 1, "processor": name, "fields": fields})
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: engine.FingerprintTopic(top), Key: []byte(name), Value: v1}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// A processor whose state the operator removed (changelog topic and
// consumer group deleted, as the refusal says) takes the new settings: it
// has nothing to mix them with. Its local state is dropped too.
func TestResetProcessorTakesNewSettings(t *testing.T) {
	testkit.WallClockTest(t)
	f := newFixture(t)
	dir := t.TempDir()
	f.produce(1000, 1, t0, 20*time.Minute)
	r := f.start(dir, "a")
	f.waitFor(f.replay(), 90*time.Second)
	r.stop(t)
	f.top = f.reparse("d5m: {kind: candles, from: trades, timeframe: 5m, lateness: 2s,", "d5m: {kind: candles, from: trades, timeframe: 5m, lateness: 2s, gap_fill: false,")
	if err := f.runFor(dir, 60*time.Second); !errors.Is(err, engine.ErrIncompatibleState) || !strings.Contains(err.Error(), "processor d5m: gap_fill true → false") {
		t.Fatalf("before the reset: err = %v, want d5m refused", err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	if _, err := adm.DeleteTopic(ctx, "e2e.d5m.changelog"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.DeleteGroup(ctx, f.top.Group+".d5m"); err != nil {
		t.Fatal(err)
	}
	if err := f.runFor(dir, 3*time.Second); err != nil {
		t.Fatalf("start after resetting d5m: %v", err)
	}
	stored, err := engine.StoredFingerprints(ctx, f.top, f.seeds)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := f.top.Fingerprint("d5m")
	if ch := want.Changes(stored["d5m"]); len(ch) != 0 {
		t.Errorf("the reset processor's fingerprint was not replaced: %v", ch)
	}
}

// The rollup timeframes built on a candles processor are part of its
// fingerprint (it writes quiet marks for them): removing a rollup is
// compatible and recorded, so adding it back later is refused like any new
// timeframe whose quiet marks the processor never wrote.
func TestRollupTimeframesInFingerprint(t *testing.T) {
	testkit.WallClockTest(t)
	f := newFixture(t)
	dir := t.TempDir()
	f.produce(2000, 1, t0, 30*time.Minute)
	f.clock = clockAt(t0.Add(30 * time.Minute))
	orig := f.top
	r := f.start(dir, "a")
	for deadline := time.Now().Add(90 * time.Second); len(f.live()["c.5m"]) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no 5m candle within 90s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	r.stop(t)

	// c1h removed: compatible, c1m's fingerprint is recorded again.
	c1h := "\n  c1h: {kind: rollup, from: c5m, timeframe: 1h, output: {topic: c.1h, partitions: 1}}"
	f.top = f.reparse(c1h, "")
	if err := f.runFor(dir, 3*time.Second); err != nil {
		t.Fatalf("start without the 1h rollup: %v (removing a rollup is compatible)", err)
	}
	stored, err := engine.StoredFingerprints(context.Background(), f.top, f.seeds)
	if err != nil {
		t.Fatal(err)
	}
	now, _ := f.top.Fingerprint("c1m")
	if enc := stored["c1m"].Encode(); string(enc) != string(now.Encode()) {
		t.Errorf("after removing a rollup c1m's recorded fingerprint is %s, want %s", enc, now.Encode())
	}

	// c1h back: c1m never wrote quiet marks at hour ends since: refused.
	f.top = orig
	err = f.runFor(dir, 60*time.Second)
	if !errors.Is(err, engine.ErrIncompatibleState) || !strings.Contains(err.Error(), "processor c1m: quiet_marks 5m → 5m,1h since its state was written") {
		t.Fatalf("start with the 1h rollup back: err = %v, want ErrIncompatibleState naming c1m's quiet_marks", err)
	}
}
