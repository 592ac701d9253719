package engine

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/processors"
)

// Revisions in the metrics. A stage with a revision horizon
// (topology.Stage.ReviseWithin) emits a closed window again, with a higher
// Rev, when a late trade, a cancel or a correction changes it (a candles
// processor), or when the newest revisions of its sub-candles change it (a
// rollup). kandle_revisions_total counts those candles (Rev > 0) by stage
// and timeframe. The records behind them are counted where they are
// rejected or accepted: cancels and corrections that could not be applied
// are dead letters with their own reasons (kandle_rejected_total with
// reason unknown_trade or beyond_horizon), so are a rollup's revised
// sub-candles of windows beyond the horizon (beyond_horizon), and with a
// horizon the reason late counts exactly the trades older than it.

// newRevisionsMetric is kandle_revisions_total (see above).
func newRevisionsMetric() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kandle_revisions_total",
		Help: "Revised candles emitted (a closed window emitted again with rev > 0: a late trade, cancel or correction inside the revision horizon, or a rollup window whose sub-candles were revised), by stage and timeframe."},
		[]string{"stage", "timeframe"})
}

// newRevisionInputsMetric is kandle_revision_inputs_total: the records a
// candles stage with a revision horizon applied to closed windows, by kind:
// late (a late trade inside the horizon), cancel, correct. Counted when
// their transaction commits, so a record is counted once however often an
// aborted transaction processed it.
func newRevisionInputsMetric() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kandle_revision_inputs_total",
		Help: "Records a candles stage with a revision horizon applied to windows inside it, counted when their transaction commits: late trades counted into closed windows (kind late), cancels (cancel) and corrections (correct) applied."},
		[]string{"stage", "kind"})
}

// revisionInputs is what the processors of a transaction's units applied
// inside their revision horizons, taken before it commits.
type revisionInputs []processors.RevisionCounts

// take takes the counts of every unit's processor that keeps them.
func takeRevisionInputs(units []unitCommit) revisionInputs {
	var in revisionInputs
	for i, c := range units {
		rc, ok := c.u.proc.(processors.RevisionCounter)
		if !ok {
			continue
		}
		n := rc.TakeRevisionCounts()
		if n == (processors.RevisionCounts{}) {
			continue
		}
		if in == nil {
			in = make(revisionInputs, len(units))
		}
		in[i] = n
	}
	return in
}

// count adds the counts of a committed transaction to m.
func (in revisionInputs) count(m *metrics, t *unitTxn, units []unitCommit) {
	for i, n := range in {
		stage := t.stageOf(&units[i])
		for _, k := range []struct {
			kind string
			n    uint64
		}{{"late", n.LateTrades}, {"cancel", n.Cancels}, {"correct", n.Corrections}} {
			if k.n > 0 {
				m.revisionInputs.WithLabelValues(stage, k.kind).Add(float64(k.n))
			}
		}
	}
}

// countRevisions counts the revised candles among cs, emitted by stage s.
func countRevisions(m *metrics, s *stageSpec, cs []candle.Candle) {
	n := 0
	for i := range cs {
		if cs[i].Rev > 0 {
			n++
		}
	}
	if n > 0 {
		m.revisions.WithLabelValues(s.Name, s.Timeframe.String()).Add(float64(n))
	}
}

// revisionReasons are the dead-letter reasons of a candles stage with a
// revision horizon that dashboards watch: trades older than the horizon
// (late), and cancels or corrections that name no kept trade or a window
// beyond it. A rollup with a horizon dead-letters revised sub-candles of
// windows beyond it (beyond_horizon).
var revisionReasons = []processors.Reason{processors.ReasonLate, processors.ReasonUnknownTrade, processors.ReasonBeyondHorizon}

// zeroRevisions creates, at 0, the revision series of stage s when it has a
// revision horizon (see metrics.zero), and its revision dead-letter
// reasons.
func (m *metrics) zeroRevisions(s *stageSpec) {
	if s.ReviseWithin <= 0 || !s.Facts.Candles {
		return
	}
	m.revisions.WithLabelValues(s.Name, s.Timeframe.String())
	if !s.Rollup {
		for _, k := range []string{"late", "cancel", "correct"} {
			m.revisionInputs.WithLabelValues(s.Name, k)
		}
	}
	reasons := revisionReasons
	if s.Rollup {
		reasons = []processors.Reason{processors.ReasonBeyondHorizon}
	}
	for _, r := range reasons {
		m.rejected.WithLabelValues(s.Name, string(r))
	}
}
