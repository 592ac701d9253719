package topology

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/kandle/kandle/candle"
)

// ProcessorKind is one kind of processor, the value of a processor's kind
// key: what parsing and validation need to know of it, and what the meaning
// of its state depends on. The kinds candles, rollup and silence are built
// in; Registry.Processors adds more, so that a new kind is registered, not
// switched on. The engine builds a registered kind's processors when its
// value also implements engine.ProcessorKind.
type ProcessorKind interface {
	// Facts says what the kind reads and writes.
	Facts() KindFacts
	// Validate reports what the kind requires of a processor beyond its
	// facts (which Parse checks itself: input, timeframe, zone, output).
	Validate(c *ProcessorCheck, p *Processor)
	// Fingerprint adds the settings of p that its state depends on, after
	// the kind (see Fingerprint).
	Fingerprint(f *FingerprintFields, p *Processor) error
}

// KindFacts describes one processor kind to parsing, validation and the
// engine: what it reads and what its output topic holds.
type KindFacts struct {
	Name string // the value of a processor's kind key
	Doc  string // one sentence for docs
	// FromProcessor: it reads another processor's candles (else a source's records).
	FromProcessor bool
	// Timeframe: it needs a timeframe.
	Timeframe bool
	// Candles: its output topic holds candles, so a rollup may read it.
	// Otherwise it holds events (processors.Event).
	Candles bool
	// Levels: it takes the keys levels and carry.
	Levels bool
}

// builtinKinds lists the built-in processor kinds, in the order of the
// kind enum of Processor.
func builtinKinds() []ProcessorKind {
	return []ProcessorKind{candlesKind{}, rollupKind{}, silenceKind{}}
}

// ProcessorKinds lists the facts of the built-in processor kinds, in the
// order of the kind enum of Processor.
func ProcessorKinds() []KindFacts {
	var out []KindFacts
	for _, k := range builtinKinds() {
		out = append(out, k.Facts())
	}
	return out
}

// kind returns the kind named name: a registered one, else a built-in one.
func (r Registry) kind(name string) (ProcessorKind, bool) {
	if k, ok := r.Processors[name]; ok && k != nil {
		return k, true
	}
	for _, k := range builtinKinds() {
		if k.Facts().Name == name {
			return k, true
		}
	}
	return nil, false
}

// processorKinds lists the names of the built-in kinds, then those of the
// registered ones (sorted).
func (r Registry) processorKinds() []string {
	var out, extra []string
	for _, k := range builtinKinds() {
		out = append(out, k.Facts().Name)
	}
	for name, k := range r.Processors {
		if _, builtin := (Registry{}).kind(name); k != nil && !builtin {
			extra = append(extra, name)
		}
	}
	slices.Sort(extra)
	return append(out, extra...)
}

// KindOf returns the kind of p: one registered with the Registry t was
// parsed with, else a built-in one (ok false for an unknown kind).
func (t *Topology) KindOf(p *Processor) (ProcessorKind, bool) {
	return t.reg.kind(p.Kind)
}

// ProcessorCheck reports the problems of one processor, each at its place
// in the file.
type ProcessorCheck struct {
	c    *checker
	name string
}

// Topology is the topology being checked (its zones and timeframes are
// resolved).
func (pc *ProcessorCheck) Topology() *Topology { return pc.c.t }

// Path is the processor's key path in messages ("processors.<name>").
func (pc *ProcessorCheck) Path() string { return "processors." + pc.name }

// At returns the YAML node of the processor's key path keys (the processor
// itself without keys; nil when absent).
func (pc *ProcessorCheck) At(keys ...string) *yaml.Node {
	return pc.c.at(append([]string{"processors", pc.name}, keys...)...)
}

// Report records a problem at node n; the message starts with the key path,
// e.g. "processors.1m.lateness: …", and says what to change.
func (pc *ProcessorCheck) Report(n *yaml.Node, format string, args ...any) {
	pc.c.report(n, format, args...)
}

// FingerprintFields collects the fields of one fingerprint: a processor's
// own, or, under "from.", those of the processor a rollup reads.
type FingerprintFields struct {
	t      *Topology
	prefix string
	depth  int
	out    []FingerprintField
}

// Topology is the topology the fingerprint is taken of.
func (f *FingerprintFields) Topology() *Topology { return f.t }

// Add adds the setting name with its canonical value.
func (f *FingerprintFields) Add(name, value string) {
	f.out = append(f.out, FingerprintField{Name: f.prefix + name, Value: value})
}

// Own reports whether these are the fields of the processor's own
// fingerprint, not of the copy under "from." in a downstream one.
func (f *FingerprintFields) Own() bool { return f.prefix == "" }

// Timeframe adds p's timeframe, canonical, and its zone for windows of a
// day or longer.
func (f *FingerprintFields) Timeframe(p *Processor) error {
	tf := f.t.TimeframeOf(p)
	if tf.N == 0 {
		return errInvalidTimeframe(p.Timeframe)
	}
	f.Add("timeframe", canonicalTimeframe(tf))
	if tf.Unit >= candle.Day {
		zone := "UTC"
		if tf.Loc != nil {
			zone = tf.Loc.String()
		}
		f.Add("zone", zone)
	}
	return nil
}

// Upstream adds, under "from.", the whole fingerprint of up, the processor
// p reads: state built from up's output is only as valid as it.
func (f *FingerprintFields) Upstream(up *Processor) error {
	fields, err := f.t.fingerprintFields(up, f.prefix+"from.", f.depth+1)
	if err != nil {
		return err
	}
	f.out = append(f.out, fields...)
	return nil
}

// Source adds the input of source src and the fields that hold the key and
// the event time, which every kind reading records decodes.
func (f *FingerprintFields) Source(src *Source) {
	f.Add("input", src.inputName())
	f.Add("fields.key", src.Fields.Key)
	f.Add("fields.time", src.Fields.Time)
}

// candlesKind aggregates a source's trades, or readings with several value
// fields (one series per metric), into candles.
type candlesKind struct{}

func (candlesKind) Facts() KindFacts {
	return KindFacts{Name: "candles", Doc: "aggregates a source's trades (or readings) into candles", Timeframe: true, Candles: true}
}

func (candlesKind) Validate(c *ProcessorCheck, p *Processor) {
	if p.MaxFuture > 0 && p.MaxFuture > p.Lateness {
		c.Report(c.At("max_future"), "%s.max_future: %s is more than lateness (%s): one record stamped max_future ahead of the clock would move the watermark past the clock and make on-time trades late; keep max_future at most lateness (defaults: 1s and 2s) or set max_future: 0s to turn the guard off", c.Path(), p.MaxFuture, p.Lateness)
	}
	// A negative horizon is refused by the decoder, as every negative
	// duration. There is no lower bound against lateness: the horizon is
	// measured from the watermark, which already trails the newest event
	// time by lateness, so any positive horizon only adds to what lateness
	// accepts (a trade counts, on time or as a revision, when its window
	// closes after max event time - lateness - revise_within); a horizon
	// shorter than lateness is still meaningful, merely small.
	if p.ReviseWithin > MaxReviseWithin {
		n := c.At("revise_within")
		c.Report(n, "%s.revise_within: %s is more than 24h: the trades of every window inside the horizon are kept in state, so a longer one grows the state (and its restores) without bound; keep it at most 24h (e.g. 1h) and correct older history with kandle replay", c.Path(), n.Value)
	}
	if src := c.Topology().Sources[p.From]; src != nil && src.Fields.Action != "" && len(src.Fields.Values) == 0 && p.ReviseWithin <= 0 {
		c.Report(c.At(), "%s: source %s maps fields.action (cancels and corrections), which needs revise_within (e.g. revise_within: 1h): only windows inside the horizon keep the trades a cancel or correction takes back", c.Path(), p.From)
	}
}

// MaxReviseWithin is the longest revision horizon a candles processor may
// set (the messages say 24h): every trade of every window inside it is
// kept in state.
const MaxReviseWithin = 24 * time.Hour

// ReviseWithin returns the revision horizon that applies to p: its own for
// a candles processor, that of the candles processor at the bottom of its
// chain for a rollup (0: no revisions).
func (t *Topology) ReviseWithin(p *Processor) time.Duration {
	_, root := t.chainRoot(p)
	if root == nil || root.Kind != "candles" || root.ReviseWithin < 0 {
		return 0
	}
	return root.ReviseWithin
}

// chainRoot returns the processor at the bottom of p's rollup chain and its
// name: p itself (name "") when it reads a source, nil for a cycle.
func (t *Topology) chainRoot(p *Processor) (string, *Processor) {
	name := ""
	for range len(t.Processors) + 1 {
		up := t.upstream(p)
		if up == nil {
			return name, p
		}
		name, p = p.From, up
	}
	return "", nil // a cycle: Parse rejects these
}

func (candlesKind) Fingerprint(f *FingerprintFields, p *Processor) error {
	if err := f.Timeframe(p); err != nil {
		return err
	}
	src := f.t.Sources[p.From]
	if src == nil {
		return errUnknownSource(p.From)
	}
	f.Source(src)
	f.Add("fields.price", src.Fields.Price)
	if len(src.Fields.Values) > 0 {
		f.Add("fields.values", strings.Join(src.Fields.Values, ","))
	}
	f.Add("fields.qty", src.Fields.Qty)
	f.Add("fields.id", src.Fields.ID)
	// Only when set, so a topology without a side keeps its fingerprint.
	if src.Fields.Side != "" {
		f.Add("fields.side", src.Fields.Side)
	}
	if src.Fields.BuyerMaker != "" {
		f.Add("fields.buyer_maker", src.Fields.BuyerMaker)
	}
	if src.Fields.Action != "" {
		f.Add("fields.action", src.Fields.Action)
	}
	f.Add("dedupe", strconv.FormatBool(p.Dedupe))
	f.Add("gap_fill", strconv.FormatBool(p.GapFill))
	if f.Own() {
		// Rules (compatible, recorded for kandle plan): a rollup's state
		// does not depend on them.
		f.Add("lateness", canonicalDuration(p.Lateness))
		f.Add("max_idle", canonicalDuration(p.MaxIdle))
		f.reviseWithin(p)
		// A rollup's state does not depend on its siblings.
		f.Add(quietMarksField, f.t.quietMarks(p))
	}
	return nil
}

// rollupKind combines the closed candles of another processor into a
// higher timeframe.
type rollupKind struct{}

func (rollupKind) Facts() KindFacts {
	return KindFacts{Name: "rollup", Doc: "combines the closed candles of another processor into a higher timeframe", FromProcessor: true, Timeframe: true, Candles: true}
}

func (rollupKind) Validate(*ProcessorCheck, *Processor) {}

func (rollupKind) Fingerprint(f *FingerprintFields, p *Processor) error {
	if err := f.Timeframe(p); err != nil {
		return err
	}
	up := f.t.Processors[p.From]
	if up == nil {
		return errUnknownProcessor(p.From)
	}
	f.Add("input", "kafka topic "+up.Output.Topic)
	if f.Own() {
		f.reviseWithin(p)
	}
	return f.Upstream(up)
}

// silenceKind emits events when a device sends nothing for the levels'
// delays, and when it reports again.
type silenceKind struct{}

func (silenceKind) Facts() KindFacts {
	return KindFacts{Name: "silence", Doc: "emits events when a device (the source's key) sends nothing for the levels' delays, and when it reports again", Levels: true}
}

func (silenceKind) Fingerprint(f *FingerprintFields, p *Processor) error {
	src := f.t.Sources[p.From]
	if src == nil {
		return errUnknownSource(p.From)
	}
	f.Source(src)
	// A device remembers how many levels of its silence fired: the names
	// in order give those counts their meaning (delays may change).
	names := make([]string, len(p.Levels))
	for i, l := range p.Levels {
		names[i] = l.Name
	}
	f.Add("levels", strings.Join(names, ","))
	return nil
}

// Validate checks the levels and carried fields of a silence processor.
func (silenceKind) Validate(c *ProcessorCheck, p *Processor) {
	path := c.Path()
	if len(p.Levels) == 0 {
		c.Report(c.At(), "%s: kind silence needs levels, e.g. levels: [{name: unreachable, after: 3d, action: status}]", path)
	}
	seen := map[string]bool{}
	for i, l := range p.Levels {
		at := c.At("levels")
		if at != nil && i < len(at.Content) {
			at = at.Content[i]
		}
		switch {
		case l.Name == "recovered":
			c.Report(at, "%s.levels[%d].name: recovered is the event of a device reporting again; choose another name", path, i)
		case seen[l.Name] && l.Name != "":
			c.Report(at, "%s.levels[%d].name: %q is listed twice (level names are event ids and must be unique)", path, i, l.Name)
		case l.After <= 0 && l.Name != "":
			c.Report(at, "%s.levels[%d].after: must be a positive duration (e.g. 3d)", path, i)
		}
		seen[l.Name] = true
	}
	for i, f := range p.Carry {
		switch f[strings.LastIndexByte(f, '.')+1:] {
		case "device", "event", "level", "action", "highest", "last_seen", "last_ingested", "due_at", "fired_at", "recovered_at", "silent_ms":
			c.Report(c.At("carry"), "%s.carry[%d]: %q would overwrite a field of the event; carry another field", path, i, f)
		}
	}
}
