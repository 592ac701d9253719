package topology

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"

	"gopkg.in/yaml.v3"

	"github.com/kandle/kandle/topology/spec"
)

// Problems is every problem found in a topology file, sorted by position.
// Parse and Load return it as their error when a file is invalid.
type Problems = spec.Problems

// Load reads and parses the topology file at path. See Parse.
func Load(path string, reg Registry) (*Topology, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read topology: %w", err)
	}
	return Parse(path, data, reg)
}

// Parse decodes and validates a topology. file names it in messages. When
// the topology is invalid the error is a Problems listing every problem.
func Parse(file string, data []byte, reg Registry) (*Topology, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, Problems{syntaxProblem(file, err)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, Problems{{File: file, Line: max(extra.Line, 1), Col: 1,
			Msg: "a topology file holds one YAML document: remove the second --- (use one file per topology)"}}
	} else if !errors.Is(err, io.EOF) {
		return nil, Problems{syntaxProblem(file, err)}
	}
	if len(doc.Content) == 0 {
		return nil, Problems{{File: file, Line: 1, Col: 1, Msg: "the file is empty: start with name:, brokers:, sources: and processors: (see docs/reference.md)"}}
	}
	if n := expandedSize(&doc, maxExpandedNodes); n > maxExpandedNodes {
		return nil, Problems{{File: file, Line: 1, Col: 1, Msg: fmt.Sprintf(
			"the file expands to more than %d YAML nodes through aliases (*name) and merge keys (<<): "+
				"a topology needs far fewer; remove the nested aliases", maxExpandedNodes)}}
	}
	t := &Topology{File: file, root: &doc, reg: reg}
	d := spec.NewDecoder(file, spec.WithHook[Sink](sinkHook(reg)),
		spec.WithEnum[Processor]("kind", reg.processorKinds()))
	d.Decode(&doc, "", t)
	ps := d.Problems()
	t.order = order{
		sources:    spec.Keys(spec.Value(&doc, "sources")),
		processors: spec.Keys(spec.Value(&doc, "processors")),
		sinks:      spec.Keys(spec.Value(&doc, "sinks")),
	}
	t.applyDefaults()
	ps = t.validate(ps)
	if len(ps) > 0 {
		ps.Sort()
		return nil, ps
	}
	return t, nil
}

// applyDefaults fills the values whose defaults depend on other values.
func (t *Topology) applyDefaults() {
	if t.Group == "" {
		t.Group = "kandle-" + t.Name
	}
	if t.DeadLetter.Topic == "" {
		t.DeadLetter.Topic = t.Name + ".dlq"
	}
	for name, p := range t.Processors {
		if p != nil && p.Output.Topic == "" {
			p.Output.Topic = t.Name + "." + name
		}
	}
	for _, s := range t.Sources {
		if s != nil && s.IsKinesis() && s.Kinesis.LeaseTable == "" {
			s.Kinesis.LeaseTable = "kandle-" + t.Name + "-leases"
		}
	}
}

// sinkHook decodes a sink mapping: kind and from into the Sink, every other
// key into the config struct of the sink's kind.
func sinkHook(reg Registry) spec.Hook {
	return func(d *spec.Decoder, node *yaml.Node, path string, ptr any) {
		s := ptr.(*Sink)
		s.Node = node
		kindNode := spec.Value(node, "kind")
		if kindNode != nil && kindNode.Kind == yaml.ScalarNode {
			if k, ok := reg.Sinks[kindNode.Value]; ok && k.New != nil {
				s.Config = k.New()
				before := len(d.Problems())
				d.Decode(node, path, s, s.Config)
				if k.Validate != nil && len(d.Problems()) == before {
					for _, msg := range k.Validate(s.Config) {
						d.Report(node, "%s: %s", path, msg)
					}
				}
				return
			}
			known := reg.kinds()
			list := "none are registered"
			if len(known) > 0 {
				list = "use one of " + joinNames(known)
			}
			d.Report(kindNode, "%s.kind: unknown sink kind %q%s; %s", path, kindNode.Value, spec.DidYouMean(kindNode.Value, known), list)
		}
		// Without a known kind the connector keys cannot be checked: decode
		// only the sink's own keys.
		d.Decode(sinkOwnKeys(node), path, s)
	}
}

// sinkOwnKeys returns a copy of a sink mapping holding only kind and from.
func sinkOwnKeys(node *yaml.Node) *yaml.Node {
	if node == nil || node.Kind != yaml.MappingNode {
		return node
	}
	c := *node
	c.Content = nil
	for i := 0; i+1 < len(node.Content); i += 2 {
		if k := node.Content[i].Value; k == "kind" || k == "from" {
			c.Content = append(c.Content, node.Content[i], node.Content[i+1])
		}
	}
	return &c
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxProblem turns a yaml.v3 syntax error into a positioned Problem.
func syntaxProblem(file string, err error) spec.Problem {
	p := spec.Problem{File: file, Line: 1, Col: 1, Msg: "not valid YAML: " + err.Error()}
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		p.Line, _ = strconv.Atoi(m[1])
		p.Msg = "not valid YAML: " + m[2]
	}
	return p
}
