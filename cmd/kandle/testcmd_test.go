package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kandle/kandle/internal/testkit"
)

// TestKandleTestShippedExamples runs `kandle test` on testdata/topologies.
func TestKandleTestShippedExamples(t *testing.T) {
	dir := filepath.Join(testkit.RepoRoot(t), "testdata", "topologies")
	var out, errb bytes.Buffer
	if code := realMain(context.Background(), []string{"test", dir}, &out, &errb); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"ok  \t" + filepath.ToSlash(filepath.Join(dir, "crypto_test.yaml")),
		"ok  \t" + filepath.ToSlash(filepath.Join(dir, "devices_test.yaml")),
		"ok  \t" + filepath.ToSlash(filepath.Join(dir, "quiet_test.yaml")), "\nok\t"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "FAIL") {
		t.Errorf("a shipped example fails:\n%s", out.String())
	}
}

func TestKandleTestFailureExitsOne(t *testing.T) {
	file := filepath.Join(testkit.RepoRoot(t), "engine", "topotest", "testdata", "failing_test.yaml")
	var out, errb bytes.Buffer
	code := realMain(context.Background(), []string{"test", "-v", "-run", "wrong fields", file}, &out, &errb)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"=== RUN   failing_test.yaml/wrong fields\n", "--- FAIL: failing_test.yaml/wrong fields (",
		"      close: want 2.5, got 2\n", "FAIL\t" + file + "\t"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "dead letters") {
		t.Errorf("-run did not filter:\n%s", out.String())
	}
}

func TestKandleTestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"test", "-run", "(", "."}, "-run: error parsing regexp"},
		{[]string{"test", t.TempDir()}, "no *_test.yaml files in"},
		{[]string{"test", "missing_test.yaml"}, "no such file"},
	} {
		var out, errb bytes.Buffer
		if code := realMain(context.Background(), tc.args, &out, &errb); code != 1 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want 1 and %q", tc.args, code, errb.String(), tc.want)
		}
	}
}
