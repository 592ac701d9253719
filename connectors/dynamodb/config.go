package dynamodb

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/topology/spec"
)

// Config is a DynamoDB sink's YAML block. Its tags are the one list of fields.
type Config struct {
	Table     TableSpec `yaml:"table" required:"true" doc:"The table written to (and provisioned when provision is true)."`
	Provision bool      `yaml:"provision" default:"false" doc:"Create the table, its indexes and TTL if missing before the first write (see also kandle provision)."`
	Region    string    `yaml:"region" default:"us-east-1" doc:"AWS region."`
	Endpoint  string    `yaml:"endpoint" doc:"Custom endpoint URL (dynalite, DynamoDB Local); empty uses AWS."`

	PK     string `yaml:"pk" default:"{symbol}#{timeframe}" doc:"Partition key template. Placeholders: {symbol} {timeframe} {open_time} {close_time} {ts} {trade_id} {yyyy} {mm} {dd} {hh} {shard}; for the events of a silence processor {device} {event} {level} {action} {owner} {field:NAME} (any event field) with {ts} {yyyy}… from fired_at or recovered_at, e.g. DEVICE#{owner}."`
	SK     string `yaml:"sk" default:"{open_time}" doc:"Sort key template (same placeholders), e.g. {device}#{event} for events, or a constant such as latest (with sk_type S) to keep one item per key current: the latest reading of a device. With table.sk_type N it must render a number: {open_time}, {close_time} or {ts}."`
	Shards int    `yaml:"shards" default:"0" doc:"Write sharding: {shard} renders hash(sk) % shards as two digits (00-99). 0 disables; pk must contain {shard} when set."`

	TTL            Duration            `yaml:"ttl" doc:"Items expire this long after their event time (candle close_time, trade ts), e.g. 24h or 30d. Needs table.ttl_attribute. Empty: no TTL."`
	TTLByTimeframe map[string]Duration `yaml:"ttl_by_timeframe" doc:"Per-timeframe TTL overriding ttl, e.g. {1m: 7d, 1h: 90d}."`

	MaxInFlight int      `yaml:"max_in_flight" default:"4" doc:"BatchWriteItem (and query) requests in flight at once. Candles, written by PutItems conditional on their rev, have 25 times as many in flight: the items of that many batches."`
	BufferItems int      `yaml:"buffer_items" default:"100" doc:"Write sends once this many items are buffered; Flush sends the rest."`
	RetryBase   Duration `yaml:"retry_base" default:"50ms" doc:"First backoff after a throttled, unprocessed or failed request; doubles per retry, with full jitter."`
	RetryMax    Duration `yaml:"retry_max" default:"5s" doc:"Longest single backoff. Retries go on until the stage stops."`
}

// TableSpec declares a table for Apply and the key schema the sink writes.
type TableSpec struct {
	Name          string               `yaml:"name" required:"true" doc:"Table name."`
	PKAttribute   string               `yaml:"pk_attribute" default:"pk" doc:"Partition key attribute name (type S)."`
	SKAttribute   string               `yaml:"sk_attribute" default:"sk" doc:"Sort key attribute name."`
	SKType        string               `yaml:"sk_type" default:"N" enum:"S|N" doc:"Sort key type: N for a bare epoch-ms template, S for composite ones like {ts}#{trade_id}."`
	BillingMode   string               `yaml:"billing_mode" default:"PAY_PER_REQUEST" enum:"PAY_PER_REQUEST|PROVISIONED" doc:"Billing mode when creating the table."`
	ReadCapacity  int                  `yaml:"read_capacity" default:"5" doc:"Read capacity units (billing_mode PROVISIONED; also used for new GSIs)."`
	WriteCapacity int                  `yaml:"write_capacity" default:"5" doc:"Write capacity units (billing_mode PROVISIONED; also used for new GSIs)."`
	TTLAttribute  string               `yaml:"ttl_attribute" doc:"Attribute holding the expiry (epoch seconds); Apply enables TTL on it. Empty: no TTL."`
	GSIs          map[string]IndexSpec `yaml:"gsis" doc:"Global secondary indexes by name; missing ones are added to an existing table."`
	LSIs          map[string]IndexSpec `yaml:"lsis" doc:"Local secondary indexes by name (partition key = the table's); only settable when the table is created."`
}

// IndexSpec declares a secondary index. Item attributes usable as index
// keys: symbol, timeframe (S), open_time, close_time, ts, t (N), or pk/sk.
type IndexSpec struct {
	PK         string   `yaml:"pk" doc:"Partition key attribute (GSIs only; LSIs use the table's)."`
	PKType     string   `yaml:"pk_type" default:"S" enum:"S|N" doc:"Partition key type."`
	SK         string   `yaml:"sk" doc:"Sort key attribute (required for LSIs)."`
	SKType     string   `yaml:"sk_type" default:"N" enum:"S|N" doc:"Sort key type."`
	Projection string   `yaml:"projection" default:"ALL" enum:"ALL|KEYS_ONLY|INCLUDE" doc:"Attributes copied into the index."`
	Include    []string `yaml:"include" doc:"Non-key attributes to project (projection INCLUDE)."`
}

// Duration is a time.Duration that also accepts days and weeks ("30d", "2w").
type Duration time.Duration

// ParseDuration parses Go durations ("90m", "24h") and whole days or weeks.
func ParseDuration(s string) (Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	if n := len(s) - 1; s[n] == 'd' || s[n] == 'w' {
		k, err := strconv.ParseInt(s[:n], 10, 64)
		if err != nil || k < 0 {
			return 0, fmt.Errorf("duration %q: want a whole number of days or weeks like 30d or 2w, or a Go duration like 36h", s)
		}
		day := 24 * time.Hour
		if s[n] == 'w' {
			day *= 7
		}
		return Duration(time.Duration(k) * day), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("duration %q: want a Go duration like 36h or 90m, or days/weeks like 30d, 2w", s)
	}
	return Duration(d), nil
}

// UnmarshalText lets YAML decoders fill a Duration from a string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// UnmarshalYAML accepts a scalar duration (yaml.v3 Unmarshaler).
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("want a duration like 24h or 30d")
	}
	return d.UnmarshalText([]byte(n.Value))
}

// String formats the duration like time.Duration.
func (d Duration) String() string { return time.Duration(d).String() }

// withDefaults fills the knobs a Go caller left at zero from the default
// tags, the same values a YAML block without them gets. (The tags are
// checked to decode by TestDefaultTagsMatchCode.)
func (c Config) withDefaults() Config {
	_ = spec.FillDefaults(&c)
	return c
}

func (t TableSpec) withDefaults() TableSpec {
	_ = spec.FillDefaults(&t)
	return t
}

// Validate returns what is wrong with c beyond what the tags check, each
// message saying how to fix it.
func (c *Config) Validate() []string {
	cfg := c.withDefaults()
	var errs []string
	add := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	errs = append(errs, cfg.Table.validate("table")...)
	pk, err := parseTemplate(cfg.PK)
	if err != nil {
		add("pk: %v", err)
	}
	sk, err2 := parseTemplate(cfg.SK)
	if err2 != nil {
		add("sk: %v", err2)
	}
	if err == nil && err2 == nil {
		if cfg.PK == "" {
			add("pk: the partition key template is empty; set it, e.g. pk: \"{symbol}#{timeframe}\"")
		}
		if cfg.SK == "" {
			add("sk: the sort key template is empty; set it, e.g. sk: \"{open_time}\"")
		}
		if cfg.Table.SKType == "N" && cfg.SK != "" && !sk.numeric() {
			add("sk: %q is not a number but table.sk_type is N; use a single {open_time}, {close_time} or {ts}, or set table.sk_type: S", cfg.SK)
		}
		usesShard := pk.uses(phShard) || sk.uses(phShard)
		switch {
		case cfg.Shards < 0 || cfg.Shards > 100:
			add("shards: %d is out of range; use 0 (no sharding) to 100", cfg.Shards)
		case cfg.Shards > 0 && !pk.uses(phShard):
			add("shards: %d shards need {shard} in pk, e.g. pk: \"{symbol}#shard{shard}\"", cfg.Shards)
		case cfg.Shards == 0 && usesShard:
			add("pk/sk use {shard} but shards is 0; set shards: N (e.g. 8) or remove {shard}")
		case sk.uses(phShard):
			add("sk: {shard} belongs in pk (it spreads a key over partitions); remove it from sk")
		}
	}
	if c.TTL < 0 {
		add("ttl: must not be negative")
	}
	if (c.TTL > 0 || len(c.TTLByTimeframe) > 0) && cfg.Table.TTLAttribute == "" {
		add("ttl: items need an attribute to hold the expiry; set table.ttl_attribute (e.g. expires_at)")
	}
	for _, tf := range slices.Sorted(maps.Keys(c.TTLByTimeframe)) {
		if _, err := candle.ParseTimeframe(tf, nil); err != nil {
			add("ttl_by_timeframe: %v", err)
		}
		if c.TTLByTimeframe[tf] < 0 {
			add("ttl_by_timeframe.%s: must not be negative", tf)
		}
	}
	if cfg.MaxInFlight < 1 {
		add("max_in_flight: %d; use at least 1", cfg.MaxInFlight)
	}
	if cfg.BufferItems < 1 {
		add("buffer_items: %d; use at least 1", cfg.BufferItems)
	}
	if cfg.RetryBase <= 0 || cfg.RetryMax < cfg.RetryBase {
		add("retry_base/retry_max: want 0 < retry_base <= retry_max (got %s, %s)", cfg.RetryBase, cfg.RetryMax)
	}
	return errs
}

// validate checks a table spec; path prefixes the messages.
func (t TableSpec) validate(path string) []string {
	t = t.withDefaults()
	var errs []string
	add := func(format string, args ...any) { errs = append(errs, path+"."+fmt.Sprintf(format, args...)) }
	if t.Name == "" {
		add("name: set the table name")
	} else if len(t.Name) < 3 || len(t.Name) > 255 || strings.Trim(t.Name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") != "" {
		add("name: %q is not a valid table name (3-255 of a-z A-Z 0-9 _ . -)", t.Name)
	}
	if t.SKType != "S" && t.SKType != "N" {
		add("sk_type: %q; use S or N", t.SKType)
	}
	if t.PKAttribute == t.SKAttribute {
		add("sk_attribute: %q is also the partition key; pick another name", t.SKAttribute)
	}
	if t.BillingMode != "PAY_PER_REQUEST" && t.BillingMode != "PROVISIONED" {
		add("billing_mode: %q; use PAY_PER_REQUEST or PROVISIONED", t.BillingMode)
	}
	if _, err := t.attributeTypes(); err != nil {
		add("%v", err)
	}
	for _, name := range slices.Sorted(maps.Keys(t.GSIs)) {
		ix := t.GSIs[name]
		if ix.PK == "" {
			add("gsis.%s.pk: a GSI needs a partition key attribute", name)
		}
		errs = append(errs, ix.validate(path+".gsis."+name)...)
	}
	for _, name := range slices.Sorted(maps.Keys(t.LSIs)) {
		ix := t.LSIs[name]
		if ix.PK != "" && ix.PK != t.PKAttribute {
			add("lsis.%s.pk: an LSI shares the table's partition key %q; remove pk", name, t.PKAttribute)
		}
		if ix.SK == "" {
			add("lsis.%s.sk: an LSI needs a sort key attribute", name)
		}
		errs = append(errs, ix.validate(path+".lsis."+name)...)
	}
	return errs
}

func (ix IndexSpec) validate(path string) []string {
	var errs []string
	switch ix.projection() {
	case "ALL", "KEYS_ONLY":
		if len(ix.Include) > 0 {
			errs = append(errs, path+".include: only used with projection INCLUDE")
		}
	case "INCLUDE":
		if len(ix.Include) == 0 {
			errs = append(errs, path+".include: projection INCLUDE needs the attributes to include")
		}
	default:
		errs = append(errs, fmt.Sprintf("%s.projection: %q; use ALL, KEYS_ONLY or INCLUDE", path, ix.Projection))
	}
	return errs
}

func (ix IndexSpec) projection() string {
	if ix.Projection == "" {
		return "ALL"
	}
	return ix.Projection
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// attributeTypes returns the type of every key attribute of the table and
// its indexes, or an error when one attribute is declared with two types.
func (t TableSpec) attributeTypes() (map[string]string, error) {
	types := map[string]string{}
	var err error
	set := func(name, typ string) {
		if name == "" || err != nil {
			return
		}
		if old, ok := types[name]; ok && old != typ {
			err = fmt.Errorf("attribute %q is declared as both %s and %s; give it one type", name, old, typ)
			return
		}
		types[name] = typ
	}
	set(t.PKAttribute, "S")
	set(t.SKAttribute, t.SKType)
	for _, name := range slices.Sorted(maps.Keys(t.GSIs)) {
		ix := t.GSIs[name]
		set(ix.PK, orDefault(ix.PKType, "S"))
		set(ix.SK, orDefault(ix.SKType, "N"))
	}
	for _, name := range slices.Sorted(maps.Keys(t.LSIs)) {
		set(t.LSIs[name].SK, orDefault(t.LSIs[name].SKType, "N"))
	}
	return types, err
}

// ttlFor returns the TTL for a timeframe ("" for trades).
func (c Config) ttlFor(tf string) time.Duration {
	if d, ok := c.TTLByTimeframe[tf]; ok {
		return time.Duration(d)
	}
	return time.Duration(c.TTL)
}
