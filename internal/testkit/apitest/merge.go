package apitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
)

// The description is one file, openapi.json; a branch that adds routes
// brings a fragment of it, openapi.<area>.json ({"paths": {...},
// "components": {...}}), which Merge folds in. The file is kept in one
// form, Canonical's, so that merges and diffs are line by line.
//
// A fragment's author should know one quirk of kin-openapi v0.153.0: a
// response schema that reaches a "$ref" and uses no JSON Schema 2020-12
// keyword (a type list, const, prefixItems...) is checked by its OpenAPI 3.0
// rules, where a field with no type refuses null. Inline small objects, or
// give a field that may be null its type list.

// DecodeJSON reads a JSON document with its numbers as written.
func DecodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// Merge deep-merges frag into base: objects member by member, lists of
// strings as their union (required, enum, tags), anything else replaced by
// the fragment's, which note is told of when it differed (a conflict for a
// person to look at). base is not modified.
func Merge(base, frag any, note func(string)) any {
	return merge(base, frag, "", note)
}

func merge(base, frag any, at string, note func(string)) any {
	switch f := frag.(type) {
	case map[string]any:
		b, ok := base.(map[string]any)
		if !ok {
			if base != nil {
				note(fmt.Sprintf("%s: an object replaces %T", at, base))
			}
			return frag
		}
		out := make(map[string]any, len(b)+len(f))
		for k, v := range b {
			out[k] = v
		}
		for k, v := range f {
			if old, ok := b[k]; ok {
				out[k] = merge(old, v, at+"/"+k, note)
			} else {
				out[k] = v
			}
		}
		return out
	case []any:
		b, ok := base.([]any)
		if ok && allStrings(b) && allStrings(f) {
			out := slices.Clone(b)
			for _, v := range f {
				if !slices.Contains(out, v) {
					out = append(out, v)
				}
			}
			return out
		}
	}
	if base != nil && !reflect.DeepEqual(base, frag) {
		note(fmt.Sprintf("%s: %v replaced by %v", at, short(base), short(frag)))
	}
	return frag
}

func allStrings(l []any) bool {
	for _, v := range l {
		if _, ok := v.(string); !ok {
			return false
		}
	}
	return true
}

func short(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 80 {
		return string(b[:77]) + "..."
	}
	return string(b)
}

// Canonical writes v as openapi.json is kept: one member or item per line,
// no indentation (the file is embedded in the ApiFunction, whose size is
// budgeted), keys sorted, no HTML escaping, a final newline.
func Canonical(v any) ([]byte, error) {
	var buf bytes.Buffer
	if err := writeCanonical(&buf, v); err != nil {
		return nil, err
	}
	buf.WriteByte('\n')
	return buf.Bytes(), nil
}

func writeCanonical(buf *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 0 {
			buf.WriteString("{}")
			return nil
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		buf.WriteString("{\n")
		for i, k := range keys {
			if i > 0 {
				buf.WriteString(",\n")
			}
			if err := scalar(buf, k); err != nil {
				return err
			}
			buf.WriteByte(':')
			if err := writeCanonical(buf, x[k]); err != nil {
				return err
			}
		}
		buf.WriteString("\n}")
	case []any:
		if len(x) == 0 {
			buf.WriteString("[]")
			return nil
		}
		buf.WriteString("[\n")
		for i, e := range x {
			if i > 0 {
				buf.WriteString(",\n")
			}
			if err := writeCanonical(buf, e); err != nil {
				return err
			}
		}
		buf.WriteString("\n]")
	default:
		return scalar(buf, v)
	}
	return nil
}

func scalar(buf *bytes.Buffer, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	buf.Write(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
	return nil
}
