package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/connectors/dynamodb"
	"github.com/kandle/kandle/decimal"
	"github.com/kandle/kandle/internal/testkit"
	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/serve"
	"github.com/kandle/kandle/topology"
)

// fleetServeTopology stores a fleet as the device API reads it: readings
// by time over two write shards, one latest item per device, the current
// silence status per device (with a GSI on its level) and every silence
// event per device.
const fleetServeTopology = `
name: fleet
brokers: [127.0.0.1:1]
metrics: ""
sources:
  readings: {topic: device-readings, partitions: 1, fields: {key: deviceId, time: timestamp, price: value, qty: "", id: ""}}
processors:
  1m: {kind: candles, from: readings, timeframe: 1m}
  silence:
    kind: silence
    from: readings
    carry: [owner]
    levels:
      - {name: unreachable, after: 3d, action: status}
      - {name: alert1, after: 7d, action: alert}
      - {name: alert2, after: 10d, action: alert}
sinks:
  readings:
    kind: dynamodb
    from: readings
    endpoint: %[1]s
    provision: true
    shards: 2
    table: {name: readings, sk_type: N}
    pk: "{symbol}#{shard}"
    sk: "{ts}"
  latest:
    kind: dynamodb
    from: readings
    endpoint: %[1]s
    provision: true
    table: {name: latest, sk_type: S}
    pk: "{symbol}"
    sk: "latest"
  status:
    kind: dynamodb
    from: [silence]
    endpoint: %[1]s
    provision: true
    table:
      name: device_status
      sk_type: S
      gsis:
        by_level: {pk: level, pk_type: S, sk: pk, sk_type: S}
    pk: "DEVICE#{device}"
    sk: "status"
  history:
    kind: dynamodb
    from: [silence]
    endpoint: %[1]s
    provision: true
    table: {name: device_events, sk_type: S}
    pk: "DEVICE#{device}"
    sk: "{ts}#{event}"
serve:
  devices: {readings: readings, latest: latest, status: status, status_index: by_level, history: history}
`

// fleetAPI is a device API served over dynalite, filled with a fleet from
// kandle gen --profile devices and the silence events the silence
// processor makes of it.
type fleetAPI struct {
	url      string
	h        http.Handler
	readings map[string][]candle.Trade // per device, in time order
	events   map[string][]map[string]any
}

func newFleetAPI(t testing.TB) *fleetAPI {
	t.Helper()
	ddb := testkit.Dynalite(t)
	tp, err := topology.Load(writeFile(t, "fleet.yaml", fmt.Sprintf(fleetServeTopology, ddb.URL())), sinkRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	out, errOut, code := runKandle(t, "gen", "--profile", "devices", "--devices", "12", "--days", "24", "--silent-frac", "0.5")
	if code != 0 {
		t.Fatalf("kandle gen: exit %d: %s", code, errOut)
	}
	sil, err := processors.NewSilence(processors.SilenceConfig{Key: "deviceId", Time: "timestamp", Carry: []string{"owner"},
		Levels: []processors.SilenceLevel{{Name: "unreachable", After: 72 * time.Hour, Action: "status"},
			{Name: "alert1", After: 168 * time.Hour, Action: "alert"}, {Name: "alert2", After: 240 * time.Hour, Action: "alert"}}},
		processors.FixedClock{T: time.Unix(0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	f := &fleetAPI{readings: map[string][]candle.Trade{}, events: map[string][]map[string]any{}}
	var trades []candle.Trade
	var evOut processors.Output
	var last int64
	for i, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r struct{ DeviceID, Timestamp, Value string }
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		at, err := time.Parse(time.RFC3339, r.Timestamp)
		if err != nil {
			t.Fatal(err)
		}
		tr := candle.Trade{Key: r.DeviceID, TS: at.UnixMilli(), Price: decimal.MustParse(r.Value), Qty: decimal.MustParse("1")}
		trades = append(trades, tr)
		f.readings[r.DeviceID] = append(f.readings[r.DeviceID], tr)
		sil.Process(processors.Record{Offset: int64(i), Key: []byte(r.DeviceID), Value: []byte(line), Timestamp: tr.TS}, &evOut)
		last = tr.TS
	}
	sil.AdvanceTo(last+1, &evOut)
	var evs [][]byte
	for _, ev := range evOut.Events {
		var m map[string]any
		if err := json.Unmarshal(ev.Value, &m); err != nil {
			t.Fatal(err)
		}
		f.events[ev.Key] = append(f.events[ev.Key], m)
		evs = append(evs, ev.Value)
	}
	if len(f.events) < 3 {
		t.Fatalf("the fleet has %d silent devices; the test needs a few", len(f.events))
	}
	for _, name := range []string{"readings", "latest", "status", "history"} {
		s, err := dynamodb.New(ctx, *tp.Sinks[name].Config.(*dynamodb.Config))
		if err != nil {
			t.Fatal(err)
		}
		if name == "readings" || name == "latest" {
			err = s.WriteTrades(ctx, trades)
		} else {
			err = s.WriteEvents(ctx, evs)
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	e := &env{stdout: io.Discard, stderr: io.Discard, log: slog.New(slog.DiscardHandler), logLevel: new(slog.LevelVar)}
	o, closeStores, err := serveOptions(ctx, e, tp, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeStores)
	srv, err := serve.New(o)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	f.url, f.h = hs.URL, srv.Handler()
	return f
}

// get fetches path and decodes its JSON answer into v (when not nil).
func (f *fleetAPI) get(t *testing.T, path string, v any) int {
	t.Helper()
	res, err := http.Get(f.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("GET %s: %d, Content-Type %q: %s", path, res.StatusCode, ct, b)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("GET %s: %d, %v: %s", path, res.StatusCode, err, b)
		}
	}
	return res.StatusCode
}

type readingJSON struct {
	Device, Time, Value, Qty string
	TS                       int64
}

func readingOf(device string, tr candle.Trade) readingJSON {
	return readingJSON{Device: device, TS: tr.TS, Time: time.UnixMilli(tr.TS).UTC().Format("2006-01-02T15:04:05.000Z"),
		Value: tr.Price.String(), Qty: tr.Qty.String()}
}

// TestServeDevices: the device read API answers for a fleet from kandle
// gen --profile devices stored in dynalite: each device's latest reading,
// its readings by time paged to the end, the devices at each silence level
// through the status index, and each device's silence history — exactly
// what was written.
func TestServeDevices(t *testing.T) {
	f := newFleetAPI(t)
	for dev, trs := range f.readings {
		var got readingJSON
		if code := f.get(t, "/v1/devices/"+url.PathEscape(dev)+"/latest", &got); code != 200 || got != readingOf(dev, trs[len(trs)-1]) {
			t.Fatalf("latest of %s: %d %+v, want %+v", dev, code, got, readingOf(dev, trs[len(trs)-1]))
		}
	}

	// Readings: whole history in pages of 5 across both shards, then a
	// range (start inclusive, end exclusive).
	type readingsPage struct {
		Device     string
		Readings   []readingJSON
		NextCursor string `json:"next_cursor"`
	}
	for dev, trs := range f.readings {
		var all []readingJSON
		path := "/v1/devices/" + dev + "/readings?limit=5"
		for pages := 0; ; pages++ {
			var p readingsPage
			if code := f.get(t, path, &p); code != 200 || p.Device != dev || len(p.Readings) > 5 || pages > len(trs) {
				t.Fatalf("GET %s: %d %+v", path, code, p)
			}
			all = append(all, p.Readings...)
			if p.NextCursor == "" {
				break
			}
			path = "/v1/devices/" + dev + "/readings?limit=5&cursor=" + p.NextCursor
		}
		var want []readingJSON
		for _, tr := range trs {
			want = append(want, readingOf(dev, tr))
		}
		if !slices.Equal(all, want) {
			t.Fatalf("readings of %s:\n got %+v\nwant %+v", dev, all, want)
		}
		if len(trs) < 7 {
			continue
		}
		lo, hi := trs[2].TS, trs[len(trs)-3].TS
		var p readingsPage
		if code := f.get(t, fmt.Sprintf("/v1/devices/%s/readings?start=%d&end=%s&limit=1000", dev, lo,
			time.UnixMilli(hi).UTC().Format(time.RFC3339Nano)), &p); code != 200 || !slices.Equal(p.Readings, want[2:len(want)-3]) || p.NextCursor != "" {
			t.Fatalf("readings of %s in a range [%d, %d): %d %+v", dev, lo, hi, code, p)
		}
	}

	// Status: every device's current level is its last event's, listed
	// under that level in pages of 2 without repeats.
	wantBy := map[string][]string{}
	for dev, evs := range f.events {
		lvl := evs[len(evs)-1]["level"].(string)
		wantBy[lvl] = append(wantBy[lvl], dev)
	}
	if len(wantBy) < 2 {
		t.Fatalf("the fleet's silences end in %d levels; the test wants several: %v", len(wantBy), wantBy)
	}
	for _, lvl := range []string{"unreachable", "alert1", "alert2", "recovered"} {
		var got []string
		path := "/v1/devices?status=" + lvl + "&limit=2"
		for {
			var p struct {
				Status     string
				Devices    []map[string]any
				NextCursor string `json:"next_cursor"`
			}
			if code := f.get(t, path, &p); code != 200 || p.Status != lvl || len(p.Devices) > 2 {
				t.Fatalf("GET %s: %d %+v", path, code, p)
			}
			for _, d := range p.Devices {
				if d["level"] != lvl || d["owner"] == nil || d["pk"] != nil {
					t.Fatalf("GET %s: item %v", path, d)
				}
				got = append(got, d["device"].(string))
			}
			if p.NextCursor == "" {
				break
			}
			path = "/v1/devices?status=" + lvl + "&limit=2&cursor=" + p.NextCursor
		}
		slices.Sort(got)
		want := wantBy[lvl]
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("devices at %s: %v, want %v", lvl, got, want)
		}
	}

	// Silence history: each event in order, exactly as emitted.
	for dev, evs := range f.events {
		var p struct {
			Device string
			Events []map[string]any
		}
		if code := f.get(t, "/v1/devices/"+dev+"/silences", &p); code != 200 || len(p.Events) != len(evs) {
			t.Fatalf("silences of %s: %d %+v, want %d events", dev, code, p, len(evs))
		}
		for i, ev := range evs {
			for _, k := range []string{"event", "level", "fired_at", "recovered_at", "silent_ms", "owner"} {
				if fmt.Sprint(p.Events[i][k]) != fmt.Sprint(ev[k]) {
					t.Fatalf("silence %d of %s: %s = %v, want %v", i, dev, k, p.Events[i][k], ev[k])
				}
			}
		}
	}
	// A device that never went silent has an empty history, not a 404.
	for dev := range f.readings {
		if _, silent := f.events[dev]; !silent {
			var p struct{ Events []any }
			if code := f.get(t, "/v1/devices/"+dev+"/silences", &p); code != 200 || len(p.Events) != 0 {
				t.Fatalf("silences of quiet-free %s: %d %+v", dev, code, p)
			}
			break
		}
	}
}

// TestServeDevicesBadRequests: unknown devices, odd ids, forged cursors,
// unknown levels and bad limits or ranges are 4xx answers whose JSON error
// says what to do; none is a 5xx.
func TestServeDevicesBadRequests(t *testing.T) {
	f := newFleetAPI(t)
	var dev string
	for d := range f.readings {
		dev = d
		break
	}
	var other struct {
		NextCursor string `json:"next_cursor"`
	}
	f.get(t, "/v1/devices/"+dev+"/readings?limit=1", &other)
	for _, c := range []struct {
		path string
		code int
		msg  string
	}{
		{"/v1/devices/nope/latest", 404, `device "nope" has no reading`},
		{"/v1/devices/nope/readings", 404, `device "nope" has no reading`},
		{"/v1/devices/nope/silences", 404, `no reading and no silence event`},
		{"/v1/devices/a%01b/latest", 400, "control characters"},
		{"/v1/devices/%ff%fe/latest", 400, "not UTF-8"},
		{"/v1/devices/" + strings.Repeat("x", 300) + "/latest", 400, "at most 256 bytes"},
		{"/v1/devices/" + dev + "/readings?cursor=garbage", 400, "start again without it"},
		{"/v1/devices/" + dev + "x/readings?cursor=" + other.NextCursor, 400, "start again without it"},
		{"/v1/devices/" + dev + "/silences?cursor=" + other.NextCursor, 400, "start again without it"},
		{"/v1/devices/" + dev + "/readings?start=2026-01-02T00:00:00Z&end=2026-01-01T00:00:00Z", 400, "end (1767225600000) must be after start"},
		{"/v1/devices/" + dev + "/readings?start=yesterday", 400, "neither epoch milliseconds nor RFC 3339"},
		{"/v1/devices/" + dev + "/readings?limit=0", 400, "whole number from 1 to"},
		{"/v1/devices/" + dev + "/readings?limit=1000000", 400, "whole number from 1 to"},
		{"/v1/devices?status=gone", 400, `"gone" is not a silence level; use one of unreachable, alert1, alert2, recovered`},
		{"/v1/devices", 400, "status: required"},
		{"/v1/devices/" + dev + "/nope", 404, "no such endpoint"},
	} {
		var e struct{ Error string }
		if code := f.get(t, c.path, &e); code != c.code || !strings.Contains(e.Error, c.msg) {
			t.Errorf("GET %s: %d %q, want %d with %q", c.path, code, e.Error, c.code, c.msg)
		}
	}
}

// FuzzDeviceRequests: whatever path and query a client sends to the device
// API (ids with odd bytes, levels, ranges, limits, forged cursors), the
// fleet's server over dynalite answers a 2xx or a 4xx with a JSON error
// saying what to do, never a 5xx (a request DynamoDB refuses) or a crash.
func FuzzDeviceRequests(f *testing.F) {
	fl := newFleetAPI(f)
	var dev string
	for d := range fl.readings {
		dev = max(dev, d)
	}
	for _, s := range []string{
		"/v1/devices/" + dev + "/latest",
		"/v1/devices/" + dev + "/readings?limit=3",
		"/v1/devices/" + dev + "/readings?start=2024-01-03T00:00:00Z&end=1704758400000&limit=2",
		"/v1/devices/" + dev + "/readings?cursor=eyJrIjoicmVhZGluZ3MiLCJkIjoiZGV2LTAxMSIsInAiOiJleUp3SWpwYklqRTNNRFF4TnpZM01EVXdNREFpTENJaVhTd2laQ0k2VzJaaGJITmxMR1poYkhObFhYMCJ9",
		"/v1/devices/" + dev + "/silences?limit=1",
		"/v1/devices?status=unreachable&limit=1",
		"/v1/devices?status=recovered&cursor=eyJrIjoic3RhdHVzIiwicyI6InJlY292ZXJlZCIsInAiOiJleUpzWlhabGJDSTZJbkpsWTI5MlpYSmxaQ0o5In0",
		"/v1/devices/%00/latest", "/v1/devices/%ff/readings", "/v1/devices/a%2Fb/silences",
		"/v1/devices/" + strings.Repeat("%e2%82%ac", 90) + "/latest",
		"/v1/devices/x/readings?start=253402300799999&end=253402300799999",
		"/v1/devices?status=", "/v1/devices/x", "/v1/devices//latest",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		u, err := url.ParseRequestURI(target)
		if err != nil || strings.ContainsAny(target, " \r\n") {
			return // the HTTP server refuses such a request line itself
		}
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.URL, r.RequestURI = u, target
		rec := httptest.NewRecorder()
		fl.h.ServeHTTP(rec, r)
		if !strings.HasPrefix(u.Path, "/v1/") {
			return
		}
		if rec.Code >= 500 {
			t.Fatalf("GET %q: %d %s", target, rec.Code, rec.Body)
		}
		var e struct{ Error string }
		if rec.Code >= 400 && (json.Unmarshal(rec.Body.Bytes(), &e) != nil || len(e.Error) < 10) {
			t.Fatalf("GET %q: %d without a JSON error saying what to do: %s", target, rec.Code, rec.Body)
		}
	})
}
