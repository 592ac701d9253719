package dynamodb

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/kandle/kandle/topology/spec"
)

func TestTemplateRender(t *testing.T) {
	ts := time.Date(2026, 11, 23, 7, 5, 9, 0, time.UTC).UnixMilli()
	v := vars{symbol: "BTC", timeframe: "1m", tradeID: "t-9", openTime: ts, closeTime: ts + 60000, ts: ts, shard: 3}
	cases := map[string]string{
		"{symbol}#{timeframe}":           "BTC#1m",
		"{symbol}#{yyyy}-{mm}-{dd}-{hh}": "BTC#2026-11-23-07",
		"{ts}#{trade_id}":                "1795417509000#t-9", // 2026-11-23T07:05:09Z
		"{symbol}#shard{shard}":          "BTC#shard03",
		"{open_time}/{close_time}":       "1795417509000/1795417569000",
		"literal":                        "literal",
		"{symbol}{symbol}":               "BTCBTC",
	}
	for src, want := range cases {
		tpl, err := parseTemplate(src)
		if err != nil {
			t.Fatalf("parse %q: %v", src, err)
		}
		if got := tpl.render(&v); got != want {
			t.Errorf("render %q = %q, want %q", src, got, want)
		}
	}
	for _, bad := range []string{"{sym}", "{symbol", "a}b"} {
		if _, err := parseTemplate(bad); err == nil {
			t.Errorf("parse %q: want an error", bad)
		}
	}
	num, _ := parseTemplate("{open_time}")
	comp, _ := parseTemplate("{ts}#{trade_id}")
	if !num.numeric() || comp.numeric() || !comp.leadingTime() {
		t.Errorf("numeric/leadingTime wrong")
	}
}

func TestShardSpreadAndStable(t *testing.T) {
	seen := map[int]int{}
	for i := 0; i < 1000; i++ {
		sk := string(rune('a'+i%26)) + string(rune('0'+i%10)) + "x" + string(rune(i))
		s := shardOf(sk, 8)
		if s != shardOf(sk, 8) || s < 0 || s >= 8 {
			t.Fatalf("shard %d of %q unstable or out of range", s, sk)
		}
		seen[s]++
	}
	if len(seen) != 8 {
		t.Fatalf("1000 keys hit %d of 8 shards", len(seen))
	}
}

func TestConfigValidate(t *testing.T) {
	good := historyConfig("candles", "")
	if errs := good.Validate(); len(errs) != 0 {
		t.Fatalf("good config: %v", errs)
	}
	cases := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"no table", func(c *Config) { c.Table.Name = "" }, "table.name"},
		{"bad placeholder", func(c *Config) { c.PK = "{sym}" }, "unknown placeholder"},
		{"N sort key not numeric", func(c *Config) { c.SK = "{ts}#{trade_id}" }, "sk_type: S"},
		{"shards without placeholder", func(c *Config) { c.Shards = 4 }, "need {shard} in pk"},
		{"placeholder without shards", func(c *Config) { c.PK = "{symbol}#shard{shard}" }, "set shards"},
		{"ttl without attribute", func(c *Config) { c.TTL = Duration(time.Hour) }, "ttl_attribute"},
		{"bad ttl timeframe", func(c *Config) {
			c.Table.TTLAttribute = "exp"
			c.TTLByTimeframe = map[string]Duration{"7x": Duration(time.Hour)}
		}, "ttl_by_timeframe"},
		{"conflicting attribute types", func(c *Config) {
			c.Table.GSIs = map[string]IndexSpec{"by": {PK: "sk", PKType: "S"}}
		}, "declared as both"},
		{"LSI without sort key", func(c *Config) { c.Table.LSIs = map[string]IndexSpec{"l": {}} }, "needs a sort key"},
		{"INCLUDE without attributes", func(c *Config) {
			c.Table.GSIs = map[string]IndexSpec{"g": {PK: "symbol", Projection: "INCLUDE"}}
		}, "include"},
	}
	for _, tc := range cases {
		c := historyConfig("candles", "")
		tc.mod(&c)
		errs := c.Validate()
		if !strings.Contains(strings.Join(errs, "\n"), tc.want) {
			t.Errorf("%s: errors %q do not mention %q", tc.name, errs, tc.want)
		}
	}
}

// TestDefaultTagsMatchCode keeps the default tags (docs, YAML) and the
// zero-value fallbacks of withDefaults in agreement.
func TestDefaultTagsMatchCode(t *testing.T) {
	check := func(v any) {
		rv := reflect.ValueOf(v)
		for i := 0; i < rv.NumField(); i++ {
			f := rv.Type().Field(i)
			def, ok := f.Tag.Lookup("default")
			if !ok || def == "false" || def == "0" {
				continue
			}
			got := rv.Field(i).Interface()
			var s string
			switch g := got.(type) {
			case Duration:
				d, err := ParseDuration(def)
				if err != nil || d != g {
					t.Errorf("%s: default tag %q, code default %v", f.Name, def, g)
				}
				continue
			case string:
				s = g
			default:
				s = strings.TrimSpace(strings.Trim(reflect.ValueOf(g).String(), "<>"))
				if n, ok := got.(int); ok {
					s = itoa(n)
				}
			}
			if s != def {
				t.Errorf("%s: default tag %q, code default %q", f.Name, def, s)
			}
		}
	}
	if err := spec.FillDefaults(&Config{}); err != nil { // withDefaults ignores this error
		t.Fatal(err)
	}
	c := Config{}.withDefaults()
	// PK and SK defaults are templates a Go caller must set; compare the rest.
	c.PK, c.SK = "{symbol}#{timeframe}", "{open_time}"
	check(c)
	check(c.Table)
}

func itoa(n int) string {
	b, _ := yaml.Marshal(n)
	return strings.TrimSpace(string(b))
}

func TestDurationYAML(t *testing.T) {
	var v struct {
		TTL Duration            `yaml:"ttl"`
		By  map[string]Duration `yaml:"by"`
	}
	if err := yaml.Unmarshal([]byte("ttl: 30d\nby: {1m: 7d, 1h: 36h, 1d: 2w}\n"), &v); err != nil {
		t.Fatal(err)
	}
	day := 24 * time.Hour
	if time.Duration(v.TTL) != 30*day || time.Duration(v.By["1m"]) != 7*day ||
		time.Duration(v.By["1h"]) != 36*time.Hour || time.Duration(v.By["1d"]) != 14*day {
		t.Fatalf("decoded %+v", v)
	}
	if err := yaml.Unmarshal([]byte("ttl: 3x\n"), &v); err == nil {
		t.Fatal("want an error for 3x")
	}
}
