package topotest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

// jsonNumber is the JSON number grammar (RFC 8259).
var jsonNumber = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)

// recordBytes turns one input record into the bytes fed to the pipeline: a
// scalar is sent verbatim, a mapping or sequence is encoded as JSON.
func recordBytes(n *yaml.Node) ([]byte, error) {
	n = deref(n)
	if n.Kind == yaml.ScalarNode {
		return []byte(n.Value), nil
	}
	return appendJSON(nil, n)
}

// appendJSON encodes n as JSON from its YAML text, so numbers keep their
// exact digits and quoted scalars stay strings.
func appendJSON(b []byte, n *yaml.Node) ([]byte, error) {
	n = deref(n)
	switch n.Kind {
	case yaml.MappingNode:
		b = append(b, '{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := deref(n.Content[i])
			if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
				return nil, errAt(k, "a record key must be a plain name (merge keys and complex keys are not supported)")
			}
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k.Value)
			b = append(b, ':')
			var err error
			if b, err = appendJSON(b, n.Content[i+1]); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	case yaml.SequenceNode:
		b = append(b, '[')
		for i, c := range n.Content {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendJSON(b, c); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str", "!!timestamp":
			return appendString(b, n.Value), nil
		case "!!int", "!!float":
			if !jsonNumber.MatchString(n.Value) {
				return nil, errAt(n, "%s is not a JSON number: quote it to send a string, or give the whole record as a raw JSON string", n.Value)
			}
			return append(b, n.Value...), nil
		case "!!bool":
			return append(b, strings.ToLower(n.Value)...), nil
		case "!!null":
			return append(b, "null"...), nil
		}
		return nil, errAt(n, "cannot encode a %s value as JSON: quote it to send a string", n.ShortTag())
	}
	return nil, errAt(n, "cannot encode this YAML node as JSON")
}

func appendString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}

// deref follows aliases and unwraps documents.
func deref(n *yaml.Node) *yaml.Node {
	for n != nil && (n.Kind == yaml.AliasNode || n.Kind == yaml.DocumentNode && len(n.Content) == 1) {
		if n.Kind == yaml.AliasNode {
			n = n.Alias
		} else {
			n = n.Content[0]
		}
	}
	return n
}

// posError is a problem at a node; parse turns it into a spec.Problem.
type posError struct {
	node *yaml.Node
	msg  string
}

func (e *posError) Error() string { return e.msg }

func errAt(n *yaml.Node, format string, args ...any) error {
	return &posError{node: n, msg: fmt.Sprintf(format, args...)}
}

// recordKey returns what a producer keying by the key field sends as the
// record key: the value at the field's (dotted) path, a string's text or a
// number's digits. A record that is not such an object has none (nil).
func recordKey(value []byte, field string) []byte {
	var v any
	d := json.NewDecoder(bytes.NewReader(value))
	d.UseNumber()
	if d.Decode(&v) != nil {
		return nil
	}
	for _, part := range strings.Split(field, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[part]
	}
	switch x := v.(type) {
	case string:
		return []byte(x)
	case json.Number:
		return []byte(x.String())
	}
	return nil
}
