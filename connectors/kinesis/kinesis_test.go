package kinesis

import "testing"

// TestKinesis runs every integration test against one kinesis-mock and one
// dynalite; each subtest has its own stream and lease table. The consumer
// tests run twice, polling and with enhanced fan-out, under the same
// assertions.
//
// The subtests are independent (own stream, own lease table, own clients'
// state) and spend most of their time waiting on the emulators and on
// lease and subscription periods, so they run in parallel: at most
// -parallel at once (GOMAXPROCS by default).
func TestKinesis(t *testing.T) {
	e := newEnv(t)
	run := func(t *testing.T, name string, f func(t *testing.T)) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f(t)
		})
	}
	run(t, "LeaseFencing", func(t *testing.T) { testLeaseFencing(t, e.on(t, "share")) })
	run(t, "ReaderRecovers", func(t *testing.T) { testReaderRecovers(t, e.on(t, "flaky")) })
	run(t, "FanOutReaderRecovers", func(t *testing.T) { testFanOutReaderRecovers(t, e.on(t, "efo-flaky")) })
	run(t, "SinkPartialFailures", func(t *testing.T) { testSinkPartialFailures(t, e.on(t, "sink")) })
	run(t, "ReadRange", func(t *testing.T) { testReadRange(t, e.on(t, "range")) })
	run(t, "SplitAndMergeKinesalite", func(t *testing.T) { testSplitAndMerge(t, e.onKinesalite(t, "kl")) })
	for _, mode := range []struct {
		name, prefix, efo string
		maxEvents         int
	}{
		{name: "Polling"},
		{name: "FanOut", prefix: "efo-", efo: "kandle-test", maxEvents: 3},
	} {
		run(t, mode.name, func(t *testing.T) {
			on := func(t *testing.T, stream string) *env {
				c := e.on(t, mode.prefix+stream)
				c.efo, c.maxEvents = mode.efo, mode.maxEvents
				return c
			}
			run(t, "ReadOnceAndResume", func(t *testing.T) { testReadOnceAndResume(t, on(t, "once")) })
			run(t, "ConsumersShareEvenly", func(t *testing.T) { testConsumersShareEvenly(t, on(t, "share")) })
			run(t, "ResumeFromHandler", func(t *testing.T) { testResumeFromHandler(t, on(t, "resume")) })
			run(t, "SplitAndMerge", func(t *testing.T) { testSplitAndMerge(t, on(t, "split")) })
			run(t, "CrashedConsumerLeasesMove", func(t *testing.T) { testCrashedConsumerLeasesMove(t, on(t, "crash")) })
		})
	}
}
