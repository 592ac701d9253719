package engine

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/kandle/kandle/internal/gen"
	"github.com/kandle/kandle/internal/testkit"
	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/topology"
)

// TestDeviceFleetThroughDevicesTopology feeds `kandle gen --profile
// devices` through the shipped devices.yaml in process: every device that
// went silent for more than 3 days becomes unreachable exactly once, the
// ones that came back recover exactly once, and healthy devices stay quiet.
func TestDeviceFleetThroughDevicesTopology(t *testing.T) {
	testkit.WallClockTest(t)
	top, err := topology.Load(filepath.Join(testkit.RepoRoot(t), "testdata/topologies/devices.yaml"), topology.Registry{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := gen.DefaultFleetConfig()
	cfg.Devices = 24
	fleet, err := gen.NewDeviceFleet(cfg)
	if err != nil {
		t.Fatal(err)
	}
	end := gen.DefaultStart.AddDate(0, 0, cfg.Days)
	p, err := NewPipeline(top, processors.FixedClock{T: end}) // a replay started after the fleet's last day
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	p.OnEvent = func(stage, _ string, ev *processors.Event, _ int32) {
		var e struct{ Device, Event, Highest string }
		if err := json.Unmarshal(ev.Value, &e); err != nil {
			t.Fatalf("event %s: %v", ev.Value, err)
		}
		count[e.Device+" "+e.Event]++
	}
	p.OnReject = func(stage string, r *processors.Rejection) {
		t.Errorf("%s rejected a generated reading: %s %s", stage, r.Reason, r.Detail)
	}
	var offs [3]int64
	for {
		k, v, ok := fleet.Next()
		if !ok {
			break
		}
		part := int32(len(k) % 3) // any stable device → partition mapping
		if err := p.FeedRecord("readings", processors.Record{Partition: part, Offset: offs[part], Key: k, Value: v, Timestamp: fleet.Stamp().UnixMilli()}); err != nil {
			t.Fatal(err)
		}
		offs[part]++
	}
	if err := p.AdvanceTo(end.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	if len(fleet.Silences) == 0 {
		t.Fatal("the fleet has no silent device")
	}
	for d := range cfg.Devices {
		id := fleetID(d)
		s, silent := fleet.Silences[id]
		if !silent {
			if n := count[id+" unreachable"]; n != 0 {
				t.Errorf("healthy %s went unreachable %d times", id, n)
			}
			continue
		}
		if n := count[id+" unreachable"]; n != 1 {
			t.Errorf("%s silent from %s: unreachable %d times, want 1", id, s[0], n)
		}
		wantRecovered := 0
		if !s[1].IsZero() {
			wantRecovered = 1
		}
		if n := count[id+" recovered"]; n != wantRecovered {
			t.Errorf("%s (back %s): recovered %d times, want %d", id, s[1], n, wantRecovered)
		}
	}
}

func fleetID(d int) string { return fmt.Sprintf("dev-%03d", d) }
