package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/internal/testkit"
)

// Local Pebble state that does not fit the changelog — here the changelog
// was recreated holding only its compacted content, so it is shorter than
// the position Pebble recorded — is dropped and rebuilt from the changelog:
// the old local state does not come back and the instance does not fail.
// The window then closes with every trade, including one processed by
// another instance after the local state was written.
func TestStaleLocalStateIsRebuiltFromTheChangelog(t *testing.T) {
	testkit.WallClockTest(t)
	r := newKfakeRig(t, 1)
	ctx := context.Background()
	dirA := t.TempDir()
	stopA := r.start("a", dirA, prometheus.NewRegistry())
	const n = 12
	for i := 1; i <= n; i++ { // one commit each: a long changelog
		r.clock.Set(r.minute.Add(time.Duration(i+1) * time.Second)) // no trade ahead of the clock
		r.trade(0, i, time.Duration(i)*time.Second)
		r.waitFor("the trade to commit", 30*time.Second, func() bool { return r.committed(0) == int64(i) })
	}
	stopA()
	stopB := r.start("b", t.TempDir(), prometheus.NewRegistry())
	r.trade(0, n+1, (n+1)*time.Second)
	r.waitFor("b to commit its trade", 30*time.Second, func() bool { return r.committed(0) == n+1 })
	stopB()

	// Replace the changelog by its compacted content (latest value per key).
	changelog := r.top.Name + ".c1m.changelog"
	latest := map[string][]byte{}
	var order []string
	for _, rec := range testkit.ReadTopic(t, r.seeds, changelog) {
		k := string(rec.Key)
		if k == "b" {
			continue
		}
		if _, ok := latest[k]; !ok {
			order = append(order, k)
		}
		latest[k] = rec.Value
	}
	if _, err := r.adm.DeleteTopics(ctx, changelog); err != nil {
		t.Fatal(err)
	}
	r.waitFor("the changelog to be deleted", 10*time.Second, func() bool {
		td, err := r.adm.ListTopics(ctx, changelog)
		return err == nil && !td.Has(changelog)
	})
	if _, err := r.adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, changelog); err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	for _, k := range order {
		if latest[k] != nil {
			recs = append(recs, &kgo.Record{Topic: changelog, Partition: 0, Key: []byte(k), Value: latest[k]})
		}
	}
	if err := r.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	// a comes back with its old disk: its Pebble position is past the new
	// changelog's end.
	regA := prometheus.NewRegistry()
	r.start("a", dirA, regA)
	r.waitFor("a to restore the partition", 30*time.Second, func() bool { return gauge(t, regA, "kandle_partitions_owned") == 1 })
	r.trade(0, n+2, (n+2)*time.Second)
	r.waitFor("a to commit the last trade", 30*time.Second, func() bool { return r.committed(0) == n+2 })
	now := r.minute.Add(time.Minute)
	r.waitFor("the quiet window to close", 30*time.Second, func() bool {
		now = now.Add(r.idleTimout)
		r.clock.Set(now)
		return len(r.read("c.1m")) > 0
	})
	got := r.read("c.1m")
	want := fmt.Sprintf(`"trades":%d`, n+2)
	if !strings.Contains(got[0], fmt.Sprintf(`"open_time":%d`, r.minute.UnixMilli())) || !strings.Contains(got[0], want) {
		t.Fatalf("want the window closed with all %d trades (%s), got %v", n+2, want, got)
	}
}
