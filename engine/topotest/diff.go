package topotest

import (
	"fmt"
	"strings"

	"github.com/kandle/kandle/candle"
)

// contextLines is how many matching lines a diff shows around a difference.
const contextLines = 2

// op is one line of a diff: a match, a missing expectation or an unexpected
// (or, with expect_exactly false, unchecked) produced item.
type op struct {
	kind byte // ' ' match, '-' missing, '+' produced but not expected
	want int  // index into the expectations
	got  int  // index into the produced items
}

// align matches wants to gots in order (longest common subsequence under
// match) and returns the diff script.
func align(nw, ng int, match func(w, g int) bool) []op {
	// l[i][j] = LCS length of wants[i:] and gots[j:].
	l := make([][]int, nw+1)
	for i := range l {
		l[i] = make([]int, ng+1)
	}
	for i := nw - 1; i >= 0; i-- {
		for j := ng - 1; j >= 0; j-- {
			if match(i, j) {
				l[i][j] = l[i+1][j+1] + 1
			} else {
				l[i][j] = max(l[i+1][j], l[i][j+1])
			}
		}
	}
	var ops []op
	i, j := 0, 0
	for i < nw || j < ng {
		switch {
		case i < nw && j < ng && match(i, j) && l[i][j] == l[i+1][j+1]+1:
			ops = append(ops, op{' ', i, j})
			i, j = i+1, j+1
		case j < ng && (i == nw || l[i][j+1] >= l[i+1][j]):
			ops = append(ops, op{'+', -1, j})
			j++
		default:
			ops = append(ops, op{'-', i, -1})
			i++
		}
	}
	return ops
}

// diffWriter accumulates the report of a failed test.
type diffWriter struct {
	b      strings.Builder
	failed int
}

// line is one rendered diff line; keep marks lines shown regardless of context.
type line struct {
	text string
	keep bool
}

func (d *diffWriter) candles(stage string, wants []wantCandle, gots []*candle.Candle, exactly bool) {
	ops := align(len(wants), len(gots), func(w, g int) bool { return wants[w].matches(gots[g]) })
	var lines []line
	bad := 0
	for _, blk := range blocks(ops) {
		if blk[0].kind == ' ' {
			for _, o := range blk {
				lines = append(lines, line{text: "    " + formatCandle(gots[o.got])})
			}
			continue
		}
		// Pair each missing candle with a produced one of the same window,
		// so the report names the fields that differ.
		used := map[int]bool{}
		for _, o := range blk {
			if o.kind != '-' {
				continue
			}
			bad++
			w := &wants[o.want]
			lines = append(lines, line{text: fmt.Sprintf("  - %s   (line %d)", w, w.line), keep: true})
			for _, p := range blk {
				if p.kind == '+' && !used[p.got] && w.sameWindow(gots[p.got]) {
					used[p.got] = true
					lines = append(lines, line{text: "  + " + formatCandle(gots[p.got]), keep: true},
						line{text: "      " + strings.Join(w.mismatches(gots[p.got]), "; "), keep: true})
					break
				}
			}
		}
		for _, p := range blk {
			if p.kind == '+' && !used[p.got] && exactly {
				bad++
				lines = append(lines, line{text: "  + " + formatCandle(gots[p.got]), keep: true})
			}
		}
	}
	if bad == 0 {
		return
	}
	d.failed += bad
	fmt.Fprintf(&d.b, "%s: %d of %d expected candles matched, %d produced (- want, + got):\n",
		stage, len(wants)-countKind(ops, '-'), len(wants), len(gots))
	d.write(lines)
}

func (d *diffWriter) deadLetters(wants []wantDeadLetter, gots []deadLetter, exactly bool) {
	ops := align(len(wants), len(gots), func(w, g int) bool { return wants[w].matches(&gots[g]) })
	var lines []line
	bad := 0
	for _, blk := range blocks(ops) {
		for _, kind := range []byte{' ', '-', '+'} { // in a block of differences, missing lines first
			for _, o := range blk {
				switch {
				case o.kind != kind:
				case kind == ' ':
					lines = append(lines, line{text: "    " + formatDeadLetter(&gots[o.got])})
				case kind == '-':
					bad++
					w := &wants[o.want]
					lines = append(lines, line{text: fmt.Sprintf("  - %s   (line %d)", w, w.line), keep: true})
				case exactly:
					bad++
					lines = append(lines, line{text: "  + " + formatDeadLetter(&gots[o.got]), keep: true})
				}
			}
		}
	}
	if bad == 0 {
		return
	}
	d.failed += bad
	fmt.Fprintf(&d.b, "dead_letters: %d of %d expected matched, %d produced (- want, + got):\n",
		len(wants)-countKind(ops, '-'), len(wants), len(gots))
	d.write(lines)
}

// panics reports processor panics: a panic is a bug in a processor, so it
// fails the test whatever the expectations (the live engine and replay
// survive it by dead-lettering the record, as the test's outputs show).
func (d *diffWriter) panics(msgs []string) {
	for _, m := range msgs {
		d.failed++
		d.b.WriteString(m)
		d.b.WriteByte('\n')
	}
}

// write prints lines, eliding matches far from any difference.
func (d *diffWriter) write(lines []line) {
	near := make([]bool, len(lines))
	for i, l := range lines {
		if l.keep {
			for j := max(0, i-contextLines); j <= min(len(lines)-1, i+contextLines); j++ {
				near[j] = true
			}
		}
	}
	skipped := 0
	flush := func() {
		if skipped > 0 {
			fmt.Fprintf(&d.b, "    … %d matching\n", skipped)
			skipped = 0
		}
	}
	for i, l := range lines {
		if !near[i] {
			skipped++
			continue
		}
		flush()
		d.b.WriteString(l.text)
		d.b.WriteByte('\n')
	}
	flush()
}

// blocks splits ops into runs of matches and runs of differences.
func blocks(ops []op) [][]op {
	var out [][]op
	for i := 0; i < len(ops); {
		j := i + 1
		for j < len(ops) && (ops[j].kind == ' ') == (ops[i].kind == ' ') {
			j++
		}
		out = append(out, ops[i:j])
		i = j
	}
	return out
}

func countKind(ops []op, k byte) int {
	n := 0
	for _, o := range ops {
		if o.kind == k {
			n++
		}
	}
	return n
}
