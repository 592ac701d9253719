package topotest

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kandle/kandle/internal/testkit"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestExamples runs every shipped example test file (make test runs this).
func TestExamples(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(testkit.RepoRoot(t), "testdata", "topologies", "*_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 2 {
		t.Fatalf("found %d example test files, want crypto_test.yaml and devices_test.yaml at least", len(files))
	}
	for _, f := range files {
		s, err := Load(f)
		if err != nil {
			t.Fatalf("load %s:\n%v", f, err)
		}
		for _, c := range s.Cases {
			t.Run(c.FullName(), func(t *testing.T) {
				o, err := c.Run()
				if err != nil {
					t.Fatal(err)
				}
				if !o.Pass {
					t.Errorf("%s:%d:\n%s", c.File, c.Line, o.Diff)
				}
			})
		}
	}
}

// durations are the only nondeterministic part of a report.
var durations = regexp.MustCompile(`\(\d+\.\d\ds\)|\t\d+\.\d{3}s\t`)

// TestFailingReport compares the report of deliberately failing tests with
// testdata/failing.golden (rewrite it with -update).
func TestFailingReport(t *testing.T) {
	var buf bytes.Buffer
	sum := NewRunner(&buf).Run("testdata/failing_test.yaml")
	if sum.Passed != 2 || sum.Failed != 3 || sum.Broken != 0 || sum.OK() {
		t.Errorf("summary %+v, want 2 passed, 3 failed", sum)
	}
	got := durations.ReplaceAllStringFunc(buf.String(), func(s string) string {
		if strings.HasPrefix(s, "(") {
			return "(X.XXs)"
		}
		return "\tX.XXXs\t"
	})
	golden := "testdata/failing.golden"
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (create it with -update)", err)
	}
	if got != string(want) {
		t.Errorf("report differs from %s (rerun with -update if the change is intended):\n--- got\n%s--- want\n%s", golden, got, want)
	}
}

func TestVerboseAndFilter(t *testing.T) {
	var buf bytes.Buffer
	sum := NewRunner(&buf, WithVerbose(true), WithFilter(regexp.MustCompile(`/passes$`))).Run("testdata/failing_test.yaml")
	if sum.Passed != 1 || sum.Failed != 0 {
		t.Fatalf("summary %+v, want only the one matching test, passed", sum)
	}
	out := buf.String()
	for _, want := range []string{
		"=== RUN   failing_test.yaml/passes\n",
		"    candle 1m p", // every produced candle is printed with -v
		"A 1m 1970-01-01T00:00:00Z o=1 h=1 l=1 c=1 v=1 q=1 n=1\n",
		"--- PASS: failing_test.yaml/passes (",
		"ok  \ttestdata/failing_test.yaml\t",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("verbose output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "wrong fields") {
		t.Errorf("filtered-out test ran:\n%s", out)
	}
}

func TestBrokenFileIsReportedAndOthersRun(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad_test.yaml")
	write(t, bad, "topology: "+abs(t, "testdata/mini.yaml")+"\ntests:\n  - name: x\n    input: {trades: []}\n    expect: {1h: []}\n")
	var buf bytes.Buffer
	sum := NewRunner(&buf).Run(bad, "testdata/failing_test.yaml")
	if sum.Broken != 1 || sum.Passed != 2 || sum.Failed != 3 {
		t.Fatalf("summary %+v, want 1 broken file and the other file run", sum)
	}
	if !strings.Contains(buf.String(), bad+":5:14: no processor \"1h\"") ||
		!strings.Contains(buf.String(), "FAIL\t"+bad+"\t[load failed]") ||
		!strings.HasSuffix(buf.String(), "FAIL\t2 passed, 3 failed in 2 files (1 did not load)\n") {
		t.Errorf("report:\n%s", buf.String())
	}
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func abs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
