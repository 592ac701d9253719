package dynamodb

import (
	"context"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/kandle/kandle/internal/testkit"
	"github.com/kandle/kandle/topology/spec"
)

// The three DynamoDB layouts of docs/contract.md ("What the stores hold"),
// as YAML sink blocks.
var schemaYAML = map[string]string{
	"candle history": `
table:
  name: candles
  ttl_attribute: expires_at
  gsis:
    by_timeframe: {pk: timeframe, sk: open_time, projection: INCLUDE, include: [c, v]}
  lsis:
    by_close: {sk: close_time, projection: KEYS_ONLY}
pk: "{symbol}#{timeframe}"
sk: "{open_time}"
ttl_by_timeframe: {1m: 7d}
`,
	"trade ledger": `
table: {name: trade-ledger, sk_type: S, ttl_attribute: expires_at}
pk: "{symbol}#{yyyy}-{mm}-{dd}-{hh}"
sk: "{ts}#{trade_id}"
ttl: 24h
`,
	"device readings": `
table: {name: readings, ttl_attribute: ttl}
pk: "{symbol}#shard{shard}"
sk: "{ts}"
shards: 8
ttl: 30d
`,
}

// TestSchemasFromYAML decodes each schema with the topology's spec decoder
// (tags, defaults, enums), validates it, and builds a sink from it.
func TestSchemasFromYAML(t *testing.T) {
	var specs []TableSpec
	for name, src := range schemaYAML {
		var node yaml.Node
		if err := yaml.Unmarshal([]byte(src), &node); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var cfg Config
		if probs := spec.Decode(name+".yaml", &node, &cfg); len(probs) > 0 {
			t.Fatalf("%s: %v", name, probs)
		}
		if errs := cfg.Validate(); len(errs) > 0 {
			t.Fatalf("%s: %v", name, errs)
		}
		if cfg.MaxInFlight != 4 || cfg.BufferItems != 100 || time.Duration(cfg.RetryMax) != 5*time.Second ||
			cfg.Table.PKAttribute != "pk" || cfg.Table.BillingMode != "PAY_PER_REQUEST" {
			t.Fatalf("%s: defaults not applied: %+v", name, cfg)
		}
		if _, err := New(context.Background(), cfg, WithAWSConfig(testAWSConfig()), WithLogger(quietLogger())); err != nil {
			t.Fatalf("%s: New: %v", name, err)
		}
		specs = append(specs, cfg.Table)
	}
	// Provision all three with a client built the way `kandle provision` would.
	dyn := testkit.Dynalite(t)
	client, err := NewClient(context.Background(), Config{Endpoint: dyn.URL()}, WithAWSConfig(testAWSConfig()))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := Apply(context.Background(), client, specs, false, WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("plan:\n%s", plan)
	if n := strings.Count(plan.String(), "[done]"); n != 3 {
		t.Fatalf("want 3 tables created:\n%s", plan)
	}

	var cfg Config
	var node yaml.Node
	_ = yaml.Unmarshal([]byte("table: {name: t1, sk_type: X}\npk: x\nsk: y\nttl: 3q\n"), &node)
	probs := spec.Decode("bad.yaml", &node, &cfg)
	if msg := probs.Error(); !strings.Contains(msg, "sk_type") || !strings.Contains(msg, "3q") {
		t.Fatalf("bad YAML problems: %v", probs)
	}
}
