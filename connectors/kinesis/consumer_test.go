package kinesis

import (
	"context"
	"testing"
	"time"
)

// Two consumers split a 4-shard stream 2/2, every record is delivered, and a
// clean shutdown releases the leases.
func TestConsumersShareEvenly(t *testing.T) {
	e := newEnv(t, "share", 4)
	e.put(t, 20, 0, 400)
	a := e.startConsumer(t, "a", &recorder{})
	eventually(t, 10*time.Second, "a holds 4", func() bool { return len(a.c.Held()) == 4 })
	b := e.startConsumer(t, "b", &recorder{})
	eventually(t, 15*time.Second, "2/2 split", func() bool { return len(a.c.Held()) == 2 && len(b.c.Held()) == 2 })
	e.put(t, 20, 400, 800)
	eventually(t, 10*time.Second, "all 800 delivered", func() bool {
		n, _ := distinct(append(payloads(a.h.snapshot()), payloads(b.h.snapshot())...))
		return n == 800
	})
	a.close(t)
	b.close(t)
	tbl := &leaseTable{db: e.ddb, name: "leases", duration: time.Second, clock: systemClock{}}
	items, err := tbl.scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 4 {
		t.Fatalf("want 4 leases, got %d", len(items))
	}
	for _, it := range items {
		if it.Owner != "" {
			t.Errorf("lease %s still owned by %q after shutdown", it.ShardID, it.Owner)
		}
	}
	_, dupA := distinct(payloads(a.h.snapshot()))
	t.Logf("redelivered within a: %d", dupA)
}
