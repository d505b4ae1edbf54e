package config

import (
	"reflect"
	"strings"
)

// Changed names the keys (dotted, under prefix) whose values differ
// between a and b, two values of one config struct type: each field by
// its toml tag, nested tables key by key.
func Changed(prefix string, a, b any) []string {
	return changed(prefix, reflect.ValueOf(a), reflect.ValueOf(b))
}

func changed(prefix string, a, b reflect.Value) []string {
	var keys []string
	for i := range a.NumField() {
		f := a.Type().Field(i)
		tag := strings.Split(f.Tag.Get("toml"), ",")[0]
		if tag == "" || tag == "-" || !f.IsExported() {
			continue
		}
		key := prefix + "." + tag
		av, bv := a.Field(i), b.Field(i)
		if av.Kind() == reflect.Struct && !isLeaf(av.Type()) {
			keys = append(keys, changed(key, av, bv)...)
			continue
		}
		if !reflect.DeepEqual(av.Interface(), bv.Interface()) {
			keys = append(keys, key)
		}
	}
	return keys
}

// isLeaf: a struct that is one value in TOML (a Duration), not a table.
func isLeaf(t reflect.Type) bool { return t == reflect.TypeOf(Duration{}) }
