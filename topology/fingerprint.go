package topology

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kandle/kandle/candle"
)

// A Fingerprint lists what the meaning of a processor's state depends on:
// the settings under which its windows, dedupe ids and gap-fill runs were
// built. State written under one fingerprint must never be carried on
// under another, or the candles of one run would mix two definitions.
//
// For a candles processor that is its input (source kind and topic or
// stream), the record fields it decodes, its timeframe (and zone, for day,
// week and month windows), dedupe and gap_fill. For a rollup it is its
// timeframe (and zone), its input topic and, under "from.", the whole
// fingerprint of the processor it reads: a rollup's state is only as valid
// as the candles it was built from.
//
// A candles processor's own fingerprint (not the "from." copy in its
// rollups', and not a rollup's, which passes on the marks it gets) also
// lists, as quiet_marks, the distinct timeframes of every rollup built from
// its candles, directly or through other rollups: when a key's run of
// candles ends, the processor writes quiet marks at those timeframes'
// boundaries so that the rollups close the key's last windows, and its
// quiet keys wait for them. Adding a timeframe there is incompatible: the
// keys that went quiet before were marked only for the old timeframes, so a
// new rollup reading the processor's output from its start would never
// close their last windows (a replay would). Removing one is compatible (a
// mark that no rollup needs closes nothing early; see CompatibleChanges),
// as is another rollup of a timeframe already listed.
//
// It also lists a candles processor's rules, lateness and max_idle: they
// decide what happens from now on, not what the stored state means, so a
// change is compatible (CompatibleChanges, with Why). The state stores
// facts: the max event time and the watermark (which never goes back, so a
// longer lateness holds the watermark still until event time catches up,
// and never reopens an emitted window), a key's open windows with their
// dedupe ids, its last trade time. They are recorded so that `kandle plan`
// can show a change against the brokers.
//
// The revision horizon (revise_within) is a rule too, listed only when set
// so that a topology without revisions keeps its fingerprint: a candles
// processor lists its own, a rollup the one it inherits from the bottom of
// its chain. It decides which windows keep their trades from now on and
// whether late trades become revisions or dead letters, not what the
// candles already emitted mean; ReviseWhy says what turning it on,
// changing it or turning it off does.
//
// For a silence processor it is its input, key and time fields and the
// names of its levels in order (their delays and actions may change). A
// registered kind lists its own, after the kind (ProcessorKind.Fingerprint).
//
// Everything else is compatible: idle_timeout and max_future (they decide
// when a live partition moves on and which records are too far ahead, not
// what a window holds), the output topic, the symbols whitelist,
// max_record_bytes, key_check, a silence processor's carry and
// retire_field, a rollup's fuse (where it runs, not what its state means),
// sinks and commit settings. Changing them takes effect from the next
// record; the state stays valid.
type Fingerprint struct {
	Processor string
	Fields    []FingerprintField
	// Legacy are settings that state entries written by a kandle from
	// before fingerprint version 2 depend on: the lateness, under which
	// their watermark (not stored then) is max event time − lateness. It is
	// taken from a version 1 record and carried on in every record written
	// after it (see Carry), since such entries stay until their partition
	// writes its entry again.
	Legacy []FingerprintField
}

// FingerprintField is one setting of a Fingerprint, in canonical form (so
// 60s and 1m, or 120s and 2m0s, are the same).
type FingerprintField struct {
	Name, Value string
}

// FieldChange is one setting that differs between two fingerprints.
type FieldChange struct {
	Name, Old, New string
	// Why says, for a compatible change of a rule, why the state stays
	// valid (see RuleWhy).
	Why string
}

// RuleWhy says why changing setting name keeps a processor's state, for
// the rules: the settings that decide what a processor does from now on,
// not what its stored state means (lateness, max_idle, idle_timeout,
// max_future). It is "" for any other setting.
func RuleWhy(name string) string {
	switch name {
	case "lateness":
		return "decides which trades are late from now on; the stored watermark never goes back"
	case "max_idle":
		return "decides where runs of gap candles end from now on; ended runs stay ended"
	case "idle_timeout":
		return "decides when an idle live partition follows the clock from now on"
	case "max_future":
		return "decides which records are too far ahead of the clock from now on"
	case ReviseWithinField:
		return "decides from now on how long closed windows keep their trades for revisions"
	}
	return ""
}

// ReviseWithinField is the fingerprint field of the revision horizon of a
// candles processor, and of the one a rollup inherits from the bottom of
// its chain. It is listed only when set, so that a topology without
// revisions keeps its fingerprint.
const ReviseWithinField = "revise_within"

// ReviseWhy says, in words, what changing the revision horizon from old to
// new (canonical durations, "" for off) does to a running processor: its
// state is kept, and what it keeps and emits changes from now on.
func ReviseWhy(old, new string) string {
	switch {
	case old == "" && new == "":
		return ""
	case old == "":
		return "revisions on: windows that close from now on keep their trades in state for " + new +
			"; a late trade, cancel or correction inside that horizon re-emits its window on the output topic with rev raised by one" +
			" (and every rollup above re-emits the windows whose values change) instead of a late dead letter; trades older than it stay dead letters (late);" +
			" candle records are keyed symbol@open_time from now on (same partitions; consumers that read the symbol from the record key must read it from the value)"
	case new == "":
		return "revisions off: the kept windows are dropped from state; late trades are dead-lettered (late) again and no candle is emitted with a rev above 0;" +
			" candle records are keyed by the bare symbol again"
	}
	return "windows that close from now on keep their trades for " + new + " instead of " + old +
		"; late trades inside it become revisions (rev raised by one), older ones dead letters (late)"
}

// reviseWithin adds the revision horizon that applies to p, when set.
func (f *FingerprintFields) reviseWithin(p *Processor) {
	if h := f.t.ReviseWithin(p); h > 0 {
		f.Add(ReviseWithinField, canonicalDuration(h))
	}
}

// rule returns the rule a fingerprint field name (maybe under "from.")
// names, or "".
func rule(name string) string {
	for strings.HasPrefix(name, "from.") {
		name = name[len("from."):]
	}
	if RuleWhy(name) != "" {
		return name
	}
	return ""
}

// String is "timeframe 5m → 3m" ("(none)" for a setting one side lacks).
func (c FieldChange) String() string {
	o, n := c.Old, c.New
	if o == "" {
		o = "(none)"
	}
	if n == "" {
		n = "(none)"
	}
	return c.Name + " " + o + " → " + n
}

// fingerprintVersion 2: lateness and max_idle are rules (compatible), a
// rollup's "from." copy leaves them out, the aggregator stores its
// watermark, and Legacy carries version 1's lateness. Version 1 records are
// read (DecodeFingerprint).
const fingerprintVersion = 2

type fingerprintJSON struct {
	V         int         `json:"v"`
	Processor string      `json:"processor"`
	Fields    [][2]string `json:"fields"`
	Legacy    [][2]string `json:"legacy,omitempty"`
}

func pairs(fs []FingerprintField) [][2]string {
	out := make([][2]string, len(fs))
	for i, fl := range fs {
		out[i] = [2]string{fl.Name, fl.Value}
	}
	return out
}

func unpairs(ps [][2]string) []FingerprintField {
	var out []FingerprintField
	for _, p := range ps {
		out = append(out, FingerprintField{Name: p[0], Value: p[1]})
	}
	return out
}

// Encode returns the fingerprint as stored next to the state (JSON).
func (f Fingerprint) Encode() []byte {
	j := fingerprintJSON{V: fingerprintVersion, Processor: f.Processor, Fields: pairs(f.Fields)}
	if len(f.Legacy) > 0 {
		j.Legacy = pairs(f.Legacy)
	}
	b, _ := json.Marshal(j) // strings only: cannot fail
	return b
}

// DecodeFingerprint reads what Encode wrote, and version 1 records: their
// lateness and max_idle (own and under "from.") compare as rules, and their
// own lateness becomes Legacy, the lateness of the state entries written
// then.
func DecodeFingerprint(b []byte) (Fingerprint, error) {
	var j fingerprintJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return Fingerprint{}, fmt.Errorf("fingerprint: %w", err)
	}
	if j.V != fingerprintVersion && j.V != 1 {
		return Fingerprint{}, fmt.Errorf("fingerprint: version %d is not known to this kandle (it reads 1 to %d); upgrade kandle", j.V, fingerprintVersion)
	}
	f := Fingerprint{Processor: j.Processor, Fields: unpairs(j.Fields), Legacy: unpairs(j.Legacy)}
	if j.V == 1 {
		for _, fl := range f.Fields {
			if fl.Name == "lateness" {
				f.Legacy = []FingerprintField{{Name: "lateness", Value: fl.Value}}
			}
		}
	}
	return f, nil
}

// Carry returns f with the Legacy settings of old, the fingerprint recorded
// before it: record this, so that state entries written before version 2
// keep their lateness.
func (f Fingerprint) Carry(old Fingerprint) Fingerprint {
	f.Legacy = slices.Clone(old.Legacy)
	return f
}

// StateLateness returns the lateness of the state entries written by a
// kandle from before the watermark was stored (ok false when Legacy does
// not say).
func (f Fingerprint) StateLateness() (time.Duration, bool) {
	for _, fl := range f.Legacy {
		if fl.Name == "lateness" {
			d, err := time.ParseDuration(fl.Value)
			return d, err == nil
		}
	}
	return 0, false
}

// quietMarksField names the rollup timeframes a candles processor writes
// quiet marks for.
const quietMarksField = "quiet_marks"

// Changes lists the settings that differ from old to f, in f's order and
// then the settings only old has. None means the state of old is valid
// under f. Compatible differences (CompatibleChanges) are not listed.
func (f Fingerprint) Changes(old Fingerprint) []FieldChange {
	incompatible, _ := f.changes(old)
	return incompatible
}

// CompatibleChanges lists the settings that differ from old to f without
// making old's state invalid: rules (lateness, max_idle; Why says why),
// quiet_marks that lost timeframes (rollups removed), or that old did not
// record (written by a kandle from before quiet marks were part of the
// fingerprint). The fingerprint should then be recorded again (Carry), so
// that a timeframe added back later counts as new. Rules that only old
// lists under "from." (version 1 records) are not changes.
func (f Fingerprint) CompatibleChanges(old Fingerprint) []FieldChange {
	_, compatible := f.changes(old)
	return compatible
}

func (f Fingerprint) changes(old Fingerprint) (incompatible, compatible []FieldChange) {
	was := map[string]string{}
	for _, fl := range old.Fields {
		was[fl.Name] = fl.Value
	}
	seen := map[string]bool{}
	for _, fl := range f.Fields {
		seen[fl.Name] = true
		o, ok := was[fl.Name]
		if ok && o == fl.Value {
			continue
		}
		c := FieldChange{Name: fl.Name, Old: o, New: fl.Value}
		if r := rule(fl.Name); r != "" {
			c.Why = RuleWhy(r)
			if r == ReviseWithinField {
				c.Why = ReviseWhy(o, fl.Value)
			}
			compatible = append(compatible, c)
			continue
		}
		if fl.Name == quietMarksField && (!ok || subset(fl.Value, o)) {
			compatible = append(compatible, c)
			continue
		}
		incompatible = append(incompatible, c)
	}
	for _, fl := range old.Fields {
		if !seen[fl.Name] && fl.Name == ReviseWithinField {
			// Turned off (listed only when set).
			compatible = append(compatible, FieldChange{Name: fl.Name, Old: fl.Value, Why: ReviseWhy(fl.Value, "")})
			continue
		}
		if !seen[fl.Name] && rule(fl.Name) != "" {
			continue // a version 1 record's rule under "from.": no longer listed
		}
		if !seen[fl.Name] {
			incompatible = append(incompatible, FieldChange{Name: fl.Name, Old: fl.Value})
		}
	}
	return incompatible, compatible
}

// subset reports whether every item of the comma-separated list a is in b.
func subset(a, b string) bool {
	have := strings.Split(b, ",")
	for _, x := range strings.Split(a, ",") {
		if x != "" && !slices.Contains(have, x) {
			return false
		}
	}
	return true
}

// Fingerprint returns the fingerprint of processor name's state.
func (t *Topology) Fingerprint(name string) (Fingerprint, error) {
	p := t.Processors[name]
	if p == nil {
		return Fingerprint{}, fmt.Errorf("fingerprint: no processor %q", name)
	}
	fields, err := t.fingerprintFields(p, "", 0)
	if err != nil {
		return Fingerprint{}, fmt.Errorf("fingerprint of processor %s: %w", name, err)
	}
	return Fingerprint{Processor: name, Fields: fields}, nil
}

func (t *Topology) fingerprintFields(p *Processor, prefix string, depth int) ([]FingerprintField, error) {
	if depth > len(t.Processors) {
		return nil, fmt.Errorf("rollup chain loops")
	}
	kind, ok := t.KindOf(p)
	if !ok {
		return nil, fmt.Errorf("unknown kind %q", p.Kind)
	}
	f := &FingerprintFields{t: t, prefix: prefix, depth: depth}
	f.Add("kind", p.Kind)
	if err := kind.Fingerprint(f, p); err != nil {
		return nil, err
	}
	return f.out, nil
}

func errInvalidTimeframe(tf string) error   { return fmt.Errorf("invalid timeframe %q", tf) }
func errUnknownSource(name string) error    { return fmt.Errorf("reads unknown source %q", name) }
func errUnknownProcessor(name string) error { return fmt.Errorf("rolls up unknown processor %q", name) }

// quietMarks lists, comma-separated and shortest first, the distinct
// timeframes (with their zone, for days and longer) of the rollups built
// from p's candles, directly or through other rollups.
func (t *Topology) quietMarks(p *Processor) string {
	type mark struct {
		tf   candle.Timeframe
		name string
	}
	var marks []mark
	seen := map[string]bool{}
	var walk func(from *Processor, depth int)
	walk = func(from *Processor, depth int) {
		if depth > len(t.Processors) {
			return // a loop; validate reports it
		}
		for _, name := range slices.Sorted(maps.Keys(t.Processors)) {
			r := t.Processors[name]
			if t.upstream(r) != from {
				continue
			}
			tf := t.TimeframeOf(r)
			n := canonicalTimeframe(tf)
			if tf.Unit >= candle.Day && tf.Loc != nil && tf.Loc != time.UTC {
				n += " " + tf.Loc.String()
			}
			if !seen[n] {
				seen[n] = true
				marks = append(marks, mark{tf, n})
			}
			walk(r, depth+1)
		}
	}
	walk(p, 0)
	slices.SortFunc(marks, func(a, b mark) int {
		return cmp.Or(cmp.Compare(approxSeconds(a.tf), approxSeconds(b.tf)), strings.Compare(a.name, b.name))
	})
	names := make([]string, len(marks))
	for i, m := range marks {
		names[i] = m.name
	}
	return strings.Join(names, ",")
}

// inputName says which stream a source reads, for fingerprints.
func (s *Source) inputName() string {
	if s.IsKinesis() {
		return "kinesis stream " + s.Kinesis.Stream
	}
	return "kafka topic " + s.Topic
}

// canonicalTimeframe writes epoch-aligned second, minute and hour windows in
// their largest whole unit (60s → 1m, 120m → 2h): the same windows, the
// same state.
func canonicalTimeframe(tf candle.Timeframe) string {
	var secs int
	switch tf.Unit {
	case candle.Second:
		secs = tf.N
	case candle.Minute:
		secs = tf.N * 60
	case candle.Hour:
		secs = tf.N * 3600
	default:
		return tf.String()
	}
	switch {
	case secs%3600 == 0:
		return strconv.Itoa(secs/3600) + "h"
	case secs%60 == 0:
		return strconv.Itoa(secs/60) + "m"
	}
	return strconv.Itoa(secs) + "s"
}

// approxSeconds orders timeframes by length (months as 31 days).
func approxSeconds(tf candle.Timeframe) int64 {
	unit := map[candle.Unit]int64{candle.Second: 1, candle.Minute: 60, candle.Hour: 3600, candle.Day: 86400,
		candle.Week: 7 * 86400, candle.Month: 31 * 86400}[tf.Unit]
	return unit * int64(tf.N)
}

func canonicalDuration(d time.Duration) string { return d.String() }
