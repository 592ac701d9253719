package spec

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

type upper string

func (u *upper) UnmarshalYAML(n *yaml.Node) error {
	if n.Value == "" || strings.ToUpper(n.Value) != n.Value {
		return errors.New("must be upper case")
	}
	*u = upper(n.Value)
	return nil
}

type inner struct {
	Port int    `yaml:"port" default:"80" doc:"Port."`
	Mode string `yaml:"mode" default:"fast" enum:"fast|slow" doc:"Mode."`
}

type item struct {
	Kind string `yaml:"kind" required:"true" enum:"a|b" doc:"Kind of item. More text."`
	On   bool   `yaml:"on" default:"true" doc:"Enabled."`
}

type config struct {
	Name    string           `yaml:"name" required:"true" doc:"Name."`
	Wait    time.Duration    `yaml:"wait" default:"2s" doc:"Wait | pause."`
	Count   int              `yaml:"count" default:"3" doc:"Count."`
	Tags    []string         `yaml:"tags" default:"x" doc:"Tags."`
	Inner   inner            `yaml:"inner" doc:"Inner."`
	Ptr     *inner           `yaml:"ptr" doc:"Optional inner."`
	Items   map[string]*item `yaml:"items" doc:"Items."`
	Code    upper            `yaml:"code" doc:"Upper-case code."`
	Empty   string           `yaml:"empty" default:"" doc:"Empty default."`
	Skipped string           `yaml:"-"`
}

func decode(t *testing.T, src string, v any, opts ...Option) Problems {
	t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(src), &n); err != nil {
		t.Fatal(err)
	}
	return Decode("f.yaml", &n, v, opts...)
}

func TestDecodeValidWithDefaults(t *testing.T) {
	var c config
	ps := decode(t, `
name: n
tags: [a, b]
inner: {port: 8080}
ptr: {mode: slow}
items:
  one: {kind: a}
  two: {kind: b, on: false}
  three:
    kind: a
code: ABC
`, &c)
	if len(ps) != 0 {
		t.Fatalf("unexpected problems:\n%v", ps)
	}
	if c.Name != "n" || c.Wait != 2*time.Second || c.Count != 3 || strings.Join(c.Tags, ",") != "a,b" {
		t.Fatalf("scalars/defaults wrong: %+v", c)
	}
	if c.Inner != (inner{Port: 8080, Mode: "fast"}) || c.Ptr == nil || *c.Ptr != (inner{Port: 80, Mode: "slow"}) {
		t.Fatalf("nested wrong: %+v %+v", c.Inner, c.Ptr)
	}
	if len(c.Items) != 3 || !c.Items["one"].On || c.Items["two"].On || c.Items["three"].Kind != "a" {
		t.Fatalf("items wrong: %+v", c.Items)
	}
	if c.Code != "ABC" {
		t.Fatalf("unmarshaler not used: %q", c.Code)
	}
}

func TestDecodeAbsentNestedGetsDefaults(t *testing.T) {
	var c config
	if ps := decode(t, "name: n\ntags: solo\nwait: 0s\n", &c); len(ps) != 0 {
		t.Fatal(ps)
	}
	if c.Inner.Port != 80 || c.Inner.Mode != "fast" || c.Ptr != nil || c.Wait != 0 {
		t.Fatalf("got %+v", c)
	}
	if len(c.Tags) != 1 || c.Tags[0] != "solo" {
		t.Fatalf("single scalar list: %v", c.Tags)
	}
}

func TestDecodeReportsEveryProblem(t *testing.T) {
	var c config
	ps := decode(t, `wiat: 1s
wait: abc
count: many
tags: {a: 1}
inner:
  prot: 1
  mode: fsat
ptr: -1
items:
  x: {on: maybe}
  y: {kind: c}
code: low
`, &c)
	want := []string{
		`f.yaml:1:1: unknown key "wiat" (did you mean wait?)`,
		`f.yaml:1:1: missing required key "name" (Name)`,
		`f.yaml:2:7: wait: "abc" is not a duration (use e.g. 2s, 500ms, 1m, 3d, 1d12h)`,
		`f.yaml:3:8: count: "many" is not a whole number`,
		`f.yaml:4:7: tags: expected a list of strings, got a mapping`,
		`f.yaml:6:3: inner: unknown key "prot" (did you mean port?)`,
		`f.yaml:7:9: inner.mode: "fsat" is not one of fast, slow (did you mean fast?)`,
		`f.yaml:8:6: ptr: expected a mapping with keys port, mode, got "-1"`,
		`f.yaml:10:6: items.x: missing required key "kind" (Kind of item)`,
		`f.yaml:10:11: items.x.on: "maybe" is not a boolean (use true or false)`,
		`f.yaml:11:13: items.y.kind: "c" is not one of a, b`,
		`f.yaml:12:7: code: must be upper case`,
	}
	ps.Sort()
	got := strings.Split(ps.Error(), "\n")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestNegativeDurationAndDuplicates(t *testing.T) {
	var c config
	ps := decode(t, "name: n\nwait: -1s\nname: m\nitems:\n  a: {kind: a}\n  a: {kind: b}\n", &c)
	var m struct {
		TTL map[string]time.Duration `yaml:"ttl"`
	}
	if got := decode(t, "ttl:\n  1m: 24h\n  5m:\n", &m); got.Error() != "f.yaml:3:3: ttl.5m: needs a value" || m.TTL["1m"] != 24*time.Hour {
		t.Fatalf("map of durations: %v %v", got, m.TTL)
	}
	want := "f.yaml:2:7: wait: -1s is negative (use 0 to disable, or a positive duration like 2s)\n" +
		"f.yaml:3:1: \"name\" is set twice (keep one)\n" +
		"f.yaml:6:3: items: \"a\" is defined twice (names must be unique)"
	if ps.Error() != want {
		t.Fatalf("got:\n%s", ps.Error())
	}
}

func TestHookAndMultipleTargets(t *testing.T) {
	type extra struct {
		Table string `yaml:"table" required:"true"`
	}
	type holder struct {
		Items map[string]*item `yaml:"items"`
	}
	var extras []*extra
	hook := WithHook[item](func(d *Decoder, n *yaml.Node, path string, ptr any) {
		e := &extra{}
		extras = append(extras, e)
		d.Decode(n, path, ptr, e)
	})
	var h holder
	ps := decode(t, "items:\n  a: {kind: a, table: t}\n  b: {kind: b, tabel: t}\n", &h, hook)
	want := "f.yaml:3:6: items.b: missing required key \"table\"\n" +
		"f.yaml:3:16: items.b: unknown key \"tabel\" (did you mean table?)"
	ps.Sort()
	if ps.Error() != want {
		t.Fatalf("got:\n%s", ps.Error())
	}
	if len(extras) != 2 || extras[0].Table != "t" || h.Items["a"].Kind != "a" {
		t.Fatalf("hook did not split keys: %+v %+v", extras, h.Items)
	}
}

func TestSuggest(t *testing.T) {
	cands := []string{"lateness", "timeframe", "zone", "kind"}
	for in, want := range map[string]string{"latenes": "lateness", "timefame": "timeframe", "zome": "zone", "xyzzy": "", "k": ""} {
		if got := Suggest(in, cands); got != want {
			t.Errorf("Suggest(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestFindAndKeys(t *testing.T) {
	var n yaml.Node
	if err := yaml.Unmarshal([]byte("a:\n  b: 1\n  c: 2\n"), &n); err != nil {
		t.Fatal(err)
	}
	if got := Find(&n, "a", "c"); got.Value != "2" || got.Line != 3 {
		t.Fatalf("Find a.c = %+v", got)
	}
	if got := Find(&n, "a", "zz"); got.Kind != yaml.MappingNode || got.Line != 2 {
		t.Fatalf("Find of a missing key should return the parent mapping, got %+v", got)
	}
	if got := strings.Join(Keys(Find(&n, "a")), ","); got != "b,c" {
		t.Fatalf("Keys = %s", got)
	}
}

func TestMarkdown(t *testing.T) {
	md := Markdown("Config", &config{})
	for _, want := range []string{
		"## Config\n\n| key | type | default | required | description |",
		"| `name` | string |  | yes | Name. |",
		"| `wait` | duration | `2s` |  | Wait \\| pause. |",
		"| `tags` | list of strings | `x` |  | Tags. |",
		"| `items` | map of name → item |  |  | Items. |",
		"### inner\n\nAt `inner`, `ptr`.",
		"| `mode` | one of `fast`, `slow` | `fast` |  | Mode. |",
		"### item\n\nAt `items.<name>`.",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "Skipped") || strings.Contains(md, "skipped") {
		t.Errorf("yaml:\"-\" field documented")
	}
}

func TestMergeKeysAndTextUnmarshaler(t *testing.T) {
	type withText struct {
		Level slogLevel        `yaml:"level" default:"info"`
		Items map[string]*item `yaml:"items"`
	}
	var v withText
	ps := decode(t, "items:\n  x: &b {kind: b, on: false}\n  y: {<<: *b, kind: a}\nlevel: warn\n", &v)
	if len(ps) != 0 {
		t.Fatal(ps)
	}
	if x, y := v.Items["x"], v.Items["y"]; x.Kind != "b" || x.On || y.Kind != "a" || y.On {
		t.Fatalf("merge: x %+v y %+v", x, y)
	}
	if v.Level != "WARN" {
		t.Fatalf("TextUnmarshaler not used: %q", v.Level)
	}
	ps = decode(t, "level: loud\n", &v)
	if ps.Error() != `f.yaml:1:8: level: unknown level "loud"` {
		t.Fatalf("got %v", ps)
	}
	var d withText
	if ps := decode(t, "{}", &d); len(ps) != 0 || d.Level != "INFO" {
		t.Fatalf("default through TextUnmarshaler: %q %v", d.Level, ps)
	}
}

type slogLevel string

func (l *slogLevel) UnmarshalText(b []byte) error {
	switch s := strings.ToUpper(string(b)); s {
	case "INFO", "WARN":
		*l = slogLevel(s)
		return nil
	}
	return fmt.Errorf("unknown level %q", b)
}

// A string default is taken literally: braces and colons in a key template
// are not YAML flow syntax.
func TestStringDefaultIsLiteral(t *testing.T) {
	var c struct {
		PK string `yaml:"pk" default:"{symbol}#{timeframe}"`
		SK string `yaml:"sk" default:"{open_time}"`
		N  int    `yaml:"n" default:"3"`
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte("other: 1\n"), &doc); err != nil {
		t.Fatal(err)
	}
	ps := NewDecoder("x.yaml")
	ps.Decode(doc.Content[0], "", &c)
	for _, p := range ps.Problems() {
		if !strings.Contains(p.Msg, "other") {
			t.Fatalf("unexpected problem: %v", p)
		}
	}
	if c.PK != "{symbol}#{timeframe}" || c.SK != "{open_time}" || c.N != 3 {
		t.Fatalf("defaults: %+v", c)
	}
}

// A config built in Go gets the tag defaults for the fields it left zero,
// and keeps the ones it set.
func TestFillDefaults(t *testing.T) {
	type inner struct {
		TTL time.Duration `yaml:"ttl" default:"24h"`
	}
	var c struct {
		PK    string        `yaml:"pk" default:"{symbol}#{timeframe}"`
		N     int           `yaml:"n" default:"3"`
		Age   time.Duration `yaml:"age" default:"30s"`
		Set   int           `yaml:"set" default:"9"`
		Inner inner         `yaml:"inner"`
	}
	c.Set = 4
	if err := FillDefaults(&c); err != nil {
		t.Fatal(err)
	}
	if c.PK != "{symbol}#{timeframe}" || c.N != 3 || c.Age != 30*time.Second || c.Set != 4 || c.Inner.TTL != 24*time.Hour {
		t.Fatalf("%+v", c)
	}
	var bad struct {
		N int `yaml:"n" default:"three"`
	}
	if err := FillDefaults(&bad); err == nil {
		t.Fatal("a bad default tag was accepted")
	}
	if err := FillDefaults(c); err == nil {
		t.Fatal("a non-pointer was accepted")
	}
}
