package dynamodb

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/kandle/kandle/internal/testkit"
)

// With provision: true, a table that disappears (deleted, or an in-memory
// emulator restarted) is provisioned again instead of failing forever.
func TestTableIsProvisionedAgainWhenItDisappears(t *testing.T) {
	dyn := testkit.Dynalite(t)
	h := newSink(t, historyConfig("again", dyn.URL()), nil)
	ctx := context.Background()
	first := genCandles([]string{"BTC"}, []string{"1m"}, 5, 1)
	if err := h.sink.Write(ctx, first); err != nil {
		t.Fatal(err)
	}
	if err := h.sink.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := h.raw.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String("again")}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // dynalite deletes after --deleteTableMs
	second := genCandles([]string{"ETH"}, []string{"1m"}, 5, 1)
	if err := h.sink.Write(ctx, second); err != nil {
		t.Fatal(err)
	}
	var err error
	for range 5 { // the engine retries Flush the same way
		if err = h.sink.Flush(ctx); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("flush after the table vanished: %v", err)
	}
	if got := partitionItems(t, h.raw, "again", "pk", "ETH#1m"); len(got) != 5 {
		t.Fatalf("%d ETH items after re-provisioning, want 5", len(got))
	}
}
