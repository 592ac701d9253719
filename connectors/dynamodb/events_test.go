package dynamodb

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/kandle/kandle/internal/testkit"
)

// TestEventsDeviceItems writes silence events with the seed's keys (PK
// DEVICE#{owner}, SK {device}#{event}) to dynalite twice (redelivery): one
// item per device and event, fields as attributes, a later event of the same
// level replacing the earlier one, and the TTL counted from fired_at.
func TestEventsDeviceItems(t *testing.T) {
	ctx := context.Background()
	dyn := testkit.Dynalite(t)
	cfg := Config{
		Table:     TableSpec{Name: "devices", PKAttribute: "pk", SKAttribute: "sk", SKType: "S", TTLAttribute: "expires_at"},
		Provision: true, Endpoint: dyn.URL(), PK: "DEVICE#{owner}", SK: "{device}#{event}",
		TTL: Duration(30 * 24 * time.Hour), RetryBase: Duration(5 * time.Millisecond), RetryMax: Duration(100 * time.Millisecond),
	}
	h := newSink(t, cfg, nil)
	evs := [][]byte{
		[]byte(`{"device":"d1","event":"unreachable","level":"unreachable","action":"status","due_at":"2026-01-04T08:00:00.000Z","fired_at":"2026-01-04T08:00:00.100Z","silent_ms":259200100,"owner":"alice"}`),
		[]byte(`{"device":"d2","event":"unreachable","level":"unreachable","action":"status","due_at":"2026-01-05T08:00:00.000Z","fired_at":"2026-01-05T08:00:00.000Z","silent_ms":259200000,"owner":"alice"}`),
		[]byte(`{"device":"d1","event":"recovered","level":"recovered","highest":"unreachable","recovered_at":"2026-01-06T08:00:00.000Z","silent_ms":432000000,"owner":"alice"}`),
		// a later silence of d1 replaces its unreachable item
		[]byte(`{"device":"d1","event":"unreachable","level":"unreachable","action":"status","due_at":"2026-01-09T08:00:00.000Z","fired_at":"2026-01-09T08:00:00.000Z","silent_ms":259200000,"owner":"alice"}`),
	}
	for round := 0; round < 2; round++ {
		if err := h.sink.WriteEvents(ctx, evs); err != nil {
			t.Fatal(err)
		}
		if err := h.sink.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	items := partitionItems(t, h.raw, "devices", "pk", "DEVICE#alice")
	got := map[string]map[string]types.AttributeValue{}
	for _, it := range items {
		got[attrString(it["sk"])] = it
	}
	if len(items) != 3 || got["d1#unreachable"] == nil || got["d2#unreachable"] == nil || got["d1#recovered"] == nil {
		t.Fatalf("%d items %v, want d1#unreachable, d2#unreachable, d1#recovered", len(items), got)
	}
	u := got["d1#unreachable"]
	if attrString(u["fired_at"]) != "2026-01-09T08:00:00.000Z" || attrString(u["action"]) != "status" {
		t.Fatalf("d1#unreachable = %v, want the later silence's event", u)
	}
	if n, ok := u["silent_ms"].(*types.AttributeValueMemberN); !ok || n.Value != "259200000" {
		t.Fatalf("silent_ms stored as %v, want the number 259200000", u["silent_ms"])
	}
	wantTTL := time.Date(2026, 2, 8, 8, 0, 0, 0, time.UTC).Unix()
	if e, ok := u["expires_at"].(*types.AttributeValueMemberN); !ok || e.Value != strconv.FormatInt(wantTTL, 10) {
		t.Fatalf("expires_at %v, want %d (30d after fired_at)", u["expires_at"], wantTTL)
	}
	if r := got["d1#recovered"]; attrString(r["highest"]) != "unreachable" {
		t.Fatalf("recovered item %v", r)
	}
	// An event without the key's fields is skipped and counted, not retried.
	if err := h.sink.WriteEvents(ctx, [][]byte{[]byte(`{"device":"d9","event":"alert1"}`)}); err != nil {
		t.Fatal(err)
	}
	if err := h.sink.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := metric(t, h.reg, "kandle_dynamodb_errors_total", "kind", "rejected"); n != 1 {
		t.Fatalf("rejected events counted %v, want 1", n)
	}
	// Candles cannot go to an event table.
	if err := h.sink.Write(ctx, genCandles([]string{"BTC"}, []string{"1m"}, 1, 1)); err == nil {
		t.Fatal("a candle was accepted by a sink keyed by event fields")
	}
}
