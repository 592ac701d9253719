package topology

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/topology/spec"
)

// Stage is one processor with its input, as the engine runs it: the
// topology compiled once, so that the engine builds its stages from Stages
// alone.
type Stage struct {
	Name      string
	Processor *Processor
	// Input is the source name (kind candles) or the upstream processor
	// name (kind rollup).
	Input    string
	Source   *Source    // kind candles: the source whose trades are read
	Upstream *Processor // kind rollup: the processor whose output topic is read
	// Kind is the processor's registered kind (nil: unknown, which Parse
	// never returns), Facts what it declares.
	Kind  ProcessorKind
	Facts KindFacts
	// Timeframe is the processor's timeframe in its zone (zero when the
	// kind has none).
	Timeframe candle.Timeframe
	// ReviseWithin is the revision horizon that applies to the processor:
	// its own (kind candles), or that of the candles processor at the
	// bottom of its chain (kind rollup). 0: no revisions.
	ReviseWithin time.Duration
}

// Stages returns the processors in dependency order: every rollup after the
// processor it reads. Ties keep file order.
func (t *Topology) Stages() []Stage {
	names := t.processorNames()
	done := map[string]bool{}
	var out []Stage
	var visit func(name string, depth int)
	visit = func(name string, depth int) {
		p := t.Processors[name]
		if p == nil || done[name] || depth > len(names) { // depth guards a cycle in an unvalidated topology
			return
		}
		if up := t.upstream(p); up != nil {
			visit(p.From, depth+1)
		}
		done[name] = true
		st := Stage{Name: name, Processor: p, Input: p.From, Timeframe: t.TimeframeOf(p), ReviseWithin: t.ReviseWithin(p)}
		if k, ok := t.KindOf(p); ok {
			st.Kind, st.Facts = k, k.Facts()
		}
		if st.Facts.FromProcessor {
			st.Upstream = t.Processors[p.From]
		} else {
			st.Source = t.Sources[p.From]
		}
		out = append(out, st)
	}
	for _, n := range names {
		visit(n, 0)
	}
	return out
}

// processorNames returns processor names in file order (sorted when the
// topology was built in code rather than parsed).
func (t *Topology) processorNames() []string {
	if len(t.order.processors) == len(t.Processors) {
		return t.order.processors
	}
	return slices.Sorted(maps.Keys(t.Processors))
}

// Location returns the zone of p's day, week and month boundaries (UTC when
// unset or unknown).
func (t *Topology) Location(p *Processor) *time.Location {
	if p.loc != nil {
		return p.loc
	}
	if loc, err := time.LoadLocation(p.Zone); err == nil {
		return loc
	}
	return time.UTC
}

// TimeframeOf returns p's timeframe with its zone. The zero Timeframe means
// p's timeframe is invalid (Parse never returns such a topology).
func (t *Topology) TimeframeOf(p *Processor) candle.Timeframe {
	if p.tf.N > 0 {
		return p.tf
	}
	tf, _ := candle.ParseTimeframe(p.Timeframe, t.Location(p))
	return tf
}

// SourceOf returns the source at the root of p's chain (following rollups
// upstream) and its name. Its Fields are the decoder config of the chain.
func (t *Topology) SourceOf(p *Processor) (string, *Source) {
	for range len(t.Processors) + 1 {
		if p == nil {
			return "", nil
		}
		if k, ok := t.KindOf(p); !ok || !k.Facts().FromProcessor {
			return p.From, t.Sources[p.From]
		}
		p = t.Processors[p.From]
	}
	return "", nil // a cycle: Parse rejects these
}

// ReferenceMarkdown renders docs/reference.md: every key of a topology file,
// then a paragraph for each registered processor kind that is not built in,
// then, for each registered sink kind (sorted), the keys of its config.
// With the zero Registry only the topology part is rendered, which is
// therefore always a prefix of the full reference.
func ReferenceMarkdown(reg Registry) string {
	var b strings.Builder
	b.WriteString("# Topology reference\n\n")
	b.WriteString("<!-- Generated from the tags of topology/model.go and the registered sink configs; do not edit. -->\n\n")
	b.WriteString("A topology file is YAML. Unknown keys are errors. Durations are written like 2s, 500ms, 1m or 24h.\n\n")
	b.WriteString(spec.Markdown("Topology file", &Topology{}))
	for _, name := range reg.processorKinds()[len(builtinKinds()):] {
		b.WriteString("## Processor kind `" + name + "`\n\n")
		if doc := reg.Processors[name].Facts().Doc; doc != "" {
			b.WriteString(doc + "\n\n")
		}
	}
	for _, name := range reg.kinds() {
		k := reg.Sinks[name]
		if k.New == nil {
			continue
		}
		md := spec.Markdown("Sink kind `"+name+"`", k.New())
		head, rest, _ := strings.Cut(md, "\n\n")
		b.WriteString(head + "\n\n")
		if k.Doc != "" {
			b.WriteString(k.Doc + "\n\n")
		}
		b.WriteString("Besides `kind` and `from`, a sink of this kind takes these keys.\n\n")
		b.WriteString(rest)
	}
	return b.String()
}
