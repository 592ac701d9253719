package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kandle/kandle/connectors/kafka"
	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/topology"
)

var update = flag.Bool("update", false, "rewrite golden files (review the diff before committing)")

// golden compares got with testdata/plan/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "plan", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/kandle -run TestPlan -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (run go test ./cmd/kandle -run TestPlan -update after checking the change)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// kandle plan -t NEW --against OLD: per processor kept / rebuild / new /
// dropped with the settings that decide it, the output topics, the sinks.
func TestPlanAgainstFile(t *testing.T) {
	var out, errb bytes.Buffer
	code := realMain(context.Background(), []string{"plan", "-t", "testdata/plan/new.yaml", "--against", "testdata/plan/old.yaml"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	golden(t, "against_file.golden", out.String())
	// The same file against itself changes nothing.
	out.Reset()
	if code := realMain(context.Background(), []string{"plan", "-t", "testdata/plan/old.yaml", "--against", "testdata/plan/old.yaml"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	golden(t, "unchanged.golden", out.String())
}

// Rules (lateness, max_idle, idle_timeout, max_future) decide from now on:
// kandle plan keeps every processor's state, says why for each rule, and
// the rollups built on an edited processor do not change at all.
func TestPlanRuleChangesKeepState(t *testing.T) {
	var out, errb bytes.Buffer
	if code := realMain(context.Background(), []string{"plan", "-t", "testdata/plan/rules.yaml", "--against", "testdata/plan/old.yaml"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	golden(t, "rules_against_file.golden", out.String())
	old, err := loadTopology("testdata/plan/old.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cur, err := loadTopology("testdata/plan/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := plan(cur, old, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"1m":  {"lateness 2s → 5s", "max_future 1s → 3s"},
		"15m": {"max_idle 24h0m0s → 1h0m0s"},
		"30s": {"idle_timeout 5s → 10s"},
	}
	for _, r := range rows {
		if r.state != "kept" {
			t.Errorf("%s: %s after a rule edit (%v), want kept", r.name, r.state, r.why)
		}
		if r.name == "1d" { // fuse: false: it keeps its state, and says it leaves 1m's stage
			if len(r.why) != 1 || !strings.HasPrefix(r.why[0], "runs: fused into 1m → stage (kept: stop every instance") || r.runs != "stage" {
				t.Errorf("1d: runs %q, why %q, want it to leave 1m's stage with how to switch", r.runs, r.why)
			}
			continue
		}
		if len(r.why) != len(want[r.name]) {
			t.Errorf("%s: why %q, want %q", r.name, r.why, want[r.name])
			continue
		}
		for i, w := range want[r.name] {
			setting, _, _ := strings.Cut(w, " ")
			if r.why[i] != w+" (kept: "+topology.RuleWhy(setting)+")" {
				t.Errorf("%s: %q, want %q with why it keeps the state", r.name, r.why[i], w)
			}
		}
	}
	// Edits of what the state means still need a rebuild.
	for _, tc := range []struct{ old, new, want string }{
		{"timeframe: 15m}", "timeframe: 10m}", "timeframe 15m → 10m"},
		{"timeframe: 1d}", "timeframe: 1d, zone: Asia/Seoul}", "zone UTC → Asia/Seoul"},
		{"timeframe: 15m}", "timeframe: 15m, dedupe: false}", "dedupe true → false"},
		{"timeframe: 15m}", "timeframe: 15m, gap_fill: false}", "gap_fill true → false"},
		{"{topic: trades, partitions: 3}", "{topic: trades, partitions: 3, fields: {price: px}}", "fields.price price → px"},
	} {
		src, err := os.ReadFile("testdata/plan/old.yaml")
		if err != nil {
			t.Fatal(err)
		}
		edited, err := topology.Parse("edited.yaml", []byte(strings.Replace(string(src), tc.old, tc.new, 1)), sinkRegistry())
		if err != nil {
			t.Fatal(err)
		}
		rows, err := plan(edited, old, nil)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, r := range rows {
			if len(r.why) > 0 && r.why[0] == tc.want {
				found = r.state == "rebuild"
			}
		}
		if !found {
			t.Errorf("%s: no processor to rebuild for %q: %+v", tc.new, tc.want, rows)
		}
	}
}

// Turning the revision horizon on (or off) keeps every state and says, on
// the candles processor and on every rollup above it, what changes: late
// trades inside the horizon become revisions with a rev on the output
// topic instead of dead letters, windows keep their trades in state.
func TestPlanRevisionHorizon(t *testing.T) {
	var out, errb bytes.Buffer
	if code := realMain(context.Background(), []string{"plan", "-check", "-t", "testdata/plan/revise.yaml", "--against", "testdata/plan/old.yaml"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	golden(t, "revise_against_file.golden", out.String())
	for _, tc := range []struct {
		cur, old, output string
		why              []string
	}{
		{"revise.yaml", "old.yaml", "(same windows, revisions from now on)", []string{"revisions on", "keep their trades in state for 1h0m0s", "rev raised by one", "instead of a late dead letter"}},
		{"old.yaml", "revise.yaml", "(same windows, no revisions from now on)", []string{"revisions off", "dead-lettered (late) again"}},
	} {
		cur, err := loadTopology("testdata/plan/" + tc.cur)
		if err != nil {
			t.Fatal(err)
		}
		old, err := loadTopology("testdata/plan/" + tc.old)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := plan(cur, old, nil)
		if err != nil {
			t.Fatal(err)
		}
		chain := map[string]bool{"1m": true, "5m": true, "1h": true, "1d": true}
		for _, r := range rows {
			if r.state != "kept" {
				t.Errorf("%s against %s: %s is %s (%v), want kept", tc.cur, tc.old, r.name, r.state, r.why)
			}
			if !chain[r.name] {
				if len(r.why) != 0 {
					t.Errorf("%s against %s: %s is not in the revised chain but changes: %v", tc.cur, tc.old, r.name, r.why)
				}
				continue
			}
			if !strings.HasSuffix(r.output, tc.output) || len(r.why) != 1 || !strings.HasPrefix(r.why[0], "revise_within ") {
				t.Errorf("%s against %s: %s output %q why %q, want output ending %q and one revise_within change", tc.cur, tc.old, r.name, r.output, r.why, tc.output)
				continue
			}
			if r.name == "1m" {
				for _, w := range tc.why {
					if !strings.Contains(r.why[0], w) {
						t.Errorf("%s against %s: 1m's why %q does not say %q", tc.cur, tc.old, r.why[0], w)
					}
				}
			}
		}
	}
}

// kandle plan -t NEW against a running group: the fingerprints its
// processors recorded on the broker.
func TestPlanAgainstBroker(t *testing.T) {
	b, err := kafka.StartDevBroker(kafka.WithListen("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	seeds := b.Addrs()
	old, err := loadTopology("testdata/plan/old.yaml")
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(old, engine.WithBrokers(seeds), engine.WithStateDir(t.TempDir()), engine.WithOnly("1m", "5m", "1h", "1d", "15m", "30s", "r2m"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		fps, err := engine.StoredFingerprints(context.Background(), old, seeds)
		if err == nil && len(fps) == len(old.Processors) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the group did not record its fingerprints within 60s (%d recorded, err %v)", len(fps), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := realMain(context.Background(), []string{"plan", "-t", "testdata/plan/new.yaml", "-brokers", seeds[0]}, &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	golden(t, "against_broker.golden", strings.ReplaceAll(out.String(), seeds[0], "BROKER"))
	// Rules against the broker: lateness and max_idle are recorded, and
	// keep the state.
	out.Reset()
	if code := realMain(context.Background(), []string{"plan", "-t", "testdata/plan/rules.yaml", "-brokers", seeds[0]}, &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	golden(t, "rules_against_broker.golden", strings.ReplaceAll(out.String(), seeds[0], "BROKER"))
}

// kandle plan -check, the chart's pre-upgrade gate: it fails when a
// processor would rebuild its state and passes when nothing changes.
func TestPlanCheck(t *testing.T) {
	var out, errb bytes.Buffer
	code := realMain(context.Background(), []string{"plan", "-check", "-t", "testdata/plan/new.yaml", "--against", "testdata/plan/old.yaml"}, &out, &errb)
	if code == 0 || !strings.Contains(errb.String(), "would have to rebuild its state") {
		t.Fatalf("plan -check of a rebuilding change: exit %d, stderr %q; want a failure naming the processor", code, errb.String())
	}
	errb.Reset()
	if code := realMain(context.Background(), []string{"plan", "-check", "-t", "testdata/plan/old.yaml", "--against", "testdata/plan/old.yaml"}, &out, &errb); code != 0 {
		t.Fatalf("plan -check of an unchanged topology: exit %d\n%s", code, errb.String())
	}
}
