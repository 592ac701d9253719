package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/topology"
)

func cmdPlan(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "plan", "-t NEW.yaml [--against OLD.yaml | -brokers ...]",
		"Shows what starting NEW would do to the state and outputs of a running topology, per processor:\n"+
			"  kept     its state was written under the same settings and carries on;\n"+
			"  rebuild  a setting its state depends on changed (timeframe, zone, dedupe, gap_fill, fields,\n"+
			"           input, anything up its rollup chain, or, for a candles processor, a rollup timeframe\n"+
			"           built from it that it never wrote quiet marks for): `kandle run` refuses to start\n"+
			"           until it is renamed (fresh state, rebuilt from the earliest retained input) or reset;\n"+
			"  new      no state yet: it starts empty and reads its input from the earliest retained record;\n"+
			"  dropped  no longer in NEW: its state and consumer group stay unused until you delete them.\n"+
			"OUTPUT says whether its candles change from then on. Rules (lateness, max_idle, idle_timeout,\n"+
			"max_future, revise_within) decide from now on and keep the state, with why; other compatible edits\n"+
			"(output topic, symbols, key_check, sinks, a rollup removed) are listed and keep it too. Turning the\n"+
			"revision horizon on, changing or turning it off shows on the candles processor and every rollup above it.\n\n"+
			"With --against OLD it compares two topology files and needs no broker. Without it, it compares NEW\n"+
			"with the fingerprints the running group recorded on the brokers (topic <name>.fingerprints).")
	top := topologyFlag(fs)
	against := fs.String("against", "", "topology file NEW replaces (default: what the brokers recorded)")
	brokers := brokersFlag(fs)
	check := fs.Bool("check", false, "exit with an error when a processor's state would have to be rebuilt (a pre-upgrade gate)")
	if err := e.parseNoArgs(fs, args); err != nil {
		return err
	}
	cur, err := loadTopology(*top)
	if err != nil {
		return reportTopology(e, err)
	}
	var old *topology.Topology
	var stored map[string]topology.Fingerprint
	what := ""
	if *against != "" {
		if old, err = loadTopology(*against); err != nil {
			return reportTopology(e, err)
		}
		what = old.File
	} else {
		seeds, err := standaloneBrokers(cur, *brokers)
		if err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if stored, err = engine.StoredFingerprints(cctx, cur, seeds); err != nil {
			return fmt.Errorf("read the recorded state fingerprints (is the broker reachable? or compare two files with --against OLD.yaml): %w", err)
		}
		what = "the state recorded on " + strings.Join(seeds, ",") + " (" + engine.FingerprintTopic(cur) + ")"
	}
	rows, err := plan(cur, old, stored)
	if err != nil {
		return err
	}
	printPlan(e.stdout, cur, what, rows, old)
	if *check {
		for _, r := range rows {
			if r.state == "rebuild" {
				return fmt.Errorf("plan -check: processor %s would have to rebuild its state; rename it or reset it before deploying this topology", r.name)
			}
		}
	}
	return nil
}

type planRow struct {
	name, state, output string
	runs                string // "stage", or "fused into <processor>"
	why                 []string
}

// plan compares cur with old (a topology file) or with stored (fingerprints
// recorded on the brokers).
func plan(cur, old *topology.Topology, stored map[string]topology.Fingerprint) ([]planRow, error) {
	before := stored
	if old != nil {
		before = map[string]topology.Fingerprint{}
		for name := range old.Processors {
			fp, err := old.Fingerprint(name)
			if err != nil {
				return nil, err
			}
			before[name] = fp
		}
	}
	fusedNow, err := engine.FusedInto(cur)
	if err != nil {
		return nil, err
	}
	var fusedBefore map[string]string
	if old != nil {
		if fusedBefore, err = engine.FusedInto(old); err != nil {
			return nil, err
		}
	}
	var rows []planRow
	for _, st := range cur.Stages() {
		name, p := st.Name, st.Processor
		fp, err := cur.Fingerprint(name)
		if err != nil {
			return nil, err
		}
		r := planRow{name: name, output: p.Output.Topic, runs: runsAs(fusedNow, name)}
		was, ok := before[name]
		switch {
		case !ok:
			r.state, r.output = "new", p.Output.Topic+" (new)"
		default:
			r.state = "kept"
			for _, c := range fp.Changes(was) {
				r.state = "rebuild"
				r.why = append(r.why, c.String())
			}
			for _, c := range fp.CompatibleChanges(was) {
				if c.Name == topology.ReviseWithinField && st.Facts.FromProcessor {
					c.Why = inheritedRevise(c)
				}
				r.why = append(r.why, compatible(c))
			}
			if r.state == "rebuild" {
				r.output = p.Output.Topic + " (candles change)"
				if onlyQuietMarks(fp.Changes(was)) {
					r.output = p.Output.Topic + " (quiet marks change)"
				}
			}
		}
		if old != nil && old.Processors[name] != nil {
			compat := compatibleChanges(old, cur, name)
			r.why = append(r.why, compat...)
			if r.state == "kept" {
				r.output = p.Output.Topic + " (same)"
				if len(r.why) > 0 {
					r.output = p.Output.Topic + " (same windows)"
				}
			}
			if op := old.Processors[name].Output.Topic; op != p.Output.Topic {
				r.output += ", was " + op
			}
			if was := runsAs(fusedBefore, name); was != r.runs {
				r.why = append(r.why, fmt.Sprintf("runs: %s → %s (kept: stop every instance, then start them with this topology; not a rolling restart)", was, r.runs))
			}
		}
		if ok && r.state == "kept" {
			r.output = revisionsOutput(r.output, fp.CompatibleChanges(was))
		}
		rows = append(rows, r)
	}
	var dropped []string
	for name := range before {
		if cur.Processors[name] == nil {
			dropped = append(dropped, name)
		}
	}
	sort.Strings(dropped)
	for _, name := range dropped {
		out := "-"
		if old != nil {
			out = old.Processors[name].Output.Topic + " (no longer written)"
		}
		rows = append(rows, planRow{name: name, state: "dropped", output: out, runs: "-",
			why: []string{"changelog " + cur.Name + "." + name + ".changelog and group " + cur.Group + "." + name + " are no longer used"}})
	}
	return rows, nil
}

// runsAs says how processor name runs: "fused into <stage>" when fused
// names it, else "stage".
func runsAs(fused map[string]string, name string) string {
	if into, ok := fused[name]; ok {
		return "fused into " + into
	}
	return "stage"
}

// onlyQuietMarks reports whether the only incompatible change is the set of
// rollup timeframes a candles processor writes quiet marks for: its candles
// stay the same, but a new rollup needs marks it never wrote.
func onlyQuietMarks(cs []topology.FieldChange) bool {
	for _, c := range cs {
		if c.Name != "quiet_marks" {
			return false
		}
	}
	return len(cs) > 0
}

// revisionsOutput adds to a kept processor's OUTPUT what a change of its
// revision horizon changes in it: its windows stay the same, and closed
// ones are emitted again with a higher rev from now on (or no longer).
func revisionsOutput(output string, cs []topology.FieldChange) string {
	for _, c := range cs {
		if c.Name != topology.ReviseWithinField {
			continue
		}
		note := "revisions within " + c.New + " from now on"
		switch {
		case c.Old == "":
			note = "revisions from now on"
		case c.New == "":
			note = "no revisions from now on"
		}
		if base, ok := strings.CutSuffix(output, ")"); ok && strings.Contains(base, " (") {
			return base + ", " + note + ")"
		}
		return output + " (" + note + ")"
	}
	return output
}

// inheritedRevise says what a change of the revision horizon a rollup
// inherits does to it (the candles processor's row says the rest).
func inheritedRevise(c topology.FieldChange) string {
	switch {
	case c.Old == "":
		return "inherited: a window whose sub-candles are revised is recomputed from their newest revisions and emitted again with rev raised by one when a value changes"
	case c.New == "":
		return "inherited: no revisions from now on"
	}
	return "inherited: revisions within " + c.New + " from now on"
}

// compatible says a change keeps the state: "lateness 2s → 5s (kept:
// why)" for a rule, else "... (compatible)".
func compatible(c topology.FieldChange) string {
	if c.Why != "" {
		return c.String() + " (kept: " + c.Why + ")"
	}
	return c.String() + " (compatible)"
}

// compatibleChanges lists the settings of processor name (and of its
// source) that changed without touching its state and are not in its
// fingerprint.
func compatibleChanges(old, cur *topology.Topology, name string) []string {
	o, n := old.Processors[name], cur.Processors[name]
	var out []string
	add := func(what string, a, b any) {
		if fa, fb := fmt.Sprint(a), fmt.Sprint(b); fa != fb {
			out = append(out, compatible(topology.FieldChange{Name: what, Old: fa, New: fb, Why: topology.RuleWhy(what)}))
		}
	}
	if k, ok := cur.KindOf(n); !ok || !k.Facts().FromProcessor { // it reads a source
		add("idle_timeout", o.IdleTimeout, n.IdleTimeout)
		add("max_future", o.MaxFuture, n.MaxFuture)
		if osrc, nsrc := old.Sources[o.From], cur.Sources[n.From]; osrc != nil && nsrc != nil {
			add("symbols", osrc.Symbols, nsrc.Symbols)
			add("max_record_bytes", osrc.MaxRecordBytes, nsrc.MaxRecordBytes)
			add("key_check", osrc.KeyCheck, nsrc.KeyCheck)
		}
	}
	add("output topic", o.Output.Topic, n.Output.Topic)
	add("output partitions", o.Output.Partitions, n.Output.Partitions)
	return out
}

func printPlan(w io.Writer, cur *topology.Topology, what string, rows []planRow, old *topology.Topology) {
	fmt.Fprintf(w, "Plan for %s against %s\n\n", cur.File, what)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROCESSOR\tSTATE\tRUNS\tOUTPUT\tWHY")
	rebuild := 0
	for _, r := range rows {
		why := "-"
		if len(r.why) > 0 {
			why = r.why[0]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.name, r.state, r.runs, r.output, why)
		for _, more := range r.why[min(1, len(r.why)):] {
			fmt.Fprintf(tw, "\t\t\t\t%s\n", more)
		}
		if r.state == "rebuild" {
			rebuild++
		}
	}
	tw.Flush()
	for _, r := range rows {
		if strings.HasPrefix(r.runs, "fused") {
			fmt.Fprintln(w, "\nFused processors run in the stage of the processor they read (its transactions, fed from memory; their own")
			fmt.Fprintln(w, "state, changelog and output topic). Fusing or unfusing a processor of a running deployment keeps its state,")
			fmt.Fprintln(w, "but needs every instance stopped first (set fuse: false on a rollup to keep it a stage of its own).")
			break
		}
	}
	if old != nil {
		printSinkChanges(w, old, cur)
	}
	if rebuild == 0 {
		fmt.Fprintln(w, "\nEvery kept processor carries on with its state: `kandle run` can start with this topology.")
		return
	}
	fmt.Fprintf(w, "\n%d processor(s) need their state rebuilt; `kandle run` refuses to start with this topology until, for each:\n", rebuild)
	fmt.Fprintln(w, "  - it gets a new name and a new output topic (fresh state, built from the earliest retained input;")
	fmt.Fprintln(w, "    point rollups and sinks at it), or")
	fmt.Fprintf(w, "  - it is reset: stop every instance, delete topic %s.<processor>.changelog and group %s.<processor>.\n", cur.Name, cur.Group)
	fmt.Fprintln(w, "`kandle replay -t FILE --processors NAME --from TIME --out topics` rebuilds the candles of a past range.")
}

func printSinkChanges(w io.Writer, old, cur *topology.Topology) {
	var lines []string
	names := map[string]bool{}
	for n := range old.Sinks {
		names[n] = true
	}
	for n := range cur.Sinks {
		names[n] = true
	}
	for _, n := range slices.Sorted(func(yield func(string) bool) {
		for k := range names {
			if !yield(k) {
				return
			}
		}
	}) {
		o, c := old.Sinks[n], cur.Sinks[n]
		switch {
		case o == nil:
			lines = append(lines, fmt.Sprintf("  %s: new %s sink of %s (reads from the earliest retained candles)", n, c.Kind, strings.Join(c.From, ", ")))
		case c == nil:
			lines = append(lines, fmt.Sprintf("  %s: removed (its store keeps what it wrote)", n))
		case o.Kind != c.Kind || !slices.Equal(o.From, c.From):
			lines = append(lines, fmt.Sprintf("  %s: %s of %s → %s of %s", n, o.Kind, strings.Join(o.From, ", "), c.Kind, strings.Join(c.From, ", ")))
		}
	}
	if len(lines) > 0 {
		fmt.Fprintln(w, "\nSinks (no state; compatible):")
		for _, l := range lines {
			fmt.Fprintln(w, l)
		}
	}
}
