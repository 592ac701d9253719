package spec

import (
	"fmt"
	"reflect"
	"strings"
)

// Markdown renders a reference of the struct v (or *v) points at: a table of
// its keys (key, type, default, required, description) under title, then one
// section per nested struct type, in the order they are first reached.
func Markdown(title string, v any) string {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var b strings.Builder
	if t == nil || t.Kind() != reflect.Struct {
		fmt.Fprintf(&b, "## %s\n\n(no keys)\n", title)
		return b.String()
	}
	type section struct {
		t     reflect.Type
		paths []string
	}
	var order []*section
	byType := map[reflect.Type]*section{}
	var walk func(t reflect.Type, path string)
	walk = func(t reflect.Type, path string) {
		if s, ok := byType[t]; ok {
			s.paths = append(s.paths, path)
			return
		}
		s := &section{t: t, paths: []string{path}}
		byType[t] = s
		order = append(order, s)
		for _, f := range fieldsOf(t) {
			if nt, sub := nested(t.Field(f.index).Type, join(path, f.key)); nt != nil {
				walk(nt, sub)
			}
		}
	}
	walk(t, "")
	for i, s := range order {
		if i == 0 {
			fmt.Fprintf(&b, "## %s\n\n", title)
		} else {
			fmt.Fprintf(&b, "### %s\n\n", s.t.Name())
			fmt.Fprintf(&b, "At `%s`.\n\n", strings.Join(s.paths, "`, `"))
		}
		table(&b, s.t)
	}
	return b.String()
}

// nested returns the struct type documented in its own section for a field
// of type t at path, and the path to show for it.
func nested(t reflect.Type, path string) (reflect.Type, string) {
	switch {
	case t == durationType || custom(t):
		return nil, ""
	case t.Kind() == reflect.Struct:
		return t, path
	case t.Kind() == reflect.Pointer:
		return nested(t.Elem(), path)
	case t.Kind() == reflect.Map:
		return nested(t.Elem(), path+".<name>")
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
		return nested(t.Elem(), path+"[]")
	}
	return nil, ""
}

func table(b *strings.Builder, t reflect.Type) {
	b.WriteString("| key | type | default | required | description |\n")
	b.WriteString("|---|---|---|---|---|\n")
	for _, f := range fieldsOf(t) {
		def := ""
		if f.hasDef && f.def != "" {
			def = "`" + f.def + "`"
		}
		req := ""
		if f.required {
			req = "yes"
		}
		typ := typeName(t.Field(f.index).Type)
		if len(f.enum) > 0 {
			typ = "one of `" + strings.Join(f.enum, "`, `") + "`"
		}
		fmt.Fprintf(b, "| `%s` | %s | %s | %s | %s |\n", f.key, cell(typ), def, req, cell(f.doc))
	}
	b.WriteString("\n")
}

func typeName(t reflect.Type) string {
	switch {
	case t == durationType:
		return "duration"
	case custom(t) && t.Name() != "":
		return strings.ToLower(t.Name())
	case t.Kind() == reflect.Pointer:
		return typeName(t.Elem())
	case t.Kind() == reflect.Struct:
		return t.Name()
	case t.Kind() == reflect.Map:
		return "map of name → " + typeName(t.Elem())
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
		return "list of strings"
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
		return "list of " + t.Elem().Name()
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		return "int"
	}
	return t.Kind().String()
}

// cell escapes text for a Markdown table cell.
func cell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}
