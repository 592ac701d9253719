package main

import (
	"os"
	"strings"
	"testing"

	"github.com/kandle/kandle/internal/testkit"
)

// TestUnfused runs the cluster tests whose topologies chain rollups (kills,
// faults, broker trouble, outages with revisions, the crash harness) a
// second time with every rollup a stage of its own; the tests themselves
// run with fused chains, the default. Its subtests share the package's
// wall-clock slots with every other such test (see TestMain), so the
// second run fills the gaps of the first instead of following it.
// KANDLE_TEST_FUSE=off runs any cluster test unfused on its own.
func TestUnfused(t *testing.T) {
	testkit.WallClockTest(t)
	for _, c := range []struct {
		name string
		run  func(*testing.T)
	}{
		// The longest first: they take the first free slots.
		{"TestOutageBacklogBecomesRevisionsUnderKills", TestOutageBacklogBecomesRevisionsUnderKills},
		{"TestCrashHarness", TestCrashHarness},
		{"TestOutageBacklogBecomesRevisions", TestOutageBacklogBecomesRevisions},
		{"TestLiveEqualsReplayUnderFaults", TestLiveEqualsReplayUnderFaults},
		{"TestBrokerTroubleThroughProxies", TestBrokerTroubleThroughProxies},
		{"TestZombieInstanceIsFenced", TestZombieInstanceIsFenced},
		{"TestBrokerRestart", TestBrokerRestart},
		{"TestGracefulStopDuringRebalance", TestGracefulStopDuringRebalance},
		{"TestDeadInstanceTransactionTimesOut", TestDeadInstanceTransactionTimesOut},
		{"TestGracefulStopHandsOver", TestGracefulStopHandsOver},
	} {
		t.Run(c.name, c.run)
	}
}

// unfused reports whether t's cluster runs every rollup as a stage of its
// own: under TestUnfused, or with KANDLE_TEST_FUSE=off.
func unfused(t *testing.T) bool {
	return os.Getenv("KANDLE_TEST_FUSE") == "off" || strings.HasPrefix(t.Name(), "TestUnfused/")
}
