package processors

import (
	"path/filepath"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestDataDrivenReviseRollup runs the fixtures in testdata/revise-rollup/:
// the rules of a rollup with a revision horizon (see Rollup), with the
// directives of TestDataDriven.
func TestDataDrivenReviseRollup(t *testing.T) {
	files, err := filepath.Glob("testdata/revise-rollup/*")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no fixtures in testdata/revise-rollup")
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			h := &ddHarness{clock: &testClock{t: baseDay}, st: store{}}
			datadriven.RunTest(t, path, h.run)
		})
	}
}
