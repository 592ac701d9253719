package gen

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// TestDeviceFleet: the same config gives the same bytes; readings come in
// time order, stamped with their reading time; silent devices send nothing
// during their silence and the ones that come back report again.
func TestDeviceFleet(t *testing.T) {
	cfg := DefaultFleetConfig()
	a, err := NewDeviceFleet(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewDeviceFleet(cfg)
	last := map[string]time.Time{}
	var prev time.Time
	gaps := map[string]time.Duration{}
	for {
		k, v, ok := a.Next()
		k2, v2, _ := b.Next()
		if !ok {
			break
		}
		if !bytes.Equal(k, k2) || !bytes.Equal(v, v2) {
			t.Fatal("two fleets of one config differ")
		}
		var r struct {
			DeviceID  string `json:"deviceId"`
			Timestamp time.Time
			Humidity  string
		}
		if err := json.Unmarshal(v, &r); err != nil || r.DeviceID != string(k) || r.Humidity == "" {
			t.Fatalf("reading %s: %v", v, err)
		}
		if !a.Stamp().Equal(r.Timestamp) || r.Timestamp.Before(prev) {
			t.Fatalf("reading %s stamped %s after %s", v, a.Stamp(), prev)
		}
		prev = r.Timestamp
		if l, ok := last[r.DeviceID]; ok {
			gaps[r.DeviceID] = max(gaps[r.DeviceID], r.Timestamp.Sub(l))
		}
		last[r.DeviceID] = r.Timestamp
	}
	if len(a.Silences) != 5 {
		t.Fatalf("%d silent devices, want a quarter of 20", len(a.Silences))
	}
	for id, s := range a.Silences {
		if s[1].IsZero() {
			if !last[id].Before(s[0]) {
				t.Errorf("%s never comes back but reported at %s after going quiet at %s", id, last[id], s[0])
			}
			continue
		}
		if gaps[id] < cfg.MinSilence {
			t.Errorf("%s silent %s→%s: largest gap %s", id, s[0], s[1], gaps[id])
		}
	}
}
