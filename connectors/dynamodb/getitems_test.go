package dynamodb

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/internal/testkit"
)

// unprocessedAPI hands back all but the first 10 keys of the first
// BatchGetItem as UnprocessedKeys, as DynamoDB does under throttling.
type unprocessedAPI struct {
	API
	calls int
	sizes []int
}

func (u *unprocessedAPI) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	u.calls++
	for _, ka := range in.RequestItems {
		u.sizes = append(u.sizes, len(ka.Keys))
	}
	inner := u.API.(batchGetter)
	if u.calls > 1 {
		return inner.BatchGetItem(ctx, in, o...)
	}
	first := map[string]types.KeysAndAttributes{}
	rest := map[string]types.KeysAndAttributes{}
	for table, ka := range in.RequestItems {
		n := min(10, len(ka.Keys))
		first[table] = types.KeysAndAttributes{Keys: ka.Keys[:n], ConsistentRead: ka.ConsistentRead}
		rest[table] = types.KeysAndAttributes{Keys: ka.Keys[n:], ConsistentRead: ka.ConsistentRead}
	}
	out, err := inner.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: first}, o...)
	if err != nil {
		return nil, err
	}
	out.UnprocessedKeys = rest
	return out, nil
}

// TestLatestReadingsOfManyDevices keeps one item per device current (sk
// template "latest": a later reading overwrites it) and reads 230 devices
// at once: chunks of at most 100 keys, the unprocessed keys retried, a
// device without readings absent, strongly consistent.
func TestLatestReadingsOfManyDevices(t *testing.T) {
	ctx := context.Background()
	dyn := testkit.Dynalite(t)
	cfg := Config{Table: TableSpec{Name: "latest", PKAttribute: "pk", SKAttribute: "sk", SKType: "S"},
		Provision: true, Endpoint: dyn.URL(), PK: "{symbol}", SK: "latest",
		RetryBase: Duration(5 * time.Millisecond), RetryMax: Duration(50 * time.Millisecond)}
	var u *unprocessedAPI
	h := newSink(t, cfg, func(a API) API { u = &unprocessedAPI{API: a}; return u })
	const devices = 230
	var keys []string
	for round := 0; round < 2; round++ {
		var ts []candle.Trade
		for d := range devices {
			id := fmt.Sprintf("dev-%03d", d)
			if round == 0 {
				keys = append(keys, id)
			}
			ts = append(ts, candle.Trade{Key: id, TS: int64(1_700_000_000_000 + round*60_000), Price: dec(fmt.Sprintf("%d.%d", 20+round, d)), Qty: dec("1")})
		}
		if err := h.sink.WriteTrades(ctx, ts); err != nil {
			t.Fatal(err)
		}
		if err := h.sink.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got, err := h.sink.Reader().GetItems(ctx, append(keys, "dev-none"), true)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != devices {
		t.Fatalf("%d items, want %d", len(got), devices)
	}
	for d, k := range keys {
		tr, err := itemTrade(got[k])
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("21.%d", d); tr.Price.String() != dec(want).String() || tr.TS != 1_700_000_060_000 {
			t.Fatalf("%s: latest reading %s at %d, want %s (the later one)", k, tr.Price, tr.TS, want)
		}
	}
	for _, n := range u.sizes {
		if n > batchGetMax {
			t.Fatalf("a BatchGetItem asked for %d keys (> 100): %v", n, u.sizes)
		}
	}
	if u.calls < 4 { // 100 (90 unprocessed) + 90 retried + 100 + 31
		t.Fatalf("%d BatchGetItem calls (%v): the unprocessed keys were not retried", u.calls, u.sizes)
	}
}

// TestQueryIndexByLevel finds every device at one silence level through a
// declared global secondary index on the events' level attribute.
func TestQueryIndexByLevel(t *testing.T) {
	ctx := context.Background()
	dyn := testkit.Dynalite(t)
	cfg := Config{Table: TableSpec{Name: "events", PKAttribute: "pk", SKAttribute: "sk", SKType: "S",
		GSIs: map[string]IndexSpec{"by_level": {PK: "level", PKType: "S", SK: "sk", SKType: "S", Projection: "ALL"}}},
		Provision: true, Endpoint: dyn.URL(), PK: "DEVICE#{owner}", SK: "{device}#{event}",
		RetryBase: Duration(5 * time.Millisecond), RetryMax: Duration(50 * time.Millisecond)}
	h := newSink(t, cfg, nil)
	var evs [][]byte
	for d := range 12 {
		level := []string{"unreachable", "alert1", "alert2"}[d%3]
		evs = append(evs, fmt.Appendf(nil, `{"device":"d%02d","event":%q,"level":%q,"fired_at":"2026-01-04T08:00:00.000Z","owner":"o%d"}`, d, level, level, d%4))
	}
	if err := h.sink.WriteEvents(ctx, evs); err != nil {
		t.Fatal(err)
	}
	if err := h.sink.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	items, err := h.sink.Reader().QueryIndex(ctx, "by_level", "alert1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 4 {
		t.Fatalf("%d devices at alert1, want 4: %v", len(items), items)
	}
	for _, it := range items {
		if attrString(it["level"]) != "alert1" {
			t.Fatalf("index returned %v", it)
		}
	}
	if _, err := h.sink.Reader().QueryIndex(ctx, "by_owner", "o1", 0); err == nil {
		t.Fatal("an undeclared index was queried")
	}
}
