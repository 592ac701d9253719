package gen

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"
)

// FleetConfig describes a fleet of devices that report about once a day,
// some of which go silent for days and come back (the device-monitoring
// demo of testdata/topologies/devices.yaml).
type FleetConfig struct {
	Devices int           // number of devices
	Days    int           // days of readings
	Every   time.Duration // report interval of a healthy device
	Start   time.Time     // first day (zero: DefaultStart)
	Seed    uint64
	// SilentFrac is the fraction of devices that go silent once, for
	// MinSilence..MaxSilence, at a random time; SilentFrac of those
	// (rounded down) never come back.
	SilentFrac             float64
	MinSilence, MaxSilence time.Duration
}

// DefaultFleetConfig is 20 devices over 21 days, a reading a day, a quarter
// of them silent for 4 to 12 days.
func DefaultFleetConfig() FleetConfig {
	return FleetConfig{Devices: 20, Days: 21, Every: 24 * time.Hour, Seed: 1, SilentFrac: 0.25,
		MinSilence: 4 * 24 * time.Hour, MaxSilence: 12 * 24 * time.Hour}
}

// DeviceFleet makes the readings of a FleetConfig in time order:
// {"deviceId":"dev-007","owner":"owner-2","timestamp":"…","value":"21.3",
// "temperature":"21.3","humidity":"48.0","battery":"0.87"}, values as exact
// decimal strings. The Kafka timestamp of each record (Stamp) is its
// reading time, as if every reading was ingested when it was taken, so
// silence levels fire by the fleet's own time in live runs and replays.
type DeviceFleet struct {
	recs  []fleetRec
	next  int
	stamp time.Time
	// Silences lists, per silent device, when it went quiet and when it came back (zero: never).
	Silences map[string][2]time.Time
}

type fleetRec struct {
	at         time.Time
	key, value []byte
}

// NewDeviceFleet generates the whole fleet (Devices × Days readings).
func NewDeviceFleet(cfg FleetConfig) (*DeviceFleet, error) {
	if cfg.Devices < 1 || cfg.Days < 1 || cfg.Every <= 0 {
		return nil, errors.New("gen: a fleet needs devices ≥ 1, days ≥ 1 and a positive report interval")
	}
	if cfg.SilentFrac < 0 || cfg.SilentFrac > 1 || cfg.MinSilence > cfg.MaxSilence {
		return nil, errors.New("gen: silent fraction must be in 0..1 and min silence ≤ max silence")
	}
	start := cfg.Start
	if start.IsZero() {
		start = DefaultStart
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0xdec1ce))
	end := start.Add(time.Duration(cfg.Days) * 24 * time.Hour)
	silent := int(float64(cfg.Devices) * cfg.SilentFrac)
	gone := int(float64(silent) * cfg.SilentFrac)
	f := &DeviceFleet{Silences: map[string][2]time.Time{}}
	for d := range cfg.Devices {
		id := fmt.Sprintf("dev-%03d", d)
		offset := time.Duration(rng.Int64N(int64(cfg.Every))).Truncate(time.Second)
		var quiet, back time.Time
		if d < silent {
			quiet = start.Add(time.Duration(rng.Int64N(int64(end.Sub(start)) / 3)))
			length := cfg.MinSilence + time.Duration(rng.Int64N(int64(cfg.MaxSilence-cfg.MinSilence)+1))
			if d >= gone && quiet.Add(length).Before(end) {
				back = quiet.Add(length)
			}
			f.Silences[id] = [2]time.Time{quiet, back}
		}
		temp, hum, batt := 1800+rng.Int64N(600), 300+rng.Int64N(400), int64(100)
		for at := start.Add(offset); at.Before(end); at = at.Add(cfg.Every) {
			if !quiet.IsZero() && !at.Before(quiet) && (back.IsZero() || at.Before(back)) {
				continue
			}
			temp += rng.Int64N(41) - 20
			hum = min(max(hum+rng.Int64N(21)-10, 0), 1000)
			if rng.IntN(4) == 0 && batt > 5 {
				batt--
			}
			v := fmt.Appendf(nil, `{"deviceId":%q,"owner":"owner-%d","timestamp":%q,"value":%q,"temperature":%q,"humidity":%q,"battery":%q}`,
				id, d%5, at.UTC().Format(time.RFC3339), dec(temp, 2), dec(temp, 2), dec(hum, 1), dec(batt, 2))
			f.recs = append(f.recs, fleetRec{at: at, key: []byte(id), value: v})
		}
	}
	slices.SortStableFunc(f.recs, func(a, b fleetRec) int { return a.at.Compare(b.at) })
	return f, nil
}

// dec formats v / 10^places as an exact decimal string.
func dec(v int64, places int) string {
	s := strconv.FormatInt(abs(v), 10)
	for len(s) <= places {
		s = "0" + s
	}
	out := s[:len(s)-places] + "." + s[len(s)-places:]
	if v < 0 {
		out = "-" + out
	}
	return out
}

// Next returns the next reading in time order.
func (f *DeviceFleet) Next() (key, value []byte, ok bool) {
	if f.next >= len(f.recs) {
		return nil, nil, false
	}
	r := f.recs[f.next]
	f.next++
	f.stamp = r.at
	return r.key, r.value, true
}

// Stamp is the ingestion time of the record Next returned last.
func (f *DeviceFleet) Stamp() time.Time { return f.stamp }

// Len is the number of readings.
func (f *DeviceFleet) Len() int { return len(f.recs) }
