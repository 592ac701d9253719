package topology

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

const fpBase = `
name: fp
brokers: embedded
sources:
  trades: {topic: trades}
processors:
  c1m: {kind: candles, from: trades, timeframe: 1m}
  c5m: {kind: rollup, from: c1m, timeframe: 5m}
  c1d: {kind: rollup, from: c5m, timeframe: 1d}
dead_letter: {topic: fp.dlq}
`

func parseFP(t *testing.T, src string) *Topology {
	t.Helper()
	top, err := Parse("fp.yaml", []byte(src), Registry{})
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// changed returns, per processor, the names of the settings whose change
// makes its old state unusable.
func changed(t *testing.T, old, cur *Topology) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for name := range cur.Processors {
		if old.Processors[name] == nil {
			continue // new: no state to keep
		}
		of, err := old.Fingerprint(name)
		if err != nil {
			t.Fatal(err)
		}
		nf, err := cur.Fingerprint(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range nf.Changes(of) {
			out[name] = append(out[name], c.Name)
		}
	}
	return out
}

// Which edits invalidate which processor's state: the settings that change
// what a window holds do, for the processor and every rollup built on it;
// the ones that only change when a live partition moves on, or where
// candles go, do not.
func TestFingerprintWhichSettingsMatter(t *testing.T) {
	base := parseFP(t, fpBase)
	for _, tc := range []struct {
		name     string
		old, new string
		want     map[string][]string
	}{
		{"timeframe", "timeframe: 1m}", "timeframe: 30s}", map[string][]string{
			"c1m": {"timeframe"}, "c5m": {"from.timeframe"}, "c1d": {"from.from.timeframe"}}},
		{"same windows written differently", "timeframe: 1m}", "timeframe: 60s}", nil},
		// Rules: they decide from now on (TestFingerprintRules).
		{"lateness", "timeframe: 1m}", "timeframe: 1m, lateness: 5s}", nil},
		{"max_idle", "timeframe: 1m}", "timeframe: 1m, max_idle: 1h}", nil},
		{"dedupe", "timeframe: 1m}", "timeframe: 1m, dedupe: false}", map[string][]string{
			"c1m": {"dedupe"}, "c5m": {"from.dedupe"}, "c1d": {"from.from.dedupe"}}},
		{"gap_fill", "timeframe: 1m}", "timeframe: 1m, gap_fill: false}", map[string][]string{
			"c1m": {"gap_fill"}, "c5m": {"from.gap_fill"}, "c1d": {"from.from.gap_fill"}}},
		{"time field", "{topic: trades}", "{topic: trades, fields: {time: T}}", map[string][]string{
			"c1m": {"fields.time"}, "c5m": {"from.fields.time"}, "c1d": {"from.from.fields.time"}}},
		{"source topic", "{topic: trades}", "{topic: trades2}", map[string][]string{
			"c1m": {"input"}, "c5m": {"from.input"}, "c1d": {"from.from.input"}}},
		// The candles processor wrote quiet marks at 5m boundaries only:
		// a 10m rollup would never close a quiet key's last window.
		{"rollup timeframe", "timeframe: 5m}", "timeframe: 10m}", map[string][]string{
			"c1m": {"quiet_marks"}, "c5m": {"timeframe"}, "c1d": {"from.timeframe"}}},
		// Marks at UTC midnights do not end Seoul days.
		{"zone of a day rollup", "timeframe: 1d}", "timeframe: 1d, zone: Asia/Seoul}", map[string][]string{
			"c1m": {"quiet_marks"}, "c1d": {"zone"}}},
		{"rollup added", "c1d: {kind: rollup, from: c5m, timeframe: 1d}", "c1d: {kind: rollup, from: c5m, timeframe: 1d}\n  c15m: {kind: rollup, from: c1m, timeframe: 15m}",
			map[string][]string{"c1m": {"quiet_marks"}}},
		{"rollup added at the end of the chain", "c1d: {kind: rollup, from: c5m, timeframe: 1d}", "c1d: {kind: rollup, from: c5m, timeframe: 1d}\n  c1w: {kind: rollup, from: c1d, timeframe: 1w}",
			map[string][]string{"c1m": {"quiet_marks"}}},
		{"another rollup of a timeframe already marked", "c1d: {kind: rollup, from: c5m, timeframe: 1d}", "c1d: {kind: rollup, from: c5m, timeframe: 1d}\n  c5b: {kind: rollup, from: c1m, timeframe: 5m}", nil},
		{"rollup removed", "\n  c1d: {kind: rollup, from: c5m, timeframe: 1d}", "", nil},
		{"zone of minute windows", "timeframe: 1m}", "timeframe: 1m, zone: Asia/Seoul}", nil},
		{"upstream output topic", "timeframe: 1m}", "timeframe: 1m, output: {topic: other}}", map[string][]string{
			"c5m": {"input"}, "c1d": {"from.input"}}},
		{"idle_timeout and max_future", "timeframe: 1m}", "timeframe: 1m, idle_timeout: 30s, max_future: 1500ms}", nil},
		{"whitelist, record size, key check", "{topic: trades}", "{topic: trades, symbols: [BTC], max_record_bytes: 100, key_check: false}", nil},
		{"leaf output topic", "timeframe: 1d}", "timeframe: 1d, output: {topic: days}}", nil},
		// A side mapping adds taker volumes to every window: a change of
		// meaning. Without one the fingerprint is what it always was.
		{"side mapped", "{topic: trades}", "{topic: trades, fields: {side: S}}", map[string][]string{
			"c1m": {"fields.side"}, "c5m": {"from.fields.side"}, "c1d": {"from.from.fields.side"}}},
		// An action field turns some records into cancels and corrections:
		// a change of meaning, and none without one.
		// (Cancels need a revision horizon: a rule, not listed here.)
		{"action mapped", "{topic: trades}\nprocessors:\n  c1m: {kind: candles, from: trades, timeframe: 1m}",
			"{topic: trades, fields: {action: A}}\nprocessors:\n  c1m: {kind: candles, from: trades, timeframe: 1m, revise_within: 1h}", map[string][]string{
				"c1m": {"fields.action"}, "c5m": {"from.fields.action"}, "c1d": {"from.from.fields.action"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(fpBase, tc.old) {
				t.Fatalf("base topology lacks %q", tc.old)
			}
			got := changed(t, base, parseFP(t, strings.Replace(fpBase, tc.old, tc.new, 1)))
			want := tc.want
			if want == nil {
				want = map[string][]string{}
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("changed settings = %v, want %v", got, want)
			}
		})
	}
}

// Every key of a processor and of its source is either part of the
// fingerprint or known to be compatible. A new key fails here until someone
// decides whether it changes the meaning of the state (add it to
// fingerprintFields) or not (add it to compatible below).
func TestFingerprintClassifiesEveryKey(t *testing.T) {
	top := parseFP(t, fpBase)
	fp, err := top.Fingerprint("c1m")
	if err != nil {
		t.Fatal(err)
	}
	inFP := map[string]bool{}
	for _, f := range fp.Fields {
		inFP[strings.TrimPrefix(f.Name, "fields.")] = true
	}
	// revise_within: listed when set, a rule (TestFingerprintReviseWithin).
	inFP["revise_within"] = true
	inFP["zone"] = true   // only for day, week and month windows
	inFP["from"] = true   // as "input" (source) or the "from." chain (rollup)
	inFP["topic"] = true  // as "input"
	inFP["values"] = true // as "fields.values" when a source lists them
	inFP["side"] = true   // as "fields.side" when a source maps it
	inFP["buyer_maker"] = true
	inFP["action"] = true // as "fields.action" when a source maps it
	inFP["stream"] = true
	compatible := map[string]string{
		"idle_timeout":      "when a live partition moves on, not what a window holds",
		"max_future":        "rejects records at the door; accepted ones mean the same",
		"output":            "where candles go; a rollup reading it sees it as its input",
		"partitions":        "creation count of the topic only",
		"symbols":           "rejects keys at the door; kept keys mean the same",
		"max_record_bytes":  "rejects records at the door",
		"key_check":         "rejects records at the door (key_mismatch); accepted ones mean the same",
		"region":            "where the stream is, not what it holds",
		"endpoint":          "where the stream is",
		"lease_table":       "Kinesis leases are hints; the changelog is the state",
		"dynamodb_endpoint": "where the lease table is",
		"lease_duration":    "lease timing",
		"poll_interval":     "poll timing",
		"enhanced_fan_out":  "how records are read, not which",
		"levels":            "silence: in the fingerprint of silence processors (names in order), not of candles",
		"carry":             "silence: fields copied into events, not state meaning",
		"retire_field":      "silence: rejects nothing; a retire deletes a device's state",
		"fuse":              "where a rollup runs (its upstream's stage or its own), not what its state means; its changelog keeps its position on its input",
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[Processor](), reflect.TypeFor[Source](), reflect.TypeFor[Fields](), reflect.TypeFor[Kinesis]()} {
		for f := range typ.Fields() {
			key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if key == "" || key == "-" || slices.Contains([]string{"fields", "kinesis"}, key) {
				continue
			}
			if !inFP[key] && compatible[key] == "" {
				t.Errorf("%s.%s (yaml %q) is neither in the state fingerprint nor known to be compatible: classify it in topology/fingerprint.go", typ.Name(), f.Name, key)
			}
		}
	}
}

// quiet_marks lists the rollup timeframes built from a candles processor,
// directly or not, once each, shortest first; removing one, or a
// fingerprint recorded before quiet marks were part of it, is a compatible
// change to record again.
func TestFingerprintQuietMarks(t *testing.T) {
	top := parseFP(t, strings.Replace(fpBase, "c1d: {kind: rollup, from: c5m, timeframe: 1d}",
		"c1d: {kind: rollup, from: c5m, timeframe: 1d, zone: Asia/Seoul}\n  c5b: {kind: rollup, from: c1m, timeframe: 300s}\n  c2h: {kind: rollup, from: c5b, timeframe: 120m}", 1))
	fp, err := top.Fingerprint("c1m")
	if err != nil {
		t.Fatal(err)
	}
	value := func(fp Fingerprint, name string) (string, bool) {
		for _, f := range fp.Fields {
			if f.Name == name {
				return f.Value, true
			}
		}
		return "", false
	}
	if v, _ := value(fp, "quiet_marks"); v != "5m,2h,1d Asia/Seoul" {
		t.Errorf("quiet_marks = %q, want \"5m,2h,1d Asia/Seoul\"", v)
	}
	// Rollups pass the marks they get on; their state does not depend on
	// which rollups read them, nor on their siblings.
	c5m, _ := top.Fingerprint("c5m")
	for _, name := range []string{"quiet_marks", "from.quiet_marks"} {
		if v, ok := value(c5m, name); ok {
			t.Errorf("rollup c5m's fingerprint has %s %q", name, v)
		}
	}

	// Removing a rollup, or a fingerprint without quiet_marks: compatible.
	fewer, legacy := fp, Fingerprint{Processor: fp.Processor}
	fewer.Fields = slices.Clone(fp.Fields)
	for i, f := range fp.Fields {
		if f.Name == "quiet_marks" {
			fewer.Fields[i].Value = "5m,1d Asia/Seoul"
		} else {
			legacy.Fields = append(legacy.Fields, f)
		}
	}
	for _, tc := range []struct {
		name     string
		cur, old Fingerprint
		compat   bool
	}{
		{"rollup removed", fewer, fp, true},
		{"every rollup removed", withQuietMarks(fp, ""), fp, true},
		{"recorded by an older kandle", fp, legacy, true},
		{"rollup added", fp, fewer, false},
		{"first rollup added", fp, withQuietMarks(fp, ""), false},
	} {
		inc, comp := tc.cur.Changes(tc.old), tc.cur.CompatibleChanges(tc.old)
		if tc.compat && (len(inc) != 0 || len(comp) != 1 || comp[0].Name != "quiet_marks") {
			t.Errorf("%s: incompatible %v, compatible %v; want one compatible quiet_marks change", tc.name, inc, comp)
		}
		if !tc.compat && (len(inc) != 1 || inc[0].Name != "quiet_marks" || len(comp) != 0) {
			t.Errorf("%s: incompatible %v, compatible %v; want one incompatible quiet_marks change", tc.name, inc, comp)
		}
	}
}

func withQuietMarks(fp Fingerprint, v string) Fingerprint {
	fp.Fields = slices.Clone(fp.Fields)
	for i, f := range fp.Fields {
		if f.Name == "quiet_marks" {
			fp.Fields[i].Value = v
		}
	}
	return fp
}

func TestFingerprintEncodeDecode(t *testing.T) {
	top := parseFP(t, strings.Replace(fpBase, "timeframe: 1d}", "timeframe: 1d, zone: Asia/Seoul}", 1))
	fp, err := top.Fingerprint("c1d")
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeFingerprint(fp.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, fp) || len(fp.Changes(back)) != 0 {
		t.Errorf("round trip changed the fingerprint:\n%+v\n%+v", fp, back)
	}
	if _, err := DecodeFingerprint([]byte(`{"v":99,"processor":"x"}`)); err == nil || !strings.Contains(err.Error(), "upgrade kandle") {
		t.Errorf("a newer version decodes without a clear error: %v", err)
	}
	c := FieldChange{Name: "timeframe", Old: "5m", New: "3m"}
	if c.String() != "timeframe 5m → 3m" {
		t.Errorf("FieldChange.String() = %q", c.String())
	}
}

// The rules lateness and max_idle are in a candles processor's own
// fingerprint (so that kandle plan shows a change against the brokers) as
// compatible changes with why; rollups do not list them. A version 1
// record, which listed them everywhere and as incompatible, reads as
// compatible, and its lateness becomes Legacy, carried on by every record
// written after it.
func TestFingerprintRules(t *testing.T) {
	base := parseFP(t, fpBase)
	cur := parseFP(t, strings.Replace(fpBase, "timeframe: 1m}", "timeframe: 1m, lateness: 5s, max_idle: 1h}", 1))
	for _, name := range []string{"c1m", "c5m", "c1d"} {
		of, _ := base.Fingerprint(name)
		nf, _ := cur.Fingerprint(name)
		var got []string
		for _, c := range nf.CompatibleChanges(of) {
			if c.Why == "" || c.Why != RuleWhy(c.Name) {
				t.Errorf("%s: compatible change %v without its why", name, c)
			}
			got = append(got, c.String())
		}
		want := []string(nil)
		if name == "c1m" {
			want = []string{"lateness 2s → 5s", "max_idle 24h0m0s → 1h0m0s"}
		}
		if !slices.Equal(got, want) || len(nf.Changes(of)) != 0 {
			t.Errorf("%s: compatible %v (want %v), incompatible %v", name, got, want, nf.Changes(of))
		}
	}
	for _, r := range []string{"lateness", "max_idle", "idle_timeout", "max_future"} {
		if RuleWhy(r) == "" {
			t.Errorf("RuleWhy(%q) is empty", r)
		}
	}

	// A version 1 record of c5m (an older kandle): rules under "from.".
	v1 := `{"v":1,"processor":"c5m","fields":[["kind","rollup"],["timeframe","5m"],["input","kafka topic fp.c1m"],` +
		`["from.kind","candles"],["from.timeframe","1m"],["from.input","kafka topic trades"],["from.fields.key","symbol"],` +
		`["from.fields.time","ts"],["from.fields.price","price"],["from.fields.qty","qty"],["from.fields.id","trade_id"],` +
		`["from.lateness","2s"],["from.max_idle","0s"],["from.dedupe","true"],["from.gap_fill","true"]]}`
	old, err := DecodeFingerprint([]byte(v1))
	if err != nil {
		t.Fatal(err)
	}
	nf, _ := cur.Fingerprint("c5m")
	if inc, comp := nf.Changes(old), nf.CompatibleChanges(old); len(inc) != 0 || len(comp) != 0 {
		t.Errorf("c5m against its version 1 record: incompatible %v, compatible %v; want none", inc, comp)
	}
	if _, ok := old.StateLateness(); ok {
		t.Errorf("a rollup's version 1 record has a state lateness: %v", old.Legacy)
	}
	// c1m's version 1 record: its lateness is the state's.
	of, _ := base.Fingerprint("c1m")
	j := fingerprintJSON{V: 1, Processor: "c1m", Fields: pairs(of.Fields)}
	b, _ := json.Marshal(j)
	old, err = DecodeFingerprint(b)
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := old.StateLateness(); !ok || d != 2*time.Second {
		t.Errorf("version 1 record of c1m: state lateness %v %v, want 2s", d, ok)
	}
	c1m, _ := cur.Fingerprint("c1m")
	rec := c1m.Carry(old)
	back, err := DecodeFingerprint(rec.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := back.StateLateness(); !ok || d != 2*time.Second || len(c1m.Changes(back)) != 0 || len(c1m.CompatibleChanges(back)) != 0 {
		t.Errorf("the record written after a version 1 one lost its state lateness or differs: %s", rec.Encode())
	}
	// Carried on again by the next record.
	if d, ok := c1m.Carry(back).StateLateness(); !ok || d != 2*time.Second {
		t.Errorf("state lateness not carried on: %v %v", d, ok)
	}
}

// The revision horizon is listed only when set, so a topology without it
// keeps its fingerprint; a candles processor lists its own and every rollup
// above it the one it inherits. Turning it on, changing it or turning it
// off is a compatible change whose why says what it changes.
func TestFingerprintReviseWithin(t *testing.T) {
	base := parseFP(t, fpBase)
	zero := parseFP(t, strings.Replace(fpBase, "timeframe: 1m}", "timeframe: 1m, revise_within: 0s}", 1))
	on := parseFP(t, strings.Replace(fpBase, "timeframe: 1m}", "timeframe: 1m, revise_within: 1h}", 1))
	longer := parseFP(t, strings.Replace(fpBase, "timeframe: 1m}", "timeframe: 1m, revise_within: 120m}", 1))
	fp := func(top *Topology, name string) Fingerprint {
		t.Helper()
		f, err := top.Fingerprint(name)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	for _, st := range on.Stages() {
		if st.ReviseWithin != time.Hour {
			t.Errorf("stage %s: ReviseWithin %v, want the 1h of c1m", st.Name, st.ReviseWithin)
		}
	}
	for _, st := range base.Stages() {
		if st.ReviseWithin != 0 {
			t.Errorf("stage %s without a horizon: ReviseWithin %v", st.Name, st.ReviseWithin)
		}
	}
	for _, name := range []string{"c1m", "c5m", "c1d"} {
		if b, z := fp(base, name).Encode(), fp(zero, name).Encode(); string(b) != string(z) {
			t.Errorf("%s: revise_within: 0s changed the fingerprint:\n%s\n%s", name, b, z)
		}
		if !slices.Contains(fp(on, name).Fields, FingerprintField{Name: ReviseWithinField, Value: "1h0m0s"}) {
			t.Errorf("%s: fingerprint with a 1h horizon does not list it: %v", name, fp(on, name).Fields)
		}
		for _, tc := range []struct {
			what      string
			from, to  *Topology
			change    string
			whyPrefix string
		}{
			{"on", base, on, "revise_within (none) → 1h0m0s", "revisions on:"},
			{"longer", on, longer, "revise_within 1h0m0s → 2h0m0s", "windows that close from now on keep their trades for 2h0m0s instead of 1h0m0s"},
			{"off", on, base, "revise_within 1h0m0s → (none)", "revisions off:"},
		} {
			of, nf := fp(tc.from, name), fp(tc.to, name)
			if inc := nf.Changes(of); len(inc) != 0 {
				t.Errorf("%s %s: incompatible %v, want the state kept", name, tc.what, inc)
			}
			comp := nf.CompatibleChanges(of)
			if len(comp) != 1 || comp[0].String() != tc.change || !strings.HasPrefix(comp[0].Why, tc.whyPrefix) {
				t.Errorf("%s %s: compatible %v, want one change %q with a why starting %q", name, tc.what, comp, tc.change, tc.whyPrefix)
			}
		}
	}
	why := ReviseWhy("", "1h0m0s")
	for _, says := range []string{"keep their trades in state", "rev raised by one", "instead of a late dead letter", "rollup"} {
		if !strings.Contains(why, says) {
			t.Errorf("turning revisions on: the why %q does not say %q", why, says)
		}
	}
}
