package spec

import (
	"encoding"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Hook decodes a value of one type itself, e.g. to split a mapping between
// two structs. ptr points at the value (type *T for a Hook registered for T).
type Hook func(d *Decoder, node *yaml.Node, path string, ptr any)

// Option configures a Decoder.
type Option func(*Decoder)

// WithHook makes the decoder call fn for every value of type T instead of
// decoding it by its tags.
func WithHook[T any](fn Hook) Option {
	return func(d *Decoder) { d.hooks[reflect.TypeFor[T]()] = fn }
}

// WithEnum makes the decoder accept exactly values for key of struct type
// T, instead of the enum of its tag (which still documents it): for a list
// that is only known at run time, such as registered kinds.
func WithEnum[T any](key string, values []string) Option {
	return func(d *Decoder) { d.enums[enumKey{reflect.TypeFor[T](), key}] = values }
}

type enumKey struct {
	t   reflect.Type
	key string
}

// Decoder decodes YAML nodes of one file into tagged structs, collecting
// every problem instead of stopping at the first.
type Decoder struct {
	file     string
	hooks    map[reflect.Type]Hook
	enums    map[enumKey][]string
	problems Problems
}

// NewDecoder returns a Decoder whose problems name file.
func NewDecoder(file string, opts ...Option) *Decoder {
	d := &Decoder{file: file, hooks: map[reflect.Type]Hook{}, enums: map[enumKey][]string{}}
	for _, o := range opts {
		o(d)
	}
	return d
}

// Decode decodes node (a document or a mapping) into the struct v points at.
// It returns every problem found; nil means v is complete and valid.
func Decode(file string, node *yaml.Node, v any, opts ...Option) Problems {
	d := NewDecoder(file, opts...)
	d.Decode(node, "", v)
	return d.Problems()
}

// Problems returns the problems found so far.
func (d *Decoder) Problems() Problems { return d.problems }

// Report records a problem at node.
func (d *Decoder) Report(node *yaml.Node, format string, args ...any) {
	d.problems = append(d.problems, At(d.file, node, format, args...))
}

// Decode decodes mapping node into the structs targets point at. Each key
// goes to the first target that declares it; a key no target declares is
// reported with a suggestion among all of them. path names node in messages
// ("" for the document root).
func (d *Decoder) Decode(node *yaml.Node, path string, targets ...any) {
	vals := make([]reflect.Value, 0, len(targets))
	for _, t := range targets {
		v := reflect.ValueOf(t)
		if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
			d.Report(node, "%sspec: cannot decode into %T (want a pointer to a struct)", prefix(path), t)
			return
		}
		vals = append(vals, v.Elem())
	}
	d.structs(resolve(node), path, vals)
}

func prefix(path string) string {
	if path == "" {
		return ""
	}
	return path + ": "
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// value decodes node into v (addressable). enum, when set, lists the
// allowed values of a string.
func (d *Decoder) value(node *yaml.Node, path string, v reflect.Value, enum []string) {
	node = resolve(node)
	if node == nil {
		return
	}
	t := v.Type()
	if h, ok := d.hooks[t]; ok {
		h(d, node, path, v.Addr().Interface())
		return
	}
	if implementsUnmarshaler(t) {
		if err := node.Decode(v.Addr().Interface()); err != nil {
			d.Report(node, "%s%v", prefix(path), cleanYAMLError(err))
		}
		return
	}
	if implementsText(t) {
		if d.scalar(node, path, "a string") {
			u := v.Addr().Interface().(encoding.TextUnmarshaler)
			if err := u.UnmarshalText([]byte(node.Value)); err != nil {
				d.Report(node, "%s%v", prefix(path), err)
			}
		}
		return
	}
	if t == durationType {
		d.duration(node, path, v)
		return
	}
	switch t.Kind() {
	case reflect.String:
		if !d.scalar(node, path, "a string") {
			return
		}
		if len(enum) > 0 && !contains(enum, node.Value) {
			d.Report(node, "%s%q is not one of %s%s", prefix(path), node.Value,
				strings.Join(enum, ", "), DidYouMean(node.Value, enum))
			return
		}
		v.SetString(node.Value)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if !d.scalar(node, path, "a whole number") {
			return
		}
		n, err := strconv.ParseInt(strings.ReplaceAll(node.Value, "_", ""), 0, t.Bits())
		if err != nil {
			d.Report(node, "%s%q is not a whole number", prefix(path), node.Value)
			return
		}
		v.SetInt(n)
	case reflect.Bool:
		if !d.scalar(node, path, "true or false") {
			return
		}
		switch strings.ToLower(node.Value) {
		case "true", "yes", "on":
			v.SetBool(true)
		case "false", "no", "off":
			v.SetBool(false)
		default:
			d.Report(node, "%s%q is not a boolean (use true or false)", prefix(path), node.Value)
		}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Struct && !custom(t.Elem()) {
			d.list(node, path, v)
			return
		}
		if t.Elem().Kind() != reflect.String {
			d.Report(node, "%sspec: unsupported type %s", prefix(path), t)
			return
		}
		d.strings(node, path, v)
	case reflect.Struct:
		d.structs(node, path, []reflect.Value{v})
	case reflect.Pointer:
		if t.Elem().Kind() != reflect.Struct {
			d.Report(node, "%sspec: unsupported type %s", prefix(path), t)
			return
		}
		if v.IsNil() {
			v.Set(reflect.New(t.Elem()))
		}
		d.value(node, path, v.Elem(), nil)
	case reflect.Map:
		d.mapping(node, path, v)
	default:
		d.Report(node, "%sspec: unsupported type %s", prefix(path), t)
	}
}

// scalar reports a problem and returns false unless node is a scalar.
func (d *Decoder) scalar(node *yaml.Node, path, want string) bool {
	if node.Kind == yaml.ScalarNode {
		return true
	}
	d.Report(node, "%sexpected %s, got %s", prefix(path), want, kindName(node))
	return false
}

func (d *Decoder) duration(node *yaml.Node, path string, v reflect.Value) {
	if !d.scalar(node, path, "a duration") {
		return
	}
	dur, err := ParseDuration(node.Value)
	if err != nil {
		hint := "use e.g. 2s, 500ms, 1m, 3d, 1d12h"
		d.Report(node, "%s%q is not a duration (%s)", prefix(path), node.Value, hint)
		return
	}
	if dur < 0 {
		d.Report(node, "%s%s is negative (use 0 to disable, or a positive duration like 2s)", prefix(path), node.Value)
		return
	}
	v.SetInt(int64(dur))
}

// ParseDuration is time.ParseDuration that also accepts a leading whole
// number of days: "3d", "1d12h" (a day is 24 hours).
func ParseDuration(s string) (time.Duration, error) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 || i >= len(s) || s[i] != 'd' {
		return time.ParseDuration(s)
	}
	days, err := strconv.ParseInt(s[:i], 10, 32)
	if err != nil {
		return 0, fmt.Errorf("time: invalid duration %q", s)
	}
	dur := time.Duration(days) * 24 * time.Hour
	if rest := s[i+1:]; rest != "" {
		r, err := time.ParseDuration(rest)
		if err != nil || r < 0 {
			return 0, fmt.Errorf("time: invalid duration %q", s)
		}
		dur += r
	}
	return dur, nil
}

// list decodes a sequence of mappings into a slice of structs, each with
// its defaults.
func (d *Decoder) list(node *yaml.Node, path string, v reflect.Value) {
	if node.Kind != yaml.SequenceNode {
		d.Report(node, "%sexpected a list, got %s", prefix(path), kindName(node))
		return
	}
	s := reflect.MakeSlice(v.Type(), len(node.Content), len(node.Content))
	for i, item := range node.Content {
		d.structs(resolve(item), fmt.Sprintf("%s[%d]", path, i), []reflect.Value{s.Index(i)})
	}
	v.Set(s)
}

func (d *Decoder) strings(node *yaml.Node, path string, v reflect.Value) {
	if node.Kind == yaml.ScalarNode {
		s := reflect.MakeSlice(v.Type(), 1, 1)
		s.Index(0).SetString(node.Value)
		v.Set(s)
		return
	}
	if node.Kind != yaml.SequenceNode {
		d.Report(node, "%sexpected a list of strings, got %s", prefix(path), kindName(node))
		return
	}
	s := reflect.MakeSlice(v.Type(), 0, len(node.Content))
	for i, item := range node.Content {
		item = resolve(item)
		if item.Kind != yaml.ScalarNode {
			d.Report(item, "%s[%d]: expected a string, got %s", path, i, kindName(item))
			continue
		}
		s = reflect.Append(s, reflect.ValueOf(item.Value).Convert(v.Type().Elem()))
	}
	v.Set(s)
}

func (d *Decoder) mapping(node *yaml.Node, path string, v reflect.Value) {
	t := v.Type()
	if t.Key().Kind() != reflect.String {
		d.Report(node, "%sspec: unsupported map key type %s", prefix(path), t.Key())
		return
	}
	if node.Kind != yaml.MappingNode {
		d.Report(node, "%sexpected a mapping of names, got %s", prefix(path), kindName(node))
		return
	}
	node = merged(node)
	if v.IsNil() {
		v.Set(reflect.MakeMapWithSize(t, len(node.Content)/2))
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(node.Content); i += 2 {
		k, val := resolve(node.Content[i]), node.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.Report(k, "%snames must be strings, got %s", prefix(path), kindName(k))
			continue
		}
		if seen[k.Value] {
			d.Report(k, "%s%q is defined twice (names must be unique)", prefix(path), k.Value)
			continue
		}
		seen[k.Value] = true
		elem := reflect.New(t.Elem()).Elem()
		isStruct := elem.Kind() == reflect.Struct && !custom(elem.Type())
		if elem.Kind() == reflect.Pointer && elem.Type().Elem().Kind() == reflect.Struct {
			elem.Set(reflect.New(elem.Type().Elem())) // a null value still gets defaults
			isStruct = true
		}
		if isNull(val) {
			if !isStruct {
				d.Report(k, "%s: needs a value", join(path, k.Value))
				continue
			}
			val = emptyMapping(k)
		}
		d.value(val, join(path, k.Value), elem, nil)
		v.SetMapIndex(reflect.ValueOf(k.Value).Convert(t.Key()), elem)
	}
}

type target struct {
	v reflect.Value
	f field
}

// structs decodes mapping node into one or more structs sharing its keys,
// then fills absent keys with defaults and reports missing required ones.
func (d *Decoder) structs(node *yaml.Node, path string, vals []reflect.Value) {
	if node == nil || isNull(node) {
		node = &yaml.Node{Kind: yaml.MappingNode, Line: lineOf(node), Column: colOf(node)}
	}
	var all []target
	byKey := map[string]target{}
	var names []string
	for _, v := range vals {
		for _, f := range fieldsOf(v.Type()) {
			if _, dup := byKey[f.key]; dup {
				continue
			}
			if e, ok := d.enums[enumKey{v.Type(), f.key}]; ok {
				f.enum = e
			}
			tg := target{v: v, f: f}
			byKey[f.key] = tg
			all = append(all, tg)
			names = append(names, f.key)
		}
	}
	if node.Kind != yaml.MappingNode {
		d.Report(node, "%sexpected a mapping with keys %s, got %s", prefix(path), strings.Join(names, ", "), kindName(node))
		return
	}
	node = merged(node)
	seen := map[string]bool{}
	for i := 0; i+1 < len(node.Content); i += 2 {
		k, val := resolve(node.Content[i]), node.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.Report(k, "%skeys must be strings, got %s", prefix(path), kindName(k))
			continue
		}
		tg, ok := byKey[k.Value]
		if !ok {
			d.Report(k, "%sunknown key %q%s", prefix(path), k.Value, DidYouMean(k.Value, names))
			continue
		}
		if seen[k.Value] {
			d.Report(k, "%s%q is set twice (keep one)", prefix(path), k.Value)
			continue
		}
		seen[k.Value] = true
		if isNull(val) {
			continue // "key:" alone means absent: default applies
		}
		d.value(val, join(path, k.Value), tg.v.Field(tg.f.index), tg.f.enum)
	}
	for _, tg := range all {
		if seen[tg.f.key] && !isNull(Value(node, tg.f.key)) {
			continue
		}
		fv := tg.v.Field(tg.f.index)
		p := join(path, tg.f.key)
		switch {
		case tg.f.required:
			d.Report(node, "%smissing required key %q%s", prefix(path), tg.f.key, hint(tg.f.doc))
		case tg.f.hasDef:
			d.applyDefault(node, p, fv, tg.f)
		case fv.Kind() == reflect.Struct && !custom(fv.Type()):
			if _, hooked := d.hooks[fv.Type()]; !hooked {
				d.structs(emptyMapping(node), p, []reflect.Value{fv}) // nested defaults
			}
		}
	}
}

// applyDefault decodes a default tag exactly like YAML input, except that a
// string field takes its default literally ("{symbol}#{timeframe}" is a key
// template, not a YAML mapping).
func (d *Decoder) applyDefault(at *yaml.Node, path string, v reflect.Value, f field) {
	if strings.TrimSpace(f.def) == "" {
		return // default:"" means the zero value
	}
	if v.Kind() == reflect.String && !custom(v.Type()) {
		d.value(&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: f.def, Line: lineOf(at), Column: colOf(at)}, path, v, f.enum)
		return
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(f.def), &doc); err != nil {
		d.Report(at, "%sspec: default %q is not valid YAML: %v", prefix(path), f.def, err)
		return
	}
	n := resolve(&doc)
	if n == nil || n.Kind == 0 {
		return
	}
	before := len(d.problems)
	d.value(n, path, v, f.enum)
	for i := before; i < len(d.problems); i++ {
		d.problems[i].Line, d.problems[i].Col = lineOf(at), colOf(at)
		d.problems[i].Msg = "spec: bad default: " + d.problems[i].Msg
	}
}

func emptyMapping(at *yaml.Node) *yaml.Node {
	return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: lineOf(at), Column: colOf(at)}
}

func lineOf(n *yaml.Node) int {
	if n == nil {
		return 0
	}
	return n.Line
}

func colOf(n *yaml.Node) int {
	if n == nil {
		return 0
	}
	return n.Column
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "an unexpected YAML node"
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// hint returns " (first sentence of doc)", or "" without a doc.
func hint(doc string) string {
	if i := strings.Index(doc, ". "); i >= 0 {
		doc = doc[:i]
	}
	if doc = strings.TrimSuffix(doc, "."); doc == "" {
		return ""
	}
	return " (" + doc + ")"
}

// cleanYAMLError drops the "yaml: " prefixes of errors from yaml.v3.
func cleanYAMLError(err error) string {
	s := err.Error()
	s = strings.TrimPrefix(s, "yaml: unmarshal errors:\n  ")
	return strings.TrimPrefix(s, "yaml: ")
}
