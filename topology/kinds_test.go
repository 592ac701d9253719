package topology

import (
	"reflect"
	"strings"
	"testing"
)

// tallyKind is a processor kind registered by a test, not built in: it
// reads a source's records and emits events (a running count per key), and
// its state depends on the source, its key field and max_idle.
type tallyKind struct{}

func (tallyKind) Facts() KindFacts {
	return KindFacts{Name: "tally", Doc: "Counts the records of each key."}
}

func (tallyKind) Validate(c *ProcessorCheck, p *Processor) {
	if p.MaxIdle <= 0 {
		c.Report(c.At("max_idle"), "%s.max_idle: kind tally needs a positive max_idle (its counts end after it)", c.Path())
	}
}

func (tallyKind) Fingerprint(f *FingerprintFields, p *Processor) error {
	src := f.Topology().Sources[p.From]
	if src == nil {
		return errUnknownSource(p.From)
	}
	f.Source(src)
	f.Add("max_idle", p.MaxIdle.String())
	return nil
}

func tallyRegistry() Registry {
	return Registry{Processors: map[string]ProcessorKind{"tally": tallyKind{}}}
}

const tallyBase = `name: t
brokers: embedded
sources:
  trades: {topic: trades}
processors:
  1m: {kind: candles, from: trades, timeframe: 1m}
`

// TestRegisteredProcessorKind: a kind registered in the Registry, with no
// edit elsewhere, is parsed, validated by the checks its facts select and
// by its own Validate, staged, and fingerprinted by its own fields.
func TestRegisteredProcessorKind(t *testing.T) {
	src := tallyBase + "  n: {kind: tally, from: trades, max_idle: 1h}\n"
	if _, err := Parse("t.yaml", []byte(src), Registry{}); err == nil ||
		!strings.Contains(err.Error(), `"tally" is not one of candles, rollup, silence`) {
		t.Fatalf("without the registration kind tally must be refused, got %v", err)
	}
	top, err := Parse("t.yaml", []byte(src), tallyRegistry())
	if err != nil {
		t.Fatalf("registered kind refused: %v", err)
	}
	k, ok := top.KindOf(top.Processors["n"])
	if !ok || k.Facts().Name != "tally" {
		t.Fatalf("KindOf = %v, %v", k, ok)
	}
	var st Stage
	for _, s := range top.Stages() {
		if s.Name == "n" {
			st = s
		}
	}
	if st.Source != top.Sources["trades"] || st.Upstream != nil {
		t.Errorf("stage n reads %+v / %+v, want source trades", st.Source, st.Upstream)
	}
	fp, err := top.Fingerprint("n")
	if err != nil {
		t.Fatal(err)
	}
	want := []FingerprintField{{"kind", "tally"}, {"input", "kafka topic trades"}, {"fields.key", "symbol"},
		{"fields.time", "ts"}, {"max_idle", "1h0m0s"}}
	if !reflect.DeepEqual(fp.Fields, want) {
		t.Errorf("fingerprint = %v, want %v", fp.Fields, want)
	}
	// The built-in kinds' fingerprints do not see the new kind.
	if fp, err := top.Fingerprint("1m"); err != nil || fp.Fields[len(fp.Fields)-1] != (FingerprintField{"quiet_marks", ""}) {
		t.Errorf("1m fingerprint = %v, %v", fp, err)
	}
}

// TestRegisteredProcessorKindInvalid: the kind's facts drive the shared
// checks (no windows, events are not candles, no levels) and its Validate
// reports at the key it names.
func TestRegisteredProcessorKindInvalid(t *testing.T) {
	for _, tc := range []struct{ procs, want string }{
		{"  n: {kind: tally, from: trades, max_idle: 0s}\n", "t.yaml:7:44: processors.n.max_idle: kind tally needs a positive max_idle"},
		{"  n: {kind: tally, from: trades, timeframe: 1m}\n", "processors.n.timeframe: kind tally has no windows"},
		{"  n: {kind: tally, from: 1m}\n", `"1m" is a processor, but kind tally reads records from a source`},
		{"  n: {kind: tally, from: trades}\n  r: {kind: rollup, from: n, timeframe: 1h}\n", `"n" is of kind tally, whose output holds events, not candles`},
		{"  n: {kind: tally, from: trades, levels: [{name: a, after: 1h}]}\n", "levels and carry belong to kind silence, not tally"},
		{"  n: {kind: talley, from: trades}\n", `"talley" is not one of candles, rollup, silence, tally (did you mean tally?)`},
	} {
		_, err := Parse("t.yaml", []byte(tallyBase+tc.procs), tallyRegistry())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", strings.TrimSpace(tc.procs), err, tc.want)
		}
	}
}

// TestKindEnumIsBuiltinKinds: the kind enum of Processor (which documents
// the key) lists exactly the built-in kinds, in order.
func TestKindEnumIsBuiltinKinds(t *testing.T) {
	f, _ := reflect.TypeFor[Processor]().FieldByName("Kind")
	var names []string
	for _, k := range ProcessorKinds() {
		names = append(names, k.Name)
	}
	if got := strings.Join(names, "|"); f.Tag.Get("enum") != got {
		t.Errorf("enum tag %q, built-in kinds %q", f.Tag.Get("enum"), got)
	}
}

// TestReferenceListsRegisteredKinds: a registered kind gets a paragraph
// after the topology part, which stays the same.
func TestReferenceListsRegisteredKinds(t *testing.T) {
	base := ReferenceMarkdown(Registry{})
	full := ReferenceMarkdown(tallyRegistry())
	if !strings.HasPrefix(full, base) || full[len(base):] != "## Processor kind `tally`\n\nCounts the records of each key.\n\n" {
		t.Errorf("reference with kind tally adds:\n%s", full[len(base):])
	}
}
