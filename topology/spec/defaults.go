package spec

import (
	"fmt"
	"reflect"

	"gopkg.in/yaml.v3"
)

// FillDefaults sets every zero-valued field of the struct v points to (and
// of its nested structs) from its `default` tag, exactly as decoding a YAML
// mapping without that key would. A connector whose Config is built in Go
// calls it, so the tags stay the one list of defaults.
func FillDefaults(v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("spec: FillDefaults wants a pointer to a struct, got %T", v)
	}
	d := NewDecoder("(defaults)")
	d.fillDefaults(rv.Elem(), "")
	if ps := d.Problems(); len(ps) > 0 {
		return ps
	}
	return nil
}

func (d *Decoder) fillDefaults(sv reflect.Value, path string) {
	for _, f := range fieldsOf(sv.Type()) {
		fv := sv.Field(f.index)
		switch {
		case f.hasDef && fv.IsZero():
			d.applyDefault(&yaml.Node{}, join(path, f.key), fv, f)
		case fv.Kind() == reflect.Struct && !custom(fv.Type()):
			d.fillDefaults(fv, join(path, f.key))
		}
	}
}
