package topotest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/kandle/kandle/topology"
	"github.com/kandle/kandle/topology/spec"
)

// Suite is one parsed test file.
type Suite struct {
	File     string             // the test file's path
	Topology *topology.Topology // the topology under test
	Cases    []*Case
}

// Case is one test of a suite.
type Case struct {
	Name  string
	File  string // the test file's path
	Line  int    // where the test starts
	suite *Suite

	now       time.Time // zero: the future guard never fires
	feeds     []feed
	stages    []string // processors checked, in file order
	candles   map[string][]wantCandle
	events    map[string][]wantEvent // silence processors
	dlChecked bool
	dls       []wantDeadLetter
	exactly   bool
}

// feed is one input record, or (advance > 0) a step of the silence clock.
type feed struct {
	source    string
	partition int32
	offset    int64
	key       []byte // the record key (nil: none)
	value     []byte
	at        int64 // ingestion time (Unix ms); 0: the record's event time
	advance   int64
}

// farFuture is the default clock: the future guard never rejects.
var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

const deadLettersKey = "dead_letters"

// Load reads and parses the test file at path and the topology it names.
// An invalid file gives a spec.Problems error (file:line:col: message).
func Load(path string, opts ...Option) (*Suite, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read test file: %w", err)
	}
	return Parse(path, data, opts...)
}

// Parse parses a test file's contents; file names it in messages and
// locates the topology (relative paths are relative to file's directory).
func Parse(file string, data []byte, opts ...Option) (*Suite, error) {
	cfg := newConfig(opts)
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, spec.Problems{{File: file, Line: 1, Col: 1, Msg: "the test file is empty: start with topology: and tests:"}}
		}
		return nil, spec.Problems{{File: file, Line: 1, Col: 1, Msg: fmt.Sprintf("not valid YAML: %v", err)}}
	}
	p := &parser{file: file, cfg: cfg}
	s, err := p.suite(deref(&doc))
	if err != nil {
		var pe *posError
		if errors.As(err, &pe) {
			return nil, spec.Problems{spec.At(file, pe.node, "%s", pe.msg)}
		}
		return nil, err
	}
	return s, nil
}

type parser struct {
	file string
	cfg  *config
}

func (p *parser) suite(root *yaml.Node) (*Suite, error) {
	if root.Kind != yaml.MappingNode {
		return nil, errAt(root, "a test file is a mapping with topology: and tests:")
	}
	s := &Suite{File: p.file}
	var now time.Time
	var tests *yaml.Node
	var topNode *yaml.Node
	err := eachKey(root, []string{"topology", "now", "tests"}, func(k, v *yaml.Node) error {
		switch k.Value {
		case "topology":
			topNode = v
		case "now":
			var err error
			now, err = parseNow(v)
			return err
		case "tests":
			tests = v
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if topNode == nil || topNode.Value == "" {
		return nil, errAt(root, "missing topology: name the topology file under test (relative to this file)")
	}
	path := topNode.Value
	if !filepath.IsAbs(path) {
		path = filepath.Join(filepath.Dir(p.file), path)
	}
	if s.Topology, err = topology.Load(path, p.cfg.reg); err != nil {
		var ps spec.Problems
		if errors.As(err, &ps) {
			return nil, append(spec.Problems{spec.At(p.file, topNode, "topology %s is invalid (run kandle validate %s):", topNode.Value, path)}, ps...)
		}
		return nil, errAt(topNode, "topology: %v", err)
	}
	if tests == nil || tests.Kind != yaml.SequenceNode || len(tests.Content) == 0 {
		at := root
		if tests != nil {
			at = tests
		}
		return nil, errAt(at, "tests: must list at least one test (- name: ..., input: ..., expect: ...)")
	}
	seen := map[string]bool{}
	for _, tn := range tests.Content {
		c, err := p.testCase(deref(tn), s, now)
		if err != nil {
			return nil, err
		}
		if seen[c.Name] {
			return nil, errAt(tn, "a second test named %q: test names must be unique in a file", c.Name)
		}
		seen[c.Name] = true
		s.Cases = append(s.Cases, c)
	}
	return s, nil
}

func (p *parser) testCase(n *yaml.Node, s *Suite, now time.Time) (*Case, error) {
	c := &Case{File: p.file, Line: n.Line, suite: s, now: now, exactly: true, candles: map[string][]wantCandle{}, events: map[string][]wantEvent{}}
	if n.Kind != yaml.MappingNode {
		return nil, errAt(n, "a test is a mapping with name:, input: and expect:")
	}
	var input, expect *yaml.Node
	err := eachKey(n, []string{"name", "now", "input", "expect", "expect_exactly"}, func(k, v *yaml.Node) error {
		var err error
		switch k.Value {
		case "name":
			c.Name = v.Value
		case "now":
			c.now, err = parseNow(v)
		case "input":
			input = v
		case "expect":
			expect = v
		case "expect_exactly":
			if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" {
				return errAt(v, "expect_exactly must be true or false")
			}
			c.exactly = v.Value == "true" || v.Value == "True" || v.Value == "TRUE"
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if c.Name == "" {
		return nil, errAt(n, "the test has no name: add name: \"what it checks\"")
	}
	if input == nil {
		return nil, errAt(n, "test %q has no input: list records per source under input:", c.Name)
	}
	if expect == nil {
		return nil, errAt(n, "test %q has no expect: list candles per processor (and dead_letters:) under expect:", c.Name)
	}
	if err := p.inputs(c, input, s); err != nil {
		return nil, err
	}
	if err := p.expects(c, expect, s); err != nil {
		return nil, err
	}
	return c, nil
}

func (p *parser) inputs(c *Case, n *yaml.Node, s *Suite) error {
	if n.Kind != yaml.MappingNode {
		return errAt(n, "input: is a mapping from source name to partition blocks")
	}
	next := map[string]map[int32]int64{} // source → partition → next offset
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		src := k.Value
		if s.Topology.Sources[src] == nil {
			return errAt(k, "no source %q in topology %s%s", src, s.Topology.File, didYouMean(src, slices.Sorted(maps.Keys(s.Topology.Sources))))
		}
		if next[src] == nil {
			next[src] = map[int32]int64{}
		}
		if v.Kind != yaml.SequenceNode {
			return errAt(v, "input.%s: list partition blocks: - partition: 0, records: [...]", src)
		}
		for _, bn := range v.Content {
			if err := p.block(c, src, s.Topology.Sources[src].Fields.Key, deref(bn), next[src]); err != nil {
				return err
			}
		}
	}
	return nil
}

func (p *parser) block(c *Case, src, keyField string, n *yaml.Node, next map[int32]int64) error {
	if n.Kind != yaml.MappingNode {
		return errAt(n, "a partition block is a mapping: {partition: 0, records: [...]}")
	}
	var part int32
	var records *yaml.Node
	offset := int64(-1)
	var key []byte
	explicitKey := false
	var at, advance int64
	err := eachKey(n, []string{"partition", "offset", "key", "records", "at", "advance"}, func(k, v *yaml.Node) error {
		var err error
		switch k.Value {
		case "key":
			explicitKey = true
			if v.Kind != yaml.ScalarNode {
				return errAt(v, "key: is the record key of every record of the block (a string), or null for none")
			}
			if v.ShortTag() != "!!null" {
				key = []byte(v.Value)
			}
		case "at":
			at, err = parseAt(v)
			return err
		case "advance":
			advance, err = parseAt(v)
			return err
		case "partition":
			x, err := wholeNumber(v, 1<<31-1)
			part = int32(x)
			return err
		case "offset":
			var err error
			offset, err = wholeNumber(v, 1<<62)
			return err
		case "records":
			records = v
		}
		return nil
	})
	if err != nil {
		return err
	}
	if advance > 0 {
		if records != nil || at > 0 {
			return errAt(n, "an advance: step has no records and no at: (write it as its own block)")
		}
		c.feeds = append(c.feeds, feed{source: src, advance: advance})
		return nil
	}
	if records == nil || records.Kind != yaml.SequenceNode {
		return errAt(n, "the block has no records: list them under records: (or write advance: <time> to let time pass)")
	}
	if offset >= 0 {
		if offset < next[part] {
			return errAt(n, "offset %d is behind partition %d's next offset %d: offsets only grow", offset, part, next[part])
		}
		next[part] = offset
	}
	for _, rn := range records.Content {
		b, err := recordBytes(rn)
		if err != nil {
			return err
		}
		k := key
		if !explicitKey {
			k = recordKey(b, keyField)
		}
		c.feeds = append(c.feeds, feed{source: src, partition: part, offset: next[part], key: k, value: b, at: at})
		next[part]++
	}
	return nil
}

func (p *parser) expects(c *Case, n *yaml.Node, s *Suite) error {
	if n.Kind != yaml.MappingNode {
		return errAt(n, "expect: is a mapping from processor name (or dead_letters) to a list")
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		if v.Kind != yaml.SequenceNode && !(v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null") {
			return errAt(v, "expect.%s: a list (use [] for none)", k.Value)
		}
		if k.Value == deadLettersKey {
			c.dlChecked = true
			for _, e := range v.Content {
				w, err := parseWantDeadLetter(deref(e))
				if err != nil {
					return err
				}
				if w.stage != "" && s.Topology.Processors[w.stage] == nil {
					return errAt(e, "no processor %q in topology%s", w.stage, didYouMean(w.stage, slices.Sorted(maps.Keys(s.Topology.Processors))))
				}
				c.dls = append(c.dls, w)
			}
			continue
		}
		if s.Topology.Processors[k.Value] == nil {
			return errAt(k, "no processor %q in topology %s%s (or use dead_letters)", k.Value, s.Topology.File,
				didYouMean(k.Value, append(slices.Sorted(maps.Keys(s.Topology.Processors)), deadLettersKey)))
		}
		if _, dup := c.candles[k.Value]; dup {
			return errAt(k, "processor %q is listed twice", k.Value)
		}
		if _, dup := c.events[k.Value]; dup {
			return errAt(k, "processor %q is listed twice", k.Value)
		}
		c.stages = append(c.stages, k.Value)
		if kind, ok := s.Topology.KindOf(s.Topology.Processors[k.Value]); ok && !kind.Facts().Candles { // its output holds events
			ws := []wantEvent{}
			for _, e := range v.Content {
				w, err := parseWantEvent(deref(e))
				if err != nil {
					return err
				}
				ws = append(ws, w)
			}
			c.events[k.Value] = ws
			continue
		}
		ws := []wantCandle{}
		for _, e := range v.Content {
			w, err := parseWantCandle(deref(e))
			if err != nil {
				return err
			}
			ws = append(ws, w)
		}
		c.candles[k.Value] = ws
	}
	return nil
}

// eachKey calls fn for every key of mapping n, rejecting keys not in allowed.
func eachKey(n *yaml.Node, allowed []string, fn func(k, v *yaml.Node) error) error {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		ok := false
		for _, a := range allowed {
			ok = ok || a == k.Value
		}
		if !ok {
			return errAt(k, "unknown key %q%s; allowed here: %s", k.Value, didYouMean(k.Value, allowed), joinComma(allowed))
		}
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return nil
}

func parseNow(v *yaml.Node) (time.Time, error) {
	if v.Kind != yaml.ScalarNode {
		return time.Time{}, errAt(v, "now must be an RFC 3339 time or epoch milliseconds")
	}
	ms, err := parseTime(v)
	if err != nil {
		return time.Time{}, err
	}
	return time.UnixMilli(ms).UTC(), nil
}

func wholeNumber(v *yaml.Node, limit int64) (int64, error) {
	var x int64
	if _, err := fmt.Sscan(v.Value, &x); err != nil || v.ShortTag() != "!!int" || x < 0 || x > limit {
		return 0, errAt(v, "want a whole number ≥ 0, not %q", v.Value)
	}
	return x, nil
}

func didYouMean(word string, candidates []string) string { return spec.DidYouMean(word, candidates) }

func joinComma(s []string) string { return strings.Join(s, ", ") }
