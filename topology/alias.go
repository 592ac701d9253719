package topology

import (
	"gopkg.in/yaml.v3"
)

// maxExpandedNodes bounds the size of a topology file with its aliases
// (*name) and merge keys (<<: *name) expanded. The YAML parser keeps an
// alias as one node, but everything that reads the document walks through
// it, so nested aliases ("billion laughs") would make that walk exponential.
// Real topologies have a few thousand nodes at most.
const maxExpandedNodes = 200_000

// expandedSize returns the number of nodes n stands for with every alias
// expanded, counting at most up to limit+1 (so a huge expansion costs no
// more than a walk of the file: each anchored node is sized once).
func expandedSize(n *yaml.Node, limit int) int {
	memo := map[*yaml.Node]int{}
	var size func(n *yaml.Node, depth int) int
	size = func(n *yaml.Node, depth int) int {
		if n == nil {
			return 0
		}
		if depth > 10_000 { // deeper than any topology: treat as too large
			return limit + 1
		}
		if n.Kind == yaml.AliasNode {
			return size(n.Alias, depth+1)
		}
		if s, ok := memo[n]; ok {
			if s < 0 { // an alias cycle
				return limit + 1
			}
			return s
		}
		memo[n] = -1
		total := 1
		for _, c := range n.Content {
			total += size(c, depth+1)
			if total > limit {
				total = limit + 1
				break
			}
		}
		memo[n] = total
		return total
	}
	return size(n, 0)
}
