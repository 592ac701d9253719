package dynamodb

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
	"github.com/kandle/kandle/internal/testkit"
)

// TestRevisionsNeverGoBack writes revisions of candles in every order a
// redelivery or a second instance can bring them: the table keeps the
// highest rev of each window, an older rev is counted as stale (not an
// error, not retried), an item written before revisions existed (no rev
// attribute) takes any rev, and the reader returns the rev.
func TestRevisionsNeverGoBack(t *testing.T) {
	ctx := context.Background()
	dyn := testkit.Dynalite(t)
	var f *faultAPI
	h := newSink(t, historyConfig("revs", dyn.URL()), func(a API) API { f = newFaultAPI(a); return f })
	v := func(version int, rev uint32) []candle.Candle {
		cs := genCandles([]string{"BTC"}, []string{"1m"}, 3, version)
		for i := range cs {
			cs[i].Rev = rev
		}
		return cs
	}
	write := func(cs ...candle.Candle) {
		t.Helper()
		if err := h.sink.Write(ctx, cs); err != nil {
			t.Fatal(err)
		}
		if err := h.sink.Flush(ctx); err != nil {
			t.Fatalf("Flush: %v (an older revision must not be an error)", err)
		}
	}
	stored := func() []candle.Candle {
		t.Helper()
		cs, err := h.sink.Reader().Range(ctx, "BTC", "1m", 0, 1<<62)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	check := func(step string, want ...candle.Candle) {
		t.Helper()
		got := stored()
		if len(got) != len(want) {
			t.Fatalf("%s: %d items, want %d", step, len(got), len(want))
		}
		for i := range want {
			if !got[i].Equal(&want[i]) {
				t.Fatalf("%s: window %d:\n got %+v\nwant %+v", step, i, got[i], want[i])
			}
		}
	}

	r0, r1, r2 := v(1, 0), v(2, 1), v(3, 2)
	write(r0...)
	if _, ok := f.puts[0][attrRev]; ok {
		t.Fatalf("rev 0 stored as an attribute; an item at rev 0 must look as before revisions")
	}
	write(r2[0], r1[1]) // window 0 jumps to rev 2, window 1 to rev 1
	check("revised", r2[0], r1[1], r0[2])

	stale0 := metric(t, h.reg, "kandle_dynamodb_stale_writes_total", "table", "revs")
	write(r1[0], r0[1]) // older revisions after newer ones: refused
	check("after stale writes", r2[0], r1[1], r0[2])
	if got := metric(t, h.reg, "kandle_dynamodb_stale_writes_total", "table", "revs") - stale0; got != 2 {
		t.Fatalf("stale writes %v, want 2", got)
	}
	puts := f.Calls("PutItem")
	write(r0...) // a redelivery of the whole first batch
	check("after a redelivery of rev 0", r2[0], r1[1], r0[2])
	if n := f.Calls("PutItem") - puts; n != 3 {
		t.Fatalf("%d PutItem calls for 3 candles; a refused condition must not be retried", n)
	}

	// In one buffer the highest rev wins, whatever the order.
	r3 := v(4, 3)
	if err := h.sink.Write(ctx, []candle.Candle{r3[2], r1[2], r2[2]}); err != nil {
		t.Fatal(err)
	}
	if err := h.sink.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	check("one buffer", r2[0], r1[1], r3[2])

	// Equal rev rewrites (a redelivery of the same revision is idempotent).
	write(r2[0])
	check("same rev again", r2[0], r1[1], r3[2])

	// An item written before revisions existed has no rev: it reads as
	// rev 0 and any revision replaces it.
	legacy := genCandles([]string{"ETH"}, []string{"1m"}, 1, 1)[0]
	p, err := h.sink.candleItem(&legacy)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.raw.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("revs"), Item: p.item}); err != nil {
		t.Fatal(err)
	}
	c, ok, err := h.sink.Reader().Latest(ctx, "ETH", "1m")
	if err != nil || !ok || c.Rev != 0 || !c.Equal(&legacy) {
		t.Fatalf("Latest of an item without rev = %+v %v %v, want rev 0 %+v", c, ok, err, legacy)
	}
	rev5 := genCandles([]string{"ETH"}, []string{"1m"}, 1, 5)[0]
	rev5.Rev = 5
	write(rev5)
	c, _, err = h.sink.Reader().Latest(ctx, "ETH", "1m")
	if err != nil || !c.Equal(&rev5) {
		t.Fatalf("Latest after rev 5 = %+v (%v), want %+v", c, err, rev5)
	}
	it := partitionItems(t, h.raw, "revs", "pk", "ETH#1m")[0]
	if n, ok := it[attrRev].(*types.AttributeValueMemberN); !ok || n.Value != "5" {
		t.Fatalf("stored rev attribute %#v, want N 5", it[attrRev])
	}
}

// TestWithoutRevisionsCandlesGoInBatches: a sink whose candles carry no
// revisions (WithRevisions(false), what kandle sets when no processor it
// reads has revise_within) writes them with BatchWriteItem, not PutItem.
func TestWithoutRevisionsCandlesGoInBatches(t *testing.T) {
	ctx := context.Background()
	dyn := testkit.Dynalite(t)
	var f *faultAPI
	h := newSink(t, historyConfig("norevs", dyn.URL()), func(a API) API { f = newFaultAPI(a); return f }, WithRevisions(false))
	cs := genCandles([]string{"BTC"}, []string{"1m"}, 30, 1)
	if err := h.sink.Write(ctx, cs); err != nil {
		t.Fatal(err)
	}
	if err := h.sink.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := f.Calls("PutItem"); n != 0 {
		t.Errorf("%d PutItem calls, want none", n)
	}
	if n := f.Calls("BatchWriteItem"); n != 2 {
		t.Errorf("%d BatchWriteItem calls for 30 candles, want 2", n)
	}
	got, err := h.sink.Reader().Range(ctx, "BTC", "1m", 0, 1<<62)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(cs) {
		t.Fatalf("stored %d candles, want %d", len(got), len(cs))
	}
	for i := range cs {
		if !got[i].Equal(&cs[i]) {
			t.Fatalf("candle %d: %+v, want %+v", i, got[i], cs[i])
		}
	}
}

// TestLedgerCancelAndCorrection: in a trade ledger keyed by trade id, a
// correction overwrites the trade's item with the new price and quantity
// and says so (action "correct"), and a cancel leaves a tombstone (action
// "cancel", zero price and quantity) in its place: the ledger never keeps a
// taken-back trade as if it had happened.
func TestLedgerCancelAndCorrection(t *testing.T) {
	ctx := context.Background()
	dyn := testkit.Dynalite(t)
	cfg := Config{Table: TableSpec{Name: "ledger", PKAttribute: "pk", SKAttribute: "sk", SKType: "S"},
		Provision: true, Endpoint: dyn.URL(), PK: "{symbol}", SK: "{trade_id}"}
	h := newSink(t, cfg, nil)
	tr := func(id, price, qty string, a candle.Action) candle.Trade {
		t := candle.Trade{Key: "BTC", TS: 1_700_000_000_000, ID: id, Action: a}
		if price != "" {
			t.Price, t.Qty = decimal.MustParse(price), decimal.MustParse(qty)
		}
		return t
	}
	for _, batch := range [][]candle.Trade{
		{tr("1", "100", "2", candle.ActionTrade), tr("2", "101", "1", candle.ActionTrade)},
		{tr("1", "99.5", "2", candle.ActionCorrect), tr("2", "", "", candle.ActionCancel)},
	} {
		if err := h.sink.WriteTrades(ctx, batch); err != nil {
			t.Fatal(err)
		}
		if err := h.sink.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]candle.Trade{"1": tr("1", "99.5", "2", candle.ActionCorrect), "2": tr("2", "0", "0", candle.ActionCancel)}
	items := partitionItems(t, h.raw, "ledger", "pk", "BTC")
	if len(items) != 2 {
		t.Fatalf("%d items, want 2: %v", len(items), items)
	}
	for _, it := range items {
		got, err := itemTrade(it)
		if err != nil {
			t.Fatal(err)
		}
		if w := want[got.ID]; got.Price != w.Price || got.Qty != w.Qty || got.Action != w.Action {
			t.Errorf("trade %s: %+v, want %+v", got.ID, got, w)
		}
	}
}
