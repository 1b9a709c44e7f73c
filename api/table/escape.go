package table

import (
	"encoding/json"
	"reflect"

	"github.com/llmgw/llmgw/api"
)

// escaped returns a deep copy of v with every string in it passed through
// api.EscapeControl. Every table writer starts with it, on the whole answer,
// rather than escaping field by field: a node name, a path or a source is
// whatever the coordinator answered, and a field added later is covered
// without anyone remembering to. The copy leaves the caller's value as it
// was (--json prints the answer, not the table's rendering of it).
func escaped[T any](v T) T {
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out T
	if err := json.Unmarshal(b, &out); err != nil {
		return v
	}
	escapeValue(reflect.ValueOf(&out).Elem())
	return out
}

func escapeValue(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		if v.CanSet() {
			v.SetString(api.EscapeControl(v.String()))
		}
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			escapeValue(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				escapeValue(v.Field(i))
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			escapeValue(v.Index(i))
		}
	case reflect.Map:
		if v.IsNil() {
			return
		}
		out := reflect.MakeMapWithSize(v.Type(), v.Len())
		for it := v.MapRange(); it.Next(); {
			k := reflect.New(v.Type().Key()).Elem()
			k.Set(it.Key())
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(it.Value())
			escapeValue(k)
			escapeValue(e)
			out.SetMapIndex(k, e)
		}
		v.Set(out)
	}
}
