package kafka

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestEnsureTopics(t *testing.T) {
	b := startBroker(t, WithSeedTopics(2, "small"), WithDefaultPartitions(3))
	ctx := testCtx(t)
	cl := newClient(t, b.Addrs())
	specs := []TopicSpec{
		{Name: "trades", Partitions: 6},
		{Name: "candles-1m", Partitions: 6, Compacted: true, Configs: map[string]*string{"retention.ms": kadm.StringPtr("3600000")}},
		{Name: "default-parts"},
		{Name: "small", Partitions: 4},
	}
	warns, err := EnsureTopics(ctx, cl, specs)
	if err != nil {
		t.Fatal(err)
	}
	if len(warns) != 1 || warns[0].Topic != "small" || warns[0].Have != 2 || warns[0].Want != 4 {
		t.Fatalf("warnings %+v, want one for small (have 2, want 4)", warns)
	}
	if s := warns[0].String(); !strings.Contains(s, "2 partitions") || !strings.Contains(s, "--partitions 4") {
		t.Errorf("warning text %q should give both counts and the fix", s)
	}

	adm := kadm.NewClient(cl)
	details, err := adm.ListTopics(ctx, "trades", "candles-1m", "default-parts", "small")
	if err != nil {
		t.Fatal(err)
	}
	// Same client: its metadata cache must already know the new topics.
	for name, want := range map[string]int{"trades": 6, "candles-1m": 6, "default-parts": 3, "small": 2} {
		if got := len(details[name].Partitions); got != want {
			t.Errorf("%s has %d partitions, want %d", name, got, want)
		}
	}
	cfgs, err := adm.DescribeTopicConfigs(ctx, "candles-1m")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, c := range cfgs[0].Configs {
		if c.Value != nil {
			got[c.Key] = *c.Value
		}
	}
	if got["cleanup.policy"] != "compact" || got["retention.ms"] != "3600000" {
		t.Errorf("candles-1m configs: cleanup.policy=%q retention.ms=%q, want compact and 3600000", got["cleanup.policy"], got["retention.ms"])
	}

	// Idempotent: a second run creates nothing, fails nothing, warns the same.
	warns2, err := EnsureTopics(ctx, cl, specs)
	if err != nil {
		t.Fatalf("second EnsureTopics: %v", err)
	}
	if len(warns2) != 1 || warns2[0] != warns[0] {
		t.Fatalf("second run warnings %+v, want %+v", warns2, warns)
	}

	// An existing non-compacted topic asked for as compacted is a warning.
	warns3, err := EnsureTopics(ctx, cl, []TopicSpec{{Name: "trades", Partitions: 6, Compacted: true}})
	if err != nil {
		t.Fatal(err)
	}
	if len(warns3) != 1 || warns3[0].Topic != "trades" || !strings.Contains(warns3[0].String(), "cleanup.policy") {
		t.Fatalf("warnings %+v, want one about trades' cleanup.policy", warns3)
	}

	if _, err := EnsureTopics(ctx, cl, []TopicSpec{{Partitions: 1}}); err == nil {
		t.Error("a spec without a name: want an error")
	}
	if w, err := EnsureTopics(ctx, cl, nil); err != nil || w != nil {
		t.Errorf("no specs: got %v, %v", w, err)
	}
}

func TestEnsureTopicsReportsCreateFailure(t *testing.T) {
	// Kafka refuses a name that collides with an existing one on . vs _.
	b := startBroker(t, WithSeedTopics(1, "candles.1m"))
	ctx := testCtx(t)
	cl := newClient(t, b.Addrs())
	_, err := EnsureTopics(ctx, cl, []TopicSpec{{Name: "candles_1m", Partitions: 1}})
	if err == nil || !strings.Contains(err.Error(), `"candles_1m"`) {
		t.Fatalf("invalid config: err = %v, want an error naming the topic", err)
	}
}

func TestOffsets(t *testing.T) {
	b := startBroker(t, WithSeedTopics(2, "t"))
	ctx := testCtx(t)
	cl := newClient(t, b.Addrs(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for _, p := range []int32{0, 0, 0, 1} {
		r := &kgo.Record{Topic: "t", Partition: p, Value: []byte("v")}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	ends, err := EndOffsets(ctx, cl, "t")
	if err != nil {
		t.Fatal(err)
	}
	if ends["t"][0] != 3 || ends["t"][1] != 1 {
		t.Fatalf("end offsets %v, want t[0]=3 t[1]=1", ends)
	}
	if _, err := EndOffsets(ctx, cl, "missing"); err == nil {
		t.Error("EndOffsets of a missing topic: want an error")
	}

	// Nothing committed yet: empty, not an error.
	none, err := CommittedOffsets(ctx, cl, "g", "t")
	if err != nil || len(none) != 0 {
		t.Fatalf("committed before any commit: %v, %v", none, err)
	}
	adm := kadm.NewClient(cl)
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: "t", Partition: 0, At: 2, LeaderEpoch: -1})
	if _, err := adm.CommitOffsets(ctx, "g", os); err != nil {
		t.Fatal(err)
	}
	got, err := CommittedOffsets(ctx, cl, "g")
	if err != nil {
		t.Fatal(err)
	}
	if len(got["t"]) != 1 || got["t"][0] != 2 {
		t.Fatalf("committed %v, want t[0]=2 only", got)
	}
}
