package topotest

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
)

func TestRecordJSONKeepsYAMLText(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{`{symbol: BTC, price: 100.5, qty: 0.1, id: 7, sid: "7", big: 123456789012345678901234567890}`,
			`{"symbol":"BTC","price":100.5,"qty":0.1,"id":7,"sid":"7","big":123456789012345678901234567890}`},
		{`{ts: 2026-01-01T00:00:01Z, ok: true, no: False, none: null, tilde: ~, exp: 1.5e3, neg: -0.25}`,
			`{"ts":"2026-01-01T00:00:01Z","ok":true,"no":false,"none":null,"tilde":null,"exp":1.5e3,"neg":-0.25}`},
		{`{nested: {a: [1, "x", {b: 2.50}]}, quote: "say \"hi\"\n"}`,
			`{"nested":{"a":[1,"x",{"b":2.50}]},"quote":"say \"hi\"\n"}`},
		{`'{"raw": 1, broken'`, `{"raw": 1, broken`},
		{`[1, 2]`, `[1,2]`},
		{`&a {x: 1}`, `{"x":1}`},
	} {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(tc.yaml), &n); err != nil {
			t.Fatal(err)
		}
		got, err := recordBytes(&n)
		if err != nil {
			t.Errorf("%s: %v", tc.yaml, err)
			continue
		}
		if string(got) != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.yaml, got, tc.want)
		}
	}
}

func TestRecordJSONRejectsNonJSONNumbers(t *testing.T) {
	for _, y := range []string{`{p: 0x1F}`, `{p: .inf}`, `{p: .nan}`, `{p: +5}`, `{p: !!binary aGk=}`} {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(y), &n); err != nil {
			t.Fatal(err)
		}
		if b, err := recordBytes(&n); err == nil {
			t.Errorf("%s encoded as %s, want an error", y, b)
		}
	}
}

// TestFileErrorsPointAtPositions checks that mistakes in a test file are
// reported as file:line:col with a hint.
func TestFileErrorsPointAtPositions(t *testing.T) {
	top := abs(t, "testdata/mini.yaml")
	head := "topology: " + top + "\ntests:\n  - name: t\n"
	for _, tc := range []struct{ body, want string }{
		{"    input: {trade: []}\n    expect: {}\n", `:4:13: no source "trade" in topology ` + top + ` (did you mean trades?)`},
		{"    input: {trades: [{records: [{p: 0x10}]}]}\n    expect: {}\n", `:4:37: 0x10 is not a JSON number: quote it`},
		{"    input: {trades: [{partiton: 1, records: []}]}\n    expect: {}\n", `:4:23: unknown key "partiton" (did you mean partition?)`},
		{"    input: {}\n    expect: {1m: [{symbol: A, opn: \"1\"}]}\n", `:5:31: unknown candle field "opn" (did you mean open?)`},
		{"    input: {}\n    expect: {1m: [{open: abc}]}\n", `:5:26: open: "abc" is not a decimal number`},
		{"    input: {}\n    expect: {1m: [{open_time: yesterday}]}\n", `:5:31: "yesterday" is not a time`},
		{"    input: {}\n    expect: {dead_letters: [{reason: latte}]}\n", `:5:38: unknown reason "latte" (did you mean late?)`},
		{"    input: {}\n", `:3:5: test "t" has no expect`},
		{"    input: {}\n    expect: {}\n  - name: t\n    input: {}\n    expect: {}\n", `:6:5: a second test named "t"`},
		{"    input: {}\n    expect: {}\n    expect_exactly: maybe\n", `:6:21: expect_exactly must be true or false`},
	} {
		file := filepath.Join(t.TempDir(), "x_test.yaml")
		_, err := Parse(file, []byte(head+tc.body))
		if err == nil || !strings.Contains(err.Error(), file+tc.want) {
			t.Errorf("body %q:\n got %v\nwant …%s…", tc.body, err, tc.want)
		}
	}
}

func TestTopologyProblemsAreShown(t *testing.T) {
	file := filepath.Join(t.TempDir(), "x_test.yaml")
	write(t, filepath.Join(filepath.Dir(file), "bad.yaml"), "name: bad\nsources: {}\nprocessors: {}\n")
	_, err := Parse(file, []byte("topology: bad.yaml\ntests: []\n"))
	if err == nil || !strings.Contains(err.Error(), file+":1:11: topology bad.yaml is invalid (run kandle validate") {
		t.Fatalf("got %v", err)
	}
}

func TestOffsetsContinuePerPartition(t *testing.T) {
	s, err := Parse(filepath.Join(abs(t, "testdata"), "x_test.yaml"), []byte(`
topology: mini.yaml
tests:
  - name: offsets
    input:
      trades:
        - {partition: 0, records: ['a', 'b']}
        - {partition: 1, offset: 10, records: ['c']}
        - {partition: 0, records: ['d']}
        - {partition: 1, records: ['e']}
    expect: {}
`))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range s.Cases[0].feeds {
		got = append(got, fmt.Sprintf("%s@%d:%d", f.value, f.partition, f.offset))
	}
	if want := "a@0:0 b@0:1 c@1:10 d@0:2 e@1:11"; strings.Join(got, " ") != want {
		t.Errorf("feeds %v, want %s", got, want)
	}
}

// TestRecordKeyDefaultsToKeyField: without key: a record goes out keyed by
// its key field (a string's text, a number's digits, a dotted path into a
// nested object), as a producer keying by symbol sends it; a record that is
// not such an object has no key.
func TestRecordKeyDefaultsToKeyField(t *testing.T) {
	for _, c := range []struct{ value, field, want string }{
		{`{"symbol":"BTC","ts":1}`, "symbol", "BTC"},
		{`{"symbol":"B\u0054C"}`, "symbol", "BTC"},
		{`{"device":4200000000000000000001}`, "device", "4200000000000000000001"},
		{`{"data":{"s":"ETH"}}`, "data.s", "ETH"},
		{`{"symbol":null}`, "symbol", "<nil>"},
		{`{"other":"BTC"}`, "symbol", "<nil>"},
		{`not json`, "symbol", "<nil>"},
	} {
		got := "<nil>"
		if k := recordKey([]byte(c.value), c.field); k != nil {
			got = string(k)
		}
		if got != c.want {
			t.Errorf("recordKey(%s, %q) = %s, want %s", c.value, c.field, got, c.want)
		}
	}
}

// An expected candle may give rev: it is compared like any other field,
// and the report shows the revision of what was produced.
func TestExpectedRevIsCompared(t *testing.T) {
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(`{symbol: BTC, open_time: "2026-01-01T00:00:00Z", high: "105", rev: 1}`), &n); err != nil {
		t.Fatal(err)
	}
	w, err := parseWantCandle(n.Content[0])
	if err != nil {
		t.Fatal(err)
	}
	got := candle.Candle{Symbol: "BTC", OpenTime: w.c.OpenTime, High: decimal.MustParse("105")}
	if mm := w.mismatches(&got); len(mm) != 1 || mm[0] != "rev: want 1, got 0" {
		t.Errorf("rev 1 against the first final: mismatches %q, want the rev named", mm)
	}
	got.Rev = 1
	if !w.matches(&got) {
		t.Errorf("rev 1 against rev 1: %q", w.mismatches(&got))
	}
	if s := w.String(); !strings.Contains(s, "rev=1") {
		t.Errorf("expectation %q does not show its rev", s)
	}
	got.Rev = 2
	if s := formatCandle(&got); !strings.HasSuffix(s, " rev=2") {
		t.Errorf("produced candle %q does not show its rev", s)
	}
	if s := formatCandle(&candle.Candle{Symbol: "BTC"}); strings.Contains(s, "rev") {
		t.Errorf("a first final (rev 0) shows a rev: %q", s)
	}
	for _, bad := range []string{`{rev: -1}`, `{rev: one}`, `{rev: 4294967296}`} {
		if err := yaml.Unmarshal([]byte(bad), &n); err != nil {
			t.Fatal(err)
		}
		if _, err := parseWantCandle(n.Content[0]); err == nil || !strings.Contains(err.Error(), "rev must be a whole number") {
			t.Errorf("%s: error %v, want one saying what rev takes", bad, err)
		}
	}
}
