package spec

import "gopkg.in/yaml.v3"

// resolve skips document and alias nodes.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil {
		switch n.Kind {
		case yaml.DocumentNode:
			if len(n.Content) == 0 {
				return nil
			}
			n = n.Content[0]
		case yaml.AliasNode:
			n = n.Alias
		default:
			return n
		}
	}
	return nil
}

// isNull reports whether n is absent or an explicit null ("key:" or "key: ~").
func isNull(n *yaml.Node) bool {
	n = resolve(n)
	return n == nil || n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// Find follows keys through nested mappings from n and returns the value
// node at the end of the path. When a key is missing it returns the deepest
// node reached, so a message about an absent value points at its parent.
func Find(n *yaml.Node, path ...string) *yaml.Node {
	n = resolve(n)
	for _, key := range path {
		v := Value(n, key)
		if v == nil {
			return n
		}
		n = v
	}
	return n
}

// Value returns the value of key in mapping n, or nil.
func Value(n *yaml.Node, key string) *yaml.Node {
	n = merged(resolve(n))
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return resolve(n.Content[i+1])
		}
	}
	return nil
}

// Keys returns the keys of mapping n in file order.
func Keys(n *yaml.Node) []string {
	n = merged(resolve(n))
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	keys := make([]string, 0, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		keys = append(keys, n.Content[i].Value)
	}
	return keys
}

// merged returns mapping n with YAML merge keys ("<<: *base" or
// "<<: [*a, *b]") expanded: explicit keys win, then earlier merged mappings.
// Merged pairs keep their positions (inside the anchored mapping).
func merged(n *yaml.Node) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return n
	}
	hasMerge := false
	for i := 0; i+1 < len(n.Content); i += 2 {
		if isMergeKey(n.Content[i]) {
			hasMerge = true
			break
		}
	}
	if !hasMerge {
		return n
	}
	out := *n
	out.Content = nil
	have := map[string]bool{}
	var sources []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if isMergeKey(k) {
			v := resolve(n.Content[i+1])
			if v != nil && v.Kind == yaml.SequenceNode {
				for _, item := range v.Content {
					sources = append(sources, resolve(item))
				}
			} else {
				sources = append(sources, v)
			}
			continue
		}
		have[k.Value] = true
		out.Content = append(out.Content, k, n.Content[i+1])
	}
	for _, src := range sources {
		src = merged(src)
		if src == nil || src.Kind != yaml.MappingNode {
			continue // yaml.v3 rejects such merges while parsing
		}
		for i := 0; i+1 < len(src.Content); i += 2 {
			if k := src.Content[i]; !have[k.Value] {
				have[k.Value] = true
				out.Content = append(out.Content, k, src.Content[i+1])
			}
		}
	}
	return &out
}

func isMergeKey(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.Value == "<<" && (k.Tag == "!!merge" || k.Tag == "")
}
