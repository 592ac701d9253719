package engine

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Health defaults. A stage loop turns at least every commit interval (a sink
// loop every flush interval or backoff pause), so a minute without a turn
// means it is stuck; 10 000 records behind is seconds of work at the
// engine's throughput.
const (
	DefaultStallAfter = 2 * time.Minute
	DefaultReadyLag   = 10000
)

// Status is the engine's answer to the probes.
type Status struct {
	Alive   bool
	Ready   bool
	Reasons []string // why not alive or not ready; empty when both hold
}

// health tracks what the probes need: the last turn of every running loop
// (liveness), whether each loop has its partitions assigned and restored,
// which sinks are failing and how far behind each loop is (readiness).
type health struct {
	mu       sync.Mutex
	now      func() time.Time
	stall    time.Duration
	maxLag   int64
	running  bool                         // every loop has started (topics exist, broker reached)
	starting string                       // why not running yet
	loops    map[string]*loopHealth       // by stage or "sink <name>"
	lastWhy  string                       // the reasons last logged, to log changes only
	ready    prometheus.Gauge             // kandle_ready
	unready  *prometheus.GaugeVec         // kandle_unready{check}
	lagG     *prometheus.GaugeVec         // kandle_consumer_lag{stage, topic, partition}
	checks   map[string]struct{}          // unready check labels set last time
	onChange func(ready bool, why string) // logs a change of readiness
}

type loopHealth struct {
	beat   time.Time
	synced bool                     // a full turn since the last partition move: partitions restored
	down   string                   // why the loop's external store is failing ("" = reachable)
	lag    map[topicPartition]int64 // records behind the high watermark, by input partition
}

type topicPartition struct {
	topic string
	p     int32
}

func newHealth(reg prometheus.Registerer, now func() time.Time) (*health, error) {
	ready, unready, err := readinessMetrics(reg)
	if err != nil {
		return nil, err
	}
	// The stage label is the processor's name, or sink.<name> for a sink
	// (as in kandle_rejected_total).
	lagG := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kandle_consumer_lag",
		Help: "Records between a processor's or sink's position and the high watermark of each input partition it owns, as of its last fetch with records."},
		[]string{"stage", "topic", "partition"})
	if err := reg.Register(lagG); err != nil {
		return nil, fmt.Errorf("register kandle_consumer_lag: %w", err)
	}
	h := &health{now: now, stall: DefaultStallAfter, maxLag: DefaultReadyLag, starting: "starting",
		loops: map[string]*loopHealth{}, ready: ready, unready: unready, lagG: lagG,
		checks: map[string]struct{}{"starting": {}}}
	ready.Set(0)
	unready.WithLabelValues("starting").Set(1)
	return h, nil
}

// RegisterReadiness registers kandle_ready (0) and kandle_unready
// {check="starting"} (1) on reg before any engine exists, so that the
// first scrape of /metrics, while kandle still waits for a sink's store,
// already says it is not ready. An engine built later with the same
// registerer (WithRegisterer) takes the two gauges over.
func RegisterReadiness(reg prometheus.Registerer) error {
	ready, unready, err := readinessMetrics(reg)
	if err != nil {
		return fmt.Errorf("register readiness metrics: %w", err)
	}
	ready.Set(0)
	unready.WithLabelValues("starting").Set(1)
	return nil
}

// readinessMetrics registers kandle_ready and kandle_unready on reg, or
// returns the ones already registered there (by RegisterReadiness).
func readinessMetrics(reg prometheus.Registerer) (prometheus.Gauge, *prometheus.GaugeVec, error) {
	ready := prometheus.NewGauge(prometheus.GaugeOpts{Name: "kandle_ready",
		Help: "1 when /readyz answers ready (partitions assigned and restored, sinks reachable, lag below the threshold), else 0."})
	unready := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kandle_unready",
		Help: "1 for each readiness check that fails now (starting, restoring, sink_down, lag, stalled)."}, []string{"check"})
	if err := reg.Register(ready); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, nil, err
		}
		g, ok := are.ExistingCollector.(prometheus.Gauge)
		if !ok {
			return nil, nil, err
		}
		ready = g
	}
	if err := reg.Register(unready); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, nil, err
		}
		v, ok := are.ExistingCollector.(*prometheus.GaugeVec)
		if !ok {
			return nil, nil, err
		}
		unready = v
	}
	return ready, unready, nil
}

func (h *health) loop(name string) *loopHealth {
	l := h.loops[name]
	if l == nil {
		l = &loopHealth{beat: h.now(), lag: map[topicPartition]int64{}}
		h.loops[name] = l
	}
	return l
}

// notRunning says why the engine has not started its loops yet.
func (h *health) notRunning(why string) {
	h.mu.Lock()
	h.starting = why
	h.mu.Unlock()
}

// started marks every loop started.
func (h *health) started() {
	h.mu.Lock()
	h.running, h.starting = true, ""
	h.mu.Unlock()
}

// turn records one full turn of loop name over fetches fs with client cl:
// the loop is alive, and it is in sync when cl is a member of its group
// (partitions assigned; each turn first applies the partition moves, so
// they are restored too). Fetched partitions update the loop's lag.
func (h *health) turn(name string, cl *kgo.Client, fs kgo.Fetches) {
	_, gen := cl.GroupMetadata()
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.loop(name)
	l.beat, l.synced = h.now(), gen >= 0
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		if n := len(p.Records); n > 0 {
			lag := max(0, p.HighWatermark-(p.Records[n-1].Offset+1))
			l.lag[topicPartition{p.Topic, p.Partition}] = lag
			h.lagG.WithLabelValues(lagStage(name), p.Topic, strconv.Itoa(int(p.Partition))).Set(float64(lag))
		}
	})
}

// beat records that loop name is alive, and whether it is in sync (a sink
// waiting between retries is alive but not in sync).
func (h *health) beat(name string, synced bool) {
	h.mu.Lock()
	l := h.loop(name)
	l.beat, l.synced = h.now(), synced
	h.mu.Unlock()
}

// moved records a partition move: the loop is out of sync until its next
// turn, and revoked partitions no longer count towards its lag.
func (h *health) moved(name, topic string, revoked []int32) {
	h.mu.Lock()
	l := h.loop(name)
	l.synced = false
	for _, p := range revoked {
		delete(l.lag, topicPartition{topic, p})
		h.lagG.DeleteLabelValues(lagStage(name), topic, strconv.Itoa(int(p)))
	}
	h.mu.Unlock()
}

// lagStage is the stage label of a loop: the processor's name, or
// sink.<name> for the loop "sink <name>".
func lagStage(loop string) string {
	if name, ok := strings.CutPrefix(loop, "sink "); ok {
		return "sink." + name
	}
	return loop
}

// sinkDown records why loop name's store fails ("" = it answers again).
func (h *health) sinkDown(name, why string) {
	h.mu.Lock()
	l := h.loop(name)
	l.down, l.beat = why, h.now()
	h.mu.Unlock()
}

// status evaluates the probes now, updates the metrics and logs a change.
func (h *health) status() Status {
	h.mu.Lock()
	st := Status{Alive: true, Ready: true}
	checks := map[string]struct{}{}
	fail := func(check, why string) {
		st.Ready = false
		checks[check] = struct{}{}
		st.Reasons = append(st.Reasons, why)
	}
	if !h.running {
		fail("starting", h.starting)
	}
	now := h.now()
	for _, n := range slices.Sorted(maps.Keys(h.loops)) {
		l := h.loops[n]
		if idle := now.Sub(l.beat); idle > h.stall {
			st.Alive = false
			fail("stalled", fmt.Sprintf("%s: no turn of its loop for %s (stuck)", n, idle.Round(time.Second)))
		}
		if l.down != "" {
			fail("sink_down", fmt.Sprintf("%s: store unreachable: %s", n, l.down))
		}
		if !l.synced {
			fail("restoring", n+": partitions being assigned or restored")
		}
		var lag int64
		for _, v := range l.lag {
			lag += v
		}
		if lag > h.maxLag {
			fail("lag", fmt.Sprintf("%s: %d records behind (threshold %d)", n, lag, h.maxLag))
		}
	}
	why := strings.Join(st.Reasons, "; ")
	changed := why != h.lastWhy
	h.lastWhy = why
	for c := range h.checks {
		if _, ok := checks[c]; !ok {
			h.unready.WithLabelValues(c).Set(0)
		}
	}
	for c := range checks {
		h.unready.WithLabelValues(c).Set(1)
	}
	h.checks = checks
	if st.Ready {
		h.ready.Set(1)
	} else {
		h.ready.Set(0)
	}
	onChange := h.onChange
	h.mu.Unlock()
	if changed && onChange != nil {
		onChange(st.Ready, why)
	}
	return st
}
