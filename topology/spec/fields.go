package spec

import (
	"encoding"
	"reflect"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

var (
	durationType    = reflect.TypeFor[time.Duration]()
	unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()
	textType        = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// field is one key of a struct, read from its tags.
type field struct {
	key      string
	index    int
	def      string
	hasDef   bool
	doc      string
	required bool
	enum     []string
}

// fieldsOf lists the keys of struct type t in declaration order. Fields
// tagged yaml:"-" and unexported fields are not keys.
func fieldsOf(t reflect.Type) []field {
	var out []field
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		tag := sf.Tag.Get("yaml")
		if tag == "-" {
			continue
		}
		key, _, _ := strings.Cut(tag, ",")
		if key == "" {
			key = strings.ToLower(sf.Name)
		}
		f := field{key: key, index: i, doc: sf.Tag.Get("doc"), required: sf.Tag.Get("required") == "true"}
		f.def, f.hasDef = sf.Tag.Lookup("default")
		if e := sf.Tag.Get("enum"); e != "" {
			f.enum = strings.Split(e, "|")
		}
		out = append(out, f)
	}
	return out
}

// implementsUnmarshaler reports whether *t decodes itself from YAML.
func implementsUnmarshaler(t reflect.Type) bool {
	return reflect.PointerTo(t).Implements(unmarshalerType)
}

// implementsText reports whether *t decodes itself from a string.
func implementsText(t reflect.Type) bool {
	return reflect.PointerTo(t).Implements(textType)
}

// custom reports whether t decodes itself (yaml.Unmarshaler or
// encoding.TextUnmarshaler), so the decoder must not look inside it.
func custom(t reflect.Type) bool { return implementsUnmarshaler(t) || implementsText(t) }
