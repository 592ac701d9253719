package testkit

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"testing"
)

// WallClockTest marks a test that spends its time waiting for the wall
// clock (real-time input, paced backlogs, session and transaction
// timeouts, idle_timeout, silence due times, emulator start-ups) with
// servers of its own — its own broker and emulators on free ports, its own
// temp dirs, no environment changes (t.Setenv) — so it runs alongside the
// other such tests instead of after them. `make soak` (KANDLE_SOAK=1) runs
// its long tests one at a time, as before, so each soak has the machine to
// itself.
func WallClockTest(t *testing.T) {
	t.Helper()
	if os.Getenv("KANDLE_SOAK") != "1" {
		t.Parallel()
	}
}

// WallClockParallel sets how many tests marked with WallClockTest run at
// once in this test binary, unless go test was given -parallel: a package's
// TestMain calls it before m.Run. The go test default (GOMAXPROCS: two on a
// 2-core machine) suits tests that keep a core busy; tests that mostly
// wait leave the cores idle at two, so a package of such tests runs more of
// them at once.
func WallClockParallel(n int) error {
	if !flag.Parsed() {
		flag.Parse()
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if given {
		return nil
	}
	if err := flag.Set("test.parallel", strconv.Itoa(n)); err != nil {
		return fmt.Errorf("testkit: setting -test.parallel: %w", err)
	}
	return nil
}
