package spec

import (
	"fmt"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// Problem is one thing wrong with a config file, at a position in it.
type Problem struct {
	File string
	Line int
	Col  int
	Msg  string
}

// At returns a Problem positioned at node (line 0 when node is nil).
func At(file string, node *yaml.Node, format string, args ...any) Problem {
	p := Problem{File: file, Msg: fmt.Sprintf(format, args...)}
	if node != nil {
		p.Line, p.Col = node.Line, node.Column
	}
	return p
}

// Error returns "file:line:col: message".
func (p Problem) Error() string {
	return fmt.Sprintf("%s:%d:%d: %s", p.File, p.Line, p.Col, p.Msg)
}

// Problems is every problem found in a file. It is an error when not empty.
type Problems []Problem

// Error lists the problems, one a line.
func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.Error()
	}
	return strings.Join(lines, "\n")
}

// Sort orders the problems by file, line and column, keeping the order of
// problems at the same position.
func (ps Problems) Sort() {
	sort.SliceStable(ps, func(i, j int) bool {
		a, b := ps[i], ps[j]
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
}

// Suggest returns the candidate closest to word by edit distance, or "" when
// none is close enough to be a plausible typo.
func Suggest(word string, candidates []string) string {
	best, bestD := "", -1
	for _, c := range candidates {
		d := levenshtein(strings.ToLower(word), strings.ToLower(c))
		if bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	if bestD < 0 {
		return ""
	}
	n := max(len(word), len(best))
	if bestD == 0 || bestD <= 2 && bestD < n/2+1 || bestD <= n/3 {
		return best
	}
	return ""
}

// DidYouMean returns " (did you mean X?)" for the closest candidate, or "".
func DidYouMean(word string, candidates []string) string {
	if s := Suggest(word, candidates); s != "" {
		return fmt.Sprintf(" (did you mean %s?)", s)
	}
	return ""
}

func levenshtein(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}
