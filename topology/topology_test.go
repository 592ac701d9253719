package topology

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kandle/kandle/internal/testkit"
)

var update = flag.Bool("update", false, "rewrite golden files")

// fakeSink is a connector config for tests; real ones live in connectors/.
type fakeSink struct {
	Table string        `yaml:"table" required:"true" doc:"Table name."`
	Batch int           `yaml:"batch" default:"25" doc:"Items per write."`
	Flush time.Duration `yaml:"flush" default:"1s" doc:"Flush interval."`
}

func testRegistry() Registry {
	return Registry{Sinks: map[string]SinkKind{
		"fake": {
			Name: "fake",
			Doc:  "Writes nowhere.",
			New:  func() any { return &fakeSink{} },
			Validate: func(cfg any) []string {
				if c := cfg.(*fakeSink); c.Batch > 25 {
					return []string{"batch: at most 25 items per write (lower batch)"}
				}
				return nil
			},
		},
	}}
}

func root(t *testing.T) string { return testkit.RepoRoot(t) }

func load(t *testing.T, rel string, reg Registry) (*Topology, error) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return Parse(rel, data, reg)
}

func mustLoad(t *testing.T, rel string) *Topology {
	t.Helper()
	top, err := load(t, rel, testRegistry())
	if err != nil {
		t.Fatalf("%s should be valid:\n%v", rel, err)
	}
	return top
}

func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./topology -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs (run go test ./topology -update after checking the change)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// TestInvalidGolden compares every problem reported for each invalid
// fixture with its golden list.
func TestInvalidGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(root(t), "testdata/topologies/invalid/*.yaml"))
	if err != nil || len(files) < 7 {
		t.Fatalf("want the invalid fixtures, got %v (%v)", files, err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			rel := "testdata/topologies/invalid/" + name + ".yaml"
			top, err := load(t, rel, testRegistry())
			if err == nil {
				t.Fatalf("%s parsed without problems: %+v", rel, top)
			}
			var ps Problems
			if !errors.As(err, &ps) || len(ps) == 0 {
				t.Fatalf("error is %T, want Problems: %v", err, err)
			}
			for _, p := range ps {
				if p.File != rel || p.Line < 1 || p.Col < 1 {
					t.Errorf("problem without a position: %+v", p)
				}
			}
			golden(t, strings.TrimSuffix(f, ".yaml")+".golden", ps.Error()+"\n")
		})
	}
}

func TestCryptoDefaults(t *testing.T) {
	top := mustLoad(t, "testdata/topologies/crypto.yaml")
	if top.Name != "crypto" || !top.Brokers.Embedded() || top.Group != "kandle-crypto" || top.DeadLetter.Topic != "trades.dlq" {
		t.Fatalf("top-level values: %+v", top)
	}
	if top.Commit != 25*time.Millisecond || top.Metrics != "127.0.0.1:9464" || top.DeadLetter.Partitions != 3 {
		t.Fatalf("top-level defaults: commit %v metrics %q dlq %+v", top.Commit, top.Metrics, top.DeadLetter)
	}
	src := top.Sources["trades"]
	if src.Kind != "kafka" || src.Topic != "trades" || src.Partitions != 3 || src.MaxRecordBytes != 65536 || !src.KeyCheck ||
		!reflect.DeepEqual(src.Fields, Fields{Key: "symbol", Time: "ts", Price: "price", Qty: "qty", ID: "trade_id", Side: "side", Action: "action"}) {
		t.Fatalf("source: %+v", src)
	}
	p := top.Processors["1m"]
	if p.Lateness != 2*time.Second || p.IdleTimeout != 5*time.Second || p.MaxFuture != time.Second ||
		p.MaxIdle != 24*time.Hour || !p.Dedupe || !p.GapFill || p.Zone != "UTC" || p.Output.Topic != "candles.1m" {
		t.Fatalf("processor defaults: %+v", p)
	}
	var names []string
	for _, st := range top.Stages() {
		names = append(names, st.Name+"<"+st.Input)
		if (st.Source == nil) == (st.Upstream == nil) {
			t.Errorf("stage %s: want exactly one of Source and Upstream", st.Name)
		}
		if st.ReviseWithin != time.Hour {
			t.Errorf("stage %s: revision horizon %v, want the shipped 1h of 1m", st.Name, st.ReviseWithin)
		}
	}
	if got := strings.Join(names, " "); got != "1m<trades 5m<1m 15m<5m 1h<15m 4h<1h 1d<4h 1w<1d 1M<1d" {
		t.Fatalf("stages: %s", got)
	}
	if tf := top.TimeframeOf(top.Processors["1M"]); tf.String() != "1M" || tf.Loc != nil {
		t.Fatalf("1M timeframe: %+v", tf)
	}
	if name, s := top.SourceOf(top.Processors["1M"]); name != "trades" || s != src {
		t.Fatalf("SourceOf(1M) = %s %p", name, s)
	}
}

func TestDevicesDefaults(t *testing.T) {
	top := mustLoad(t, "testdata/topologies/devices.yaml")
	f := top.Sources["readings"].Fields
	if !reflect.DeepEqual(f, Fields{Key: "deviceId", Time: "timestamp", Price: "value"}) {
		t.Fatalf("fields: %+v", f)
	}
	if top.DeadLetter.Topic != "devices.dlq" || top.Processors["1h"].Output.Topic != "devices.1h" {
		t.Fatalf("default topics: %q %q", top.DeadLetter.Topic, top.Processors["1h"].Output.Topic)
	}
	if top.Processors["1m"].Dedupe {
		t.Fatal("dedupe: false ignored")
	}
	day := top.Processors["1d"]
	if loc := top.Location(day); loc.String() != "Europe/Berlin" {
		t.Fatalf("zone: %v", loc)
	}
	// 2026-03-29 is the spring-forward day in Berlin: 23 hours long.
	tf := top.TimeframeOf(day)
	open := tf.Start(time.Date(2026, 3, 29, 12, 0, 0, 0, time.UTC).UnixMilli())
	if got := time.Duration(tf.End(open)-open) * time.Millisecond; got != 23*time.Hour {
		t.Fatalf("Berlin DST day lasts %v, want 23h", got)
	}
}

func TestKinesisAndSinkDefaults(t *testing.T) {
	src := `name: k
brokers: [localhost:9092, 10.0.0.2:9093]
sources:
  s: {kind: kinesis, kinesis: {stream: trades}}
processors:
  1m: {kind: candles, from: s, timeframe: 1m}
sinks:
  out: {kind: fake, from: 1m, table: candles}
`
	top, err := Parse("k.yaml", []byte(src), testRegistry())
	if err != nil {
		t.Fatal(err)
	}
	k := top.Sources["s"].Kinesis
	if k.LeaseTable != "kandle-k-leases" || k.Region != "us-east-1" || k.LeaseTTL != 10*time.Second || k.Poll != 200*time.Millisecond {
		t.Fatalf("kinesis defaults: %+v", k)
	}
	if top.Brokers.Embedded() || len(top.Brokers) != 2 {
		t.Fatalf("brokers: %v", top.Brokers)
	}
	sink := top.Sinks["out"]
	cfg, ok := sink.Config.(*fakeSink)
	if !ok || *cfg != (fakeSink{Table: "candles", Batch: 25, Flush: time.Second}) || sink.Kind != "fake" ||
		len(sink.From) != 1 || sink.From[0] != "1m" || sink.Node == nil {
		t.Fatalf("sink: %+v config %+v", sink, sink.Config)
	}
}

func TestLoad(t *testing.T) {
	if _, err := Load(filepath.Join(root(t), "testdata/topologies/crypto.yaml"), Registry{}); err != nil {
		t.Fatal(err)
	}
	_, err := Load(filepath.Join(t.TempDir(), "missing.yaml"), Registry{})
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}

// TestReference keeps docs/reference.md and its golden in step with the
// schema: with no sink kinds the reference is exactly the golden, and the
// committed docs (which cmd/kandle regenerates with the real sink kinds)
// start with it.
func TestReference(t *testing.T) {
	md := ReferenceMarkdown(Registry{})
	golden(t, "testdata/reference.golden", md)
	docs := filepath.Join(root(t), "docs/reference.md")
	if *update {
		if b, err := os.ReadFile(docs); err != nil || !strings.HasPrefix(string(b), md) {
			if err := os.WriteFile(docs, []byte(md), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	b, err := os.ReadFile(docs)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), md) {
		t.Errorf("docs/reference.md is stale: regenerate it (kandle docs, or go test ./topology -update)")
	}
	full := ReferenceMarkdown(testRegistry())
	if !strings.HasPrefix(full, md) || !strings.Contains(full, "## Sink kind `fake`\n\nWrites nowhere.") ||
		!strings.Contains(full, "| `table` | string |  | yes | Table name. |") {
		t.Errorf("sink kinds not rendered after the topology part:\n%s", full[len(md):])
	}
}

// TestStagesBuiltInCode covers topologies the engine's tests build without
// Parse: stages still come in dependency order, zones and timeframes resolve.
func TestStagesBuiltInCode(t *testing.T) {
	top := &Topology{
		Name:    "code",
		Sources: map[string]*Source{"s": {Kind: "kafka", Topic: "s"}},
		Processors: map[string]*Processor{
			"a-day":  {Kind: "rollup", From: "b-hour", Timeframe: "1d", Zone: "Asia/Seoul"},
			"b-hour": {Kind: "rollup", From: "c-min", Timeframe: "1h"},
			"c-min":  {Kind: "candles", From: "s", Timeframe: "1m"},
		},
	}
	var names []string
	for _, st := range top.Stages() {
		names = append(names, st.Name)
	}
	if got := strings.Join(names, " "); got != "c-min b-hour a-day" {
		t.Fatalf("stages: %s", got)
	}
	day := top.Processors["a-day"]
	if tf := top.TimeframeOf(day); tf.String() != "1d" || tf.Loc == nil || tf.Loc.String() != "Asia/Seoul" {
		t.Fatalf("timeframe: %+v", tf)
	}
	if name, s := top.SourceOf(day); name != "s" || s != top.Sources["s"] {
		t.Fatalf("SourceOf: %s %v", name, s)
	}
}
