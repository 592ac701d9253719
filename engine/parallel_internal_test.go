package engine

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/topology"
)

// barrierProc is a processor that, on its first record, waits until every
// processor sharing its barrier has had its first record too, and records
// the offsets it is given.
type barrierProc struct {
	b       *barrier
	entered bool
	offsets []int64
}

type barrier struct {
	mu      sync.Mutex
	n       int
	all     chan struct{}
	timeout bool
}

func (b *barrier) arrive(wait time.Duration) {
	b.mu.Lock()
	b.n--
	if b.n == 0 {
		close(b.all)
	}
	b.mu.Unlock()
	select {
	case <-b.all:
	case <-time.After(wait):
		b.mu.Lock()
		b.timeout = true
		b.mu.Unlock()
	}
}

func (p *barrierProc) Process(rec processors.Record, _ *processors.Output) {
	if !p.entered {
		p.entered = true
		p.b.arrive(5 * time.Second)
	}
	p.offsets = append(p.offsets, rec.Offset)
}
func (*barrierProc) Tick(*processors.Output)       {}
func (*barrierProc) ResetIdle()                    {}
func (*barrierProc) Changes(func(key, val []byte)) {}
func (*barrierProc) Restore(key, val []byte) error { return nil }
func (*barrierProc) Active(func(c *candle.Candle)) {}
func recs(p int32, from, to int64) (rs []*kgo.Record) {
	for o := from; o < to; o++ {
		rs = append(rs, &kgo.Record{Topic: "in", Partition: p, Offset: o, Value: []byte("{}")})
	}
	return rs
}

// The partitions one poll returns are processed at the same time, each in
// its own order: every partition's processor waits in its first Process
// until all of them are there, which never happens when they run one after
// the other (the wait then times out). A partition that comes in two
// fetches of the poll is processed in fetch order, by one goroutine.
func TestPartitionsOfOnePollRunConcurrently(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(3))
	b := &barrier{n: 3, all: make(chan struct{})}
	s := &liveStage{spec: &stageSpec{Stage: topology.Stage{Name: "t"}, InputTopic: "in"}, e: &Engine{clock: processors.SystemClock{}},
		parts: map[int32]*partState{}, owned: map[int32]bool{}, inTxn: true,
		accepted:        prometheus.NewCounter(prometheus.CounterOpts{Name: "accepted"}),
		rejectedRecords: prometheus.NewCounter(prometheus.CounterOpts{Name: "rejected"})}
	procs := map[int32]*barrierProc{}
	for p := range int32(3) {
		procs[p] = &barrierProc{b: b}
		s.parts[p] = &partState{unit: unit{proc: procs[p]}, nextInput: 1} // offset 0 is in the restored state
		s.owned[p] = true
	}
	fetches := kgo.Fetches{
		{Topics: []kgo.FetchTopic{{Topic: "in", Partitions: []kgo.FetchPartition{
			{Partition: 0, Records: recs(0, 0, 3)}, {Partition: 1, Records: recs(1, 0, 4)}, {Partition: 2, Records: recs(2, 0, 2)}}}}},
		{Topics: []kgo.FetchTopic{{Topic: "in", Partitions: []kgo.FetchPartition{{Partition: 0, Records: recs(0, 3, 6)}}}}},
	}
	if err := s.processFetches(context.Background(), fetches); err != nil {
		t.Fatal(err)
	}
	if b.timeout {
		t.Fatal("the partitions of one poll were processed one after the other")
	}
	want := map[int32][]int64{0: {1, 2, 3, 4, 5}, 1: {1, 2, 3}, 2: {1}}
	for p, pr := range procs {
		if !slices.Equal(pr.offsets, want[p]) {
			t.Errorf("partition %d processed offsets %v, want %v", p, pr.offsets, want[p])
		}
		ps := s.parts[p]
		if last := want[p][len(want[p])-1]; ps.nextInput != last+1 || !ps.consumed || !ps.touched {
			t.Errorf("partition %d: next input %d (want %d), consumed %v, touched %v", p, ps.nextInput, last+1, ps.consumed, ps.touched)
		}
	}
}
