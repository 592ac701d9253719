package kinesis

import "testing"

// TestKinesis runs every integration test against one kinesis-mock and one
// dynalite; each subtest has its own stream and lease table.
func TestKinesis(t *testing.T) {
	e := newEnv(t)
	t.Run("LeaseFencing", func(t *testing.T) { testLeaseFencing(t, e.on(t, "share")) })
	t.Run("ConsumersShareEvenly", func(t *testing.T) { testConsumersShareEvenly(t, e.on(t, "share")) })
	t.Run("ResumeFromHandler", func(t *testing.T) { testResumeFromHandler(t, e.on(t, "resume")) })
	t.Run("ReaderRecovers", func(t *testing.T) { testReaderRecovers(t, e.on(t, "flaky")) })
	t.Run("SinkPartialFailures", func(t *testing.T) { testSinkPartialFailures(t, e.on(t, "sink")) })
	t.Run("ReadRange", func(t *testing.T) { testReadRange(t, e.on(t, "range")) })
	t.Run("SplitAndMerge", func(t *testing.T) { testSplitAndMerge(t, e.on(t, "split")) })
	t.Run("SplitAndMergeKinesalite", func(t *testing.T) { testSplitAndMerge(t, e.onKinesalite(t, "kl")) })
	t.Run("CrashedConsumerLeasesMove", func(t *testing.T) { testCrashedConsumerLeasesMove(t, e.on(t, "crash")) })
}
