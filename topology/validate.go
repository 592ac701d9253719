package topology

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/topology/spec"
)

// checker collects semantic problems. A problem at a position that already
// has one about the same key (say, a value of the wrong type) is dropped:
// one cause, one message.
type checker struct {
	t     *Topology
	ps    Problems
	taken map[[2]int][]string // position → paths of problems there
}

// msgPath returns the key path a message starts with ("a.b: …").
func msgPath(p spec.Problem) string {
	path, _, _ := strings.Cut(p.Msg, ":")
	return path
}

func (c *checker) at(path ...string) *yaml.Node { return spec.Find(c.t.root, path...) }

func (c *checker) report(n *yaml.Node, format string, args ...any) {
	p := spec.At(c.t.File, n, format, args...)
	path := msgPath(p)
	for _, q := range c.taken[[2]int{p.Line, p.Col}] {
		if path == q || strings.HasPrefix(path, q+".") {
			return // the value there is already wrong
		}
	}
	c.ps = append(c.ps, p)
}

// validate adds to ps (the decoder's problems) what tags cannot check.
func (t *Topology) validate(ps Problems) Problems {
	c := &checker{t: t, ps: ps, taken: map[[2]int][]string{}}
	for _, p := range ps {
		pos := [2]int{p.Line, p.Col}
		c.taken[pos] = append(c.taken[pos], msgPath(p))
	}
	c.name()
	c.brokers()
	c.kafka()
	c.sources()
	c.processors()
	c.rollups()
	c.topics()
	c.sinks()
	c.serve()
	return c.ps
}

var legalName = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

func (c *checker) name() {
	t := c.t
	if spec.Value(t.root, "name") == nil {
		return // missing: reported by the decoder
	}
	if !legalName.MatchString(t.Name) {
		c.report(c.at("name"), "name: %q must be letters, digits, '.', '_' or '-' (it prefixes topic and group names)", t.Name)
	}
}

func (c *checker) brokers() {
	b := c.t.Brokers
	n := spec.Value(c.t.root, "brokers")
	item := func(i int) *yaml.Node {
		if n != nil && n.Kind == yaml.SequenceNode && i < len(n.Content) {
			return n.Content[i]
		}
		return c.at("brokers")
	}
	if b.Embedded() {
		return
	}
	for i, addr := range b {
		if addr == "embedded" {
			c.report(item(i), "brokers: \"embedded\" cannot be mixed with broker addresses (use either embedded or a list of host:port)")
			continue
		}
		host, port, err := net.SplitHostPort(addr)
		p, perr := strconv.Atoi(port)
		switch {
		case strings.Contains(addr, ","):
			c.report(item(i), "brokers: %q holds several addresses; write them as a list: [%s]", addr, strings.ReplaceAll(addr, ",", ", "))
		case err != nil || host == "" || perr != nil || p < 1 || p > 65535:
			c.report(item(i), "brokers: %q is not host:port (e.g. localhost:9092), nor \"embedded\"", addr)
		}
	}
}

func (c *checker) sources() {
	t := c.t
	if n := spec.Value(t.root, "sources"); n != nil && len(t.order.sources) == 0 && n.Kind == yaml.MappingNode {
		c.report(n, "sources: define at least one source, e.g. trades: {topic: trades}")
	}
	for _, name := range t.order.sources {
		s := t.Sources[name]
		if s == nil {
			continue
		}
		path := "sources." + name
		switch s.Kind {
		case "kafka":
			if s.Topic == "" {
				c.report(c.at("sources", name), "%s: kind kafka needs a topic (add topic: %s)", path, name)
			}
			if s.Partitions < 1 {
				c.report(c.at("sources", name, "partitions"), "%s.partitions: %d is less than 1 (a topic needs at least one partition)", path, s.Partitions)
			}
		case "kinesis":
			if s.Kinesis.Stream == "" {
				c.report(c.at("sources", name, "kinesis"), "%s: kind kinesis needs kinesis.stream (add kinesis: {stream: <stream name>})", path)
			}
		}
		if s.MaxRecordBytes < 1 {
			c.report(c.at("sources", name, "max_record_bytes"), "%s.max_record_bytes: %d is less than 1", path, s.MaxRecordBytes)
		}
		for i, v := range s.Fields.Values {
			if v == "" || v == s.Fields.Key || v == s.Fields.Time || slices.Contains(s.Fields.Values[:i], v) {
				c.report(c.at("sources", name, "fields", "values"), "%s.fields.values[%d]: %q must name a metric field other than the key, the time and the other values", path, i, v)
			}
		}
		if len(s.Fields.Values) > 0 && s.Fields.Side+s.Fields.BuyerMaker != "" {
			c.report(c.at("sources", name, "fields", "values"), "%s.fields: side and buyer_maker apply to trades, not to multi-metric readings (values); remove them", path)
		}
		if s.Fields.Side != "" && s.Fields.BuyerMaker != "" {
			c.report(c.at("sources", name, "fields", "buyer_maker"), "%s.fields: side (%q) and buyer_maker (%q) are both set; map the aggressor side from one of them", path, s.Fields.Side, s.Fields.BuyerMaker)
		}
		if s.Fields.Action != "" && len(s.Fields.Values) > 0 {
			c.report(c.at("sources", name, "fields", "action"), "%s.fields.action: cancels and corrections apply to trades, not to multi-metric readings (values); remove it", path)
		} else if s.Fields.Action != "" && s.Fields.ID == "" {
			c.report(c.at("sources", name, "fields", "action"), "%s.fields.action: a cancel or correction names the trade it takes back by its id, and fields.id is empty; map the trade id (e.g. id: trade_id)", path)
		}
		for _, f := range []struct{ key, val string }{{"key", s.Fields.Key}, {"time", s.Fields.Time}, {"price", s.Fields.Price}} {
			if f.val == "" {
				c.report(c.at("sources", name, "fields", f.key), "%s.fields.%s: must name a record field (only qty and id may be empty)", path, f.key)
			}
		}
	}
}

// processors resolves zones and timeframes and checks each processor's input.
func (c *checker) processors() {
	t := c.t
	if n := spec.Value(t.root, "processors"); n != nil && len(t.order.processors) == 0 && n.Kind == yaml.MappingNode {
		c.report(n, "processors: define at least one processor, e.g. 1m: {kind: candles, from: trades, timeframe: 1m}")
	}
	for _, name := range t.order.processors {
		p := t.Processors[name]
		if p == nil {
			continue
		}
		path := "processors." + name
		loc, err := time.LoadLocation(p.Zone)
		if p.Zone == "Local" {
			err = errors.New("Local depends on the machine")
		}
		if err != nil {
			c.report(c.at("processors", name, "zone"), "%s.zone: unknown zone %q (use an IANA name such as UTC, Europe/Berlin or Asia/Seoul)", path, p.Zone)
			loc = time.UTC
		}
		p.loc = loc
		kind, known := t.KindOf(p)
		var facts KindFacts
		if known {
			facts = kind.Facts()
		}
		if p.Timeframe != "" && (facts.Timeframe || !known) {
			tf, err := candle.ParseTimeframe(p.Timeframe, loc)
			if err != nil {
				c.report(c.at("processors", name, "timeframe"), "%s.timeframe: %v", path, err)
			} else {
				p.tf = tf
			}
		}
		if known && facts.Timeframe && p.Timeframe == "" {
			c.report(c.at("processors", name), "%s: kind %s needs a timeframe (add timeframe: 1m)", path, p.Kind)
		}
		if known && !facts.Timeframe && p.Timeframe != "" {
			c.report(c.at("processors", name, "timeframe"), "%s.timeframe: kind %s has no windows (remove timeframe)", path, p.Kind)
		}
		if known {
			kind.Validate(&ProcessorCheck{c: c, name: name}, p)
		}
		if known && p.ReviseWithin != 0 && facts.Name != "candles" {
			c.reviseElsewhere(name, p, facts)
		}
		if !facts.Levels && len(p.Levels)+len(p.Carry) > 0 {
			c.report(c.at("processors", name, "levels"), "%s: levels and carry belong to kind silence, not %s", path, p.Kind)
		}
		if p.Output.Partitions < 1 {
			c.report(c.at("processors", name, "output", "partitions"), "%s.output.partitions: %d is less than 1 (a topic needs at least one partition)", path, p.Output.Partitions)
		}
		if p.From == "" || !known {
			continue // missing or unknown: reported by the decoder
		}
		from := c.at("processors", name, "from")
		_, isSource := t.Sources[p.From]
		up, isProc := t.Processors[p.From]
		switch {
		case !facts.FromProcessor:
			switch {
			case isSource:
			case isProc:
				c.report(from, "%s.from: %q is a processor, but kind %s reads records from a source (use kind rollup to build from %s's candles)", path, p.From, p.Kind, p.From)
			default:
				c.report(from, "%s.from: no source named %q%s", path, p.From, c.suggest(p.From, t.order.sources, "sources"))
			}
		default:
			switch {
			case isProc:
				if uk, ok := t.KindOf(up); ok && !uk.Facts().Candles {
					c.report(from, "%s.from: %q is of kind %s, whose output holds events, not candles", path, p.From, up.Kind)
				}
			case isSource:
				c.report(from, "%s.from: %q is a source, but kind %s reads another processor's candles (use kind candles to aggregate its trades)", path, p.From, p.Kind)
			default:
				c.report(from, "%s.from: no processor named %q%s", path, p.From, c.suggest(p.From, t.order.processors, "processors"))
			}
		}
	}
	if dl := t.DeadLetter; dl.Partitions < 1 {
		c.report(c.at("dead_letter", "partitions"), "dead_letter.partitions: %d is less than 1 (a topic needs at least one partition)", dl.Partitions)
	}
}

// reviseElsewhere reports revise_within on a processor that is not of kind
// candles: a rollup inherits the horizon of the bottom of its chain.
func (c *checker) reviseElsewhere(name string, p *Processor, facts KindFacts) {
	path := "processors." + name + ".revise_within"
	if !facts.FromProcessor {
		c.report(c.at("processors", name, "revise_within"), "%s: kind %s has no windows to revise (remove revise_within)", path, p.Kind)
		return
	}
	if root, rp := c.t.chainRoot(p); rp != nil && root != "" {
		c.report(c.at("processors", name, "revise_within"), "%s: a rollup revises its windows with the horizon of the candles processor at the bottom of its chain; set revise_within on processors.%s and remove it here", path, root)
		return
	}
	c.report(c.at("processors", name, "revise_within"), "%s: a rollup revises its windows with the horizon of the candles processor at the bottom of its chain; set revise_within there and remove it here", path)
}

// suggest returns " (did you mean x?)" or a list of the names that exist.
func (c *checker) suggest(word string, names []string, what string) string {
	if s := spec.DidYouMean(word, names); s != "" {
		return s
	}
	if len(names) == 0 {
		return fmt.Sprintf(" (no %s are defined)", what)
	}
	return fmt.Sprintf(" (%s: %s)", what, joinNames(names))
}

// upstream returns the processor a rollup reads, or nil.
func (t *Topology) upstream(p *Processor) *Processor {
	if p == nil {
		return nil
	}
	if k, ok := t.KindOf(p); !ok || !k.Facts().FromProcessor {
		return nil
	}
	return t.Processors[p.From]
}

// rollups reports cycles and chains whose windows do not nest.
func (c *checker) rollups() {
	t := c.t
	inCycle := map[string]bool{}
	for _, name := range t.order.processors {
		var walk []string
		pos := map[string]int{}
		for cur := name; ; {
			if i, seen := pos[cur]; seen {
				cycle := walk[i:]
				if !inCycle[cycle[0]] {
					c.reportCycle(cycle)
				}
				for _, n := range cycle {
					inCycle[n] = true
				}
				break
			}
			p := t.Processors[cur]
			if t.upstream(p) == nil || inCycle[cur] {
				break
			}
			pos[cur] = len(walk)
			walk = append(walk, cur)
			cur = p.From
		}
	}
	for _, name := range t.order.processors {
		p := t.Processors[name]
		up := t.upstream(p)
		if up == nil || inCycle[name] || p.tf.N == 0 || up.tf.N == 0 {
			continue
		}
		if err := candle.Nests(up.tf, p.tf); err != nil {
			c.report(c.at("processors", name, "timeframe"), "processors.%s.timeframe: %v; %s", name, err, nestHint(up.tf, p.tf))
		}
	}
}

// reportCycle reports a rollup cycle once, at the member first in the file.
func (c *checker) reportCycle(cycle []string) {
	idx := func(n string) int {
		for i, x := range c.t.order.processors {
			if x == n {
				return i
			}
		}
		return -1
	}
	first := 0
	for i, n := range cycle {
		if idx(n) < idx(cycle[first]) {
			first = i
		}
	}
	cycle = append(cycle[first:len(cycle):len(cycle)], cycle[:first]...)
	var steps []string
	for _, n := range cycle {
		steps = append(steps, n+" from "+c.t.Processors[n].From)
	}
	c.report(c.at("processors", cycle[0], "from"), "processors.%s.from: rollups form a cycle (%s); every chain must start at a processor of kind candles",
		cycle[0], strings.Join(steps, ", "))
}

// nestHint says how to fix a rollup whose windows do not nest.
func nestHint(sub, sup candle.Timeframe) string {
	zone := func(tf candle.Timeframe) string {
		if tf.Loc == nil {
			return "UTC"
		}
		return tf.Loc.String()
	}
	switch {
	case sup.Unit >= candle.Day && sub.Unit >= candle.Day && zone(sub) != zone(sup):
		return fmt.Sprintf("give both processors the same zone (%s or %s)", zone(sub), zone(sup))
	case sup.Unit == candle.Week || sup.Unit == candle.Month:
		return fmt.Sprintf("build %s from a 1d processor in zone %s", sup, zone(sup))
	case sup.Unit == candle.Day && sup.Loc != nil:
		return fmt.Sprintf("build %s from a timeframe that divides the day in %s (e.g. 1h)", sup, zone(sup))
	}
	return fmt.Sprintf("build %s from a timeframe that divides it exactly", sup)
}

var legalTopic = regexp.MustCompile(`^[A-Za-z0-9._-]{1,249}$`)

// topics checks that every topic kandle writes is legal, written by one
// writer only, and never one it reads.
func (c *checker) topics() {
	t := c.t
	sourceTopic := map[string]string{}
	for _, name := range t.order.sources {
		if s := t.Sources[name]; s != nil && s.Kind == "kafka" && s.Topic != "" {
			if !legalTopic.MatchString(s.Topic) {
				c.report(c.at("sources", name, "topic"), "sources.%s.topic: %q is not a legal Kafka topic name (use letters, digits, '.', '_' and '-')", name, s.Topic)
			}
			if _, dup := sourceTopic[s.Topic]; !dup {
				sourceTopic[s.Topic] = name
			}
		}
	}
	writer := map[string]string{}
	check := func(path, topic string, node *yaml.Node, set bool) {
		if !legalTopic.MatchString(topic) {
			switch {
			case set:
				c.report(node, "%s.topic: %q is not a legal Kafka topic name (use letters, digits, '.', '_' and '-')", path, topic)
			case legalName.MatchString(t.Name): // else the name is reported already
				c.report(node, "%s.topic: the default topic %q is not a legal Kafka topic name (set topic, or rename to letters, digits, '.', '_' and '-')", path, topic)
			}
			return
		}
		if src, ok := sourceTopic[topic]; ok {
			c.report(node, "%s.topic: %q is the topic of source %s; kandle would read its own output (choose another topic)", path, topic, src)
			return
		}
		if w, ok := writer[topic]; ok {
			c.report(node, "%s.topic: %q is already written by %s (give each output its own topic)", path, topic, w)
			return
		}
		writer[topic] = path
	}
	isSet := func(path ...string) bool {
		return spec.Value(spec.Find(c.t.root, path[:len(path)-1]...), path[len(path)-1]) != nil
	}
	check("dead_letter", t.DeadLetter.Topic, c.at("dead_letter", "topic"), isSet("dead_letter", "topic"))
	for _, name := range t.order.processors {
		if p := t.Processors[name]; p != nil {
			check("processors."+name+".output", p.Output.Topic, c.at("processors", name, "output", "topic"),
				isSet("processors", name, "output", "topic"))
		}
	}
}

// sinks checks that each sink reads processors or exactly one source.
func (c *checker) sinks() {
	t := c.t
	for _, name := range t.order.sinks {
		s := t.Sinks[name]
		if s == nil {
			continue
		}
		path := "sinks." + name + ".from"
		n := spec.Value(s.Node, "from")
		if n == nil {
			continue // missing: reported by the decoder
		}
		item := func(i int) *yaml.Node {
			if n.Kind == yaml.SequenceNode && i < len(n.Content) {
				return n.Content[i]
			}
			return n
		}
		if len(s.From) == 0 {
			c.report(n, "%s: name at least one processor, or one source", path)
			continue
		}
		var srcs, procs []string
		for i, f := range s.From {
			_, isSrc := t.Sources[f]
			_, isProc := t.Processors[f]
			switch {
			case isProc:
				procs = append(procs, f)
			case isSrc:
				srcs = append(srcs, f)
			default:
				all := append(append([]string{}, t.order.processors...), t.order.sources...)
				c.report(item(i), "%s: no processor or source named %q%s", path, f, c.suggest(f, all, "processors and sources"))
			}
		}
		switch {
		case len(srcs) > 0 && len(procs) > 0:
			c.report(n, "%s: mixes source %s with processors %s; a sink receives candles of processors or trades of one source (split it into two sinks)",
				path, joinNames(srcs), joinNames(procs))
		case len(srcs) > 1:
			c.report(n, "%s: names several sources (%s); a sink receives the trades of one source (use one sink per source)", path, joinNames(srcs))
		}
	}
}

func joinNames(names []string) string { return strings.Join(names, ", ") }
