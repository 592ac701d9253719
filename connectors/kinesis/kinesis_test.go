package kinesis

import "testing"

// TestKinesis runs every integration test against one kinesis-mock and one
// dynalite; each subtest has its own stream and lease table. The consumer
// tests run twice, polling and with enhanced fan-out, under the same
// assertions.
func TestKinesis(t *testing.T) {
	e := newEnv(t)
	t.Run("LeaseFencing", func(t *testing.T) { testLeaseFencing(t, e.on(t, "share")) })
	t.Run("ReaderRecovers", func(t *testing.T) { testReaderRecovers(t, e.on(t, "flaky")) })
	t.Run("FanOutReaderRecovers", func(t *testing.T) { testFanOutReaderRecovers(t, e.on(t, "efo-flaky")) })
	t.Run("SinkPartialFailures", func(t *testing.T) { testSinkPartialFailures(t, e.on(t, "sink")) })
	t.Run("ReadRange", func(t *testing.T) { testReadRange(t, e.on(t, "range")) })
	t.Run("SplitAndMergeKinesalite", func(t *testing.T) { testSplitAndMerge(t, e.onKinesalite(t, "kl")) })
	for _, mode := range []struct {
		name, prefix, efo string
		maxEvents         int
	}{
		{name: "Polling"},
		{name: "FanOut", prefix: "efo-", efo: "kandle-test", maxEvents: 3},
	} {
		t.Run(mode.name, func(t *testing.T) {
			on := func(t *testing.T, stream string) *env {
				c := e.on(t, mode.prefix+stream)
				c.efo, c.maxEvents = mode.efo, mode.maxEvents
				return c
			}
			t.Run("ReadOnceAndResume", func(t *testing.T) { testReadOnceAndResume(t, on(t, "once")) })
			t.Run("ConsumersShareEvenly", func(t *testing.T) { testConsumersShareEvenly(t, on(t, "share")) })
			t.Run("ResumeFromHandler", func(t *testing.T) { testResumeFromHandler(t, on(t, "resume")) })
			t.Run("SplitAndMerge", func(t *testing.T) { testSplitAndMerge(t, on(t, "split")) })
			t.Run("CrashedConsumerLeasesMove", func(t *testing.T) { testCrashedConsumerLeasesMove(t, on(t, "crash")) })
		})
	}
}
