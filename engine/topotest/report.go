package topotest

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/kandle/kandle/topology/spec"
)

// Runner runs test files and reports like `go test`: a --- PASS or --- FAIL
// line per test, the diff of each failure, and an ok/FAIL line per file.
type Runner struct {
	w   io.Writer
	cfg *config
}

// Summary counts the tests a Runner ran.
type Summary struct {
	Passed, Failed int
	Broken         int // files that could not be loaded or run
}

// OK reports whether everything passed.
func (s Summary) OK() bool { return s.Failed == 0 && s.Broken == 0 }

// NewRunner returns a Runner printing to w.
func NewRunner(w io.Writer, opts ...Option) *Runner {
	return &Runner{w: w, cfg: newConfig(opts)}
}

// Run runs every test of each file, in order, and prints the report. A file
// that does not load is reported (file:line:col) and counted as broken; the
// other files still run.
func (r *Runner) Run(paths ...string) Summary {
	var sum Summary
	for _, path := range paths {
		s := r.file(path)
		sum.Passed += s.Passed
		sum.Failed += s.Failed
		sum.Broken += s.Broken
	}
	if len(paths) > 1 {
		status := "ok"
		if !sum.OK() {
			status = "FAIL"
		}
		fmt.Fprintf(r.w, "%s\t%d passed, %d failed in %d files", status, sum.Passed, sum.Failed, len(paths))
		if sum.Broken > 0 {
			fmt.Fprintf(r.w, " (%d did not load)", sum.Broken)
		}
		fmt.Fprintln(r.w)
	}
	return sum
}

func (r *Runner) file(path string) Summary {
	start := time.Now()
	var sum Summary
	suite, err := Load(path, WithRegistry(r.cfg.reg))
	if err != nil {
		var ps spec.Problems
		if errors.As(err, &ps) {
			for _, p := range ps {
				fmt.Fprintln(r.w, p.Error())
			}
		} else {
			fmt.Fprintln(r.w, err)
		}
		fmt.Fprintf(r.w, "FAIL\t%s\t[load failed]\n", path)
		sum.Broken++
		return sum
	}
	for _, c := range suite.Cases {
		name := c.FullName()
		if r.cfg.run != nil && !r.cfg.run.MatchString(name) {
			continue
		}
		if r.cfg.verbose {
			fmt.Fprintf(r.w, "=== RUN   %s\n", name)
		}
		o, err := c.Run()
		if err != nil {
			fmt.Fprintf(r.w, "--- FAIL: %s\n    %v\n", name, err)
			sum.Failed++
			continue
		}
		if r.cfg.verbose {
			r.produced(o)
		}
		secs := o.Elapsed.Seconds()
		if o.Pass {
			sum.Passed++
			if r.cfg.verbose {
				fmt.Fprintf(r.w, "--- PASS: %s (%.2fs)\n", name, secs)
			}
			continue
		}
		sum.Failed++
		fmt.Fprintf(r.w, "--- FAIL: %s (%.2fs)\n", name, secs)
		fmt.Fprintf(r.w, "    %s:%d: %s\n", c.File, c.Line, c.Name)
		fmt.Fprint(r.w, indent(o.Diff, "    "))
	}
	status := "ok  "
	if sum.Failed > 0 {
		status = "FAIL"
	}
	counts := fmt.Sprintf("%d passed, %d failed", sum.Passed, sum.Failed)
	if sum.Passed+sum.Failed == 0 {
		counts = "[no tests to run]"
	}
	fmt.Fprintf(r.w, "%s\t%s\t%.3fs\t%s\n", status, filepath.ToSlash(path), time.Since(start).Seconds(), counts)
	return sum
}

// produced prints every candle and dead letter of a test (-v).
func (r *Runner) produced(o *Outcome) {
	for _, l := range o.log {
		fmt.Fprintf(r.w, "    %s\n", l)
	}
}

func indent(s, prefix string) string {
	if s == "" {
		return ""
	}
	lines := strings.SplitAfter(s, "\n")
	var b strings.Builder
	for _, l := range lines {
		if l != "" {
			b.WriteString(prefix + l)
		}
	}
	return b.String()
}
