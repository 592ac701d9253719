package engine

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/connectors/kinesis"
	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/topology"
)

// countingProc counts the idle calls a stage makes.
type countingProc struct{ ticks, resets int }

func (p *countingProc) Process(processors.Record, *processors.Output) {}
func (p *countingProc) Tick(*processors.Output)                       { p.ticks++ }
func (p *countingProc) ResetIdle()                                    { p.resets++ }
func (p *countingProc) Changes(func(key, val []byte))                 {}
func (p *countingProc) Restore(key, val []byte) error                 { return nil }
func (p *countingProc) Active(func(c *candle.Candle))                 {}

// A Kinesis shard advances by the wall clock only while its reads reach
// the tip (MillisBehindLatest 0): a freshly opened shard and a shard that
// is behind restart their idle clock instead, and a shard whose last read
// at the tip is idle_timeout old (its reads stall: a slow or throttled
// service, a starved process) waits for a new one.
func TestKinesisShardIdleOnlyAtTheTip(t *testing.T) {
	proc := &countingProc{}
	clock := &processors.FixedClock{T: time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)}
	sh := &shardState{unit: unit{proc: proc}, id: "shardId-000000000001", cl: &kgo.Client{}, behind: true}
	k := &kinesisStage{log: slog.Default(), shards: map[string]*shardState{sh.id: sh},
		e: &Engine{clock: clock}, spec: &stageSpec{Stage: topology.Stage{Processor: &topology.Processor{IdleTimeout: 5 * time.Second}}}}
	ctx := context.Background()
	shard := kinesis.Shard{ID: sh.id}

	k.tickShard(ctx, sh) // opened, not read yet
	if proc.ticks != 0 || proc.resets != 1 {
		t.Fatalf("a shard not read since it was opened: ticks %d resets %d, want 0 and 1", proc.ticks, proc.resets)
	}
	k.Position(shard, 0)
	k.tickShard(ctx, sh)
	if proc.ticks != 1 {
		t.Fatalf("a shard at its tip did not tick")
	}
	k.Position(shard, 1500)
	k.tickShard(ctx, sh)
	if proc.ticks != 1 || proc.resets != 3 {
		t.Fatalf("a shard 1.5s behind: ticks %d resets %d, want 1 and 3", proc.ticks, proc.resets)
	}
	k.Position(shard, 0)
	k.tickShard(ctx, sh)
	if proc.ticks != 2 {
		t.Fatalf("a shard back at its tip did not tick")
	}
	clock.T = clock.T.Add(4 * time.Second)
	k.tickShard(ctx, sh)
	if proc.ticks != 3 {
		t.Fatalf("a shard read at its tip 4s ago (idle_timeout 5s) did not tick")
	}
	clock.T = clock.T.Add(time.Second) // no read returned for idle_timeout
	k.tickShard(ctx, sh)
	if proc.ticks != 3 {
		t.Fatalf("a shard whose last read at the tip is idle_timeout old ticked: records put since may be unread")
	}
	k.Position(shard, 0)
	k.tickShard(ctx, sh)
	if proc.ticks != 4 {
		t.Fatalf("a shard read at its tip again did not tick")
	}

	// A shard closed by a split or merge is quiet because its keys went
	// to its children: it never advances by the wall clock, and one not
	// listed open recently enough waits for a listing.
	open, age := true, time.Second
	sh.listed = func() (bool, time.Duration) { return open, age }
	k.tickShard(ctx, sh)
	if proc.ticks != 5 {
		t.Fatalf("a shard listed open 1s ago did not tick")
	}
	open = false
	k.tickShard(ctx, sh)
	if proc.ticks != 5 {
		t.Fatalf("a shard listed closed (split) ticked: it would close windows whose trades its children hold")
	}
	open, age = true, 5*time.Second
	k.tickShard(ctx, sh)
	if proc.ticks != 5 {
		t.Fatalf("a shard whose last listing is idle_timeout old ticked: it may have been split since")
	}
}
