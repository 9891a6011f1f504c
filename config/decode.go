package config

import (
	"encoding"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/sandstep/sandstep/providers"
)

// The decoder is our own rather than toml.Decode into the Config struct
// because toml.Decode stops at the first mistyped value and matches keys
// case-insensitively; we want every problem at once, exact keys, and the
// line of each key.

// parse reads data into plain TOML values (map[string]any and friends) and
// records the line of every key. A syntax error is reported and parse
// returns nil.
func parse(data []byte, r *report) map[string]any {
	src := string(data)
	var top map[string]toml.Primitive
	md, err := toml.Decode(src, &top)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			// The line is counted from where the error starts: the
			// parser's own line count misses a line ending in "\r\n" in
			// some errors (and says line 0 for the first).
			start := min(max(pe.Position.Start, 0), len(src))
			r.addAt(1+strings.Count(src[:start], "\n"), "", "syntax error: %s", pe.Message)
		} else {
			r.addAt(0, "", "%v", err)
		}
		return nil
	}
	values := make(map[string]any, len(top))
	for k, prim := range top {
		var v any
		if err := md.PrimitiveDecode(prim, &v); err != nil {
			r.addAt(0, join("", k), "%v", err)
			continue
		}
		values[k] = v
		keyLines(&md, src, join("", k), prim, v, r.lines)
	}
	return values
}

// lineProbe fails on purpose: toml turns an Unmarshaler's error into a
// ParseError carrying the position the parser recorded for the key being
// decoded, which is the only public way to get at a key's position.
type lineProbe struct{}

var errLineProbe = errors.New("line probe")

func (*lineProbe) UnmarshalTOML(any) error { return errLineProbe }

// probeLine returns the line where prim's key or table header starts, or 0
// for a table that only exists implicitly (through [a.b] or a.b = 1).
func probeLine(md *toml.MetaData, src string, prim toml.Primitive) int {
	var pe toml.ParseError
	if err := md.PrimitiveDecode(prim, &lineProbe{}); !errors.As(err, &pe) || pe.Position.Line == 0 {
		return 0
	}
	// Position.Line is where the lexer finished the value (the last line of
	// a multi-line string); Start is where it began.
	start := min(max(pe.Position.Start, 0), len(src))
	return 1 + strings.Count(src[:start], "\n")
}

// keyLines records in lines the line of path and of everything under it and
// returns path's line (0 if unknown).
func keyLines(md *toml.MetaData, src, path string, prim toml.Primitive, raw any, lines map[string]int) int {
	line := probeLine(md, src, prim)
	first := 0 // earliest line of a child, for implicit tables
	earliest := func(l int) {
		if l > 0 && (first == 0 || l < first) {
			first = l
		}
	}
	switch v := raw.(type) {
	case map[string]any:
		var sub map[string]toml.Primitive
		if md.PrimitiveDecode(prim, &sub) == nil {
			for k, p := range sub {
				earliest(keyLines(md, src, join(path, k), p, v[k], lines))
			}
		}
	case []map[string]any:
		// The parser keeps one position per key path without an index, so
		// in [[a]] repeated the positions of every element but the last are
		// lost. Rather than point at a wrong line, problems there go without
		// one and name the element by index.
		if len(v) != 1 {
			return 0
		}
		var sub []map[string]toml.Primitive
		if md.PrimitiveDecode(prim, &sub) == nil && len(sub) == 1 {
			el := index(path, 0)
			for k, p := range sub[0] {
				earliest(keyLines(md, src, join(el, k), p, v[0][k], lines))
			}
			if line > 0 {
				lines[el] = line
			}
		}
	case []any:
		// Elements of an inline array (and keys of inline tables in it)
		// get the line where the array starts.
		if line > 0 {
			markAll(path, v, line, lines)
		}
	}
	if line == 0 {
		line = first
	}
	if line > 0 {
		lines[path] = line
	}
	return line
}

func markAll(path string, raw any, line int, lines map[string]int) {
	lines[path] = line
	switch v := raw.(type) {
	case map[string]any:
		for k, e := range v {
			markAll(join(path, k), e, line, lines)
		}
	case []any:
		for i, e := range v {
			markAll(index(path, i), e, line, lines)
		}
	}
}

// join appends key to a dotted key path, quoting it as TOML would.
func join(path, key string) string {
	k := toml.Key{key}.String()
	if path == "" {
		return k
	}
	return path + "." + k
}

func index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

var (
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
	durationType    = reflect.TypeFor[Duration]()
)

// tomlFields maps the toml key of each tagged field of struct type t to its
// field index.
func tomlFields(t reflect.Type) map[string]int {
	fields := make(map[string]int)
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("toml"), ",")
		if name != "" && name != "-" {
			fields[name] = i
		}
	}
	return fields
}

// decodeTable sets the fields of struct rv from table, leaving fields whose
// key is absent at their defaults.
func (r *report) decodeTable(path string, table map[string]any, rv reflect.Value) {
	fields := tomlFields(rv.Type())
	for _, k := range slices.Sorted(maps.Keys(table)) {
		key := join(path, k)
		if r.secretLiteral(key, k) {
			continue
		}
		i, ok := fields[k]
		if !ok {
			r.add(key, "unknown key %q%s", key, hint(path, k, slices.Sorted(maps.Keys(fields))))
			continue
		}
		fv := rv.Field(i)
		r.decodeValue(key, table[k], fv)
		if strings.HasSuffix(k, "_env") && fv.Kind() == reflect.String {
			r.checkEnvName(key, fv.String())
		}
	}
}

func (r *report) decodeValue(key string, raw any, rv reflect.Value) {
	t := rv.Type()
	if reflect.PointerTo(t).Implements(textUnmarshaler) {
		s, ok := raw.(string)
		if !ok {
			r.mistyped(key, t, raw)
			return
		}
		if err := rv.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s)); err != nil {
			r.add(key, "%s: %v", key, err)
		}
		return
	}
	switch t.Kind() {
	case reflect.String:
		s, ok := raw.(string)
		if !ok {
			r.mistyped(key, t, raw)
			return
		}
		rv.SetString(s)
	case reflect.Bool:
		b, ok := raw.(bool)
		if !ok {
			r.mistyped(key, t, raw)
			return
		}
		rv.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := raw.(int64)
		if !ok {
			r.mistyped(key, t, raw)
			return
		}
		if rv.OverflowInt(n) {
			r.add(key, "%s: %d is too large", key, n)
			return
		}
		rv.SetInt(n)
	case reflect.Float32, reflect.Float64:
		switch n := raw.(type) {
		case float64:
			rv.SetFloat(n)
		case int64:
			rv.SetFloat(float64(n))
		default:
			r.mistyped(key, t, raw)
		}
	case reflect.Slice:
		var items []any
		switch v := raw.(type) {
		case []any:
			items = v
		case []map[string]any:
			for _, m := range v {
				items = append(items, m)
			}
		default:
			r.mistyped(key, t, raw)
			return
		}
		s := reflect.MakeSlice(t, len(items), len(items))
		before := len(r.problems)
		for i, item := range items {
			r.decodeValue(index(key, i), item, s.Index(i))
		}
		// A half-decoded array keeps the default, so that checks do not
		// report its zero elements a second time.
		if len(r.problems) == before {
			rv.Set(s)
		}
	case reflect.Struct:
		m, ok := raw.(map[string]any)
		if !ok {
			r.mistyped(key, t, raw)
			return
		}
		r.decodeTable(key, m, rv)
	case reflect.Map:
		m, ok := raw.(map[string]any)
		if !ok || t.Key().Kind() != reflect.String {
			r.mistyped(key, t, raw)
			return
		}
		if rv.IsNil() {
			rv.Set(reflect.MakeMap(t))
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if r.secretLiteral(join(key, k), k) {
				continue
			}
			ev := reflect.New(t.Elem()).Elem()
			if d, ok := ev.Addr().Interface().(interface{ setDefaults() }); ok {
				d.setDefaults()
			}
			r.decodeValue(join(key, k), m[k], ev)
			rv.SetMapIndex(reflect.ValueOf(k).Convert(t.Key()), ev)
		}
	case reflect.Pointer:
		// An optional value: nil unless the file sets it.
		ev := reflect.New(t.Elem())
		before := len(r.problems)
		r.decodeValue(key, raw, ev.Elem())
		if len(r.problems) == before {
			rv.Set(ev)
		}
	default:
		// A field type the schema should never use; tests load every section.
		panic(fmt.Sprintf("config: %s has unsupported type %s", key, t))
	}
}

func (r *report) mistyped(key string, want reflect.Type, raw any) {
	r.add(key, "%s: must be %s, not %s", key, describeType(want), describeValue(raw))
}

func describeType(t reflect.Type) string {
	switch {
	case t == durationType:
		return `a duration such as "30s" or "5m"`
	case reflect.PointerTo(t).Implements(textUnmarshaler):
		return "a string"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice:
		return "an array"
	default:
		return "a table"
	}
}

func describeValue(raw any) string {
	switch raw.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case []map[string]any:
		return "an array of tables"
	case map[string]any:
		return "a table"
	case time.Time:
		return "a date/time"
	default:
		return fmt.Sprintf("a %T", raw)
	}
}

// secretLiteral reports a key that looks like it holds a secret's value.
// The value is never echoed: it may be the secret.
func (r *report) secretLiteral(key, name string) bool {
	if !looksSecret(name) {
		return false
	}
	r.add(key, "%s: secrets are never written in the config file; put the value in an environment variable and name it: %s_env = \"VARIABLE\"", key, name)
	return true
}

func looksSecret(name string) bool {
	n := strings.ToLower(name)
	if strings.HasSuffix(n, "_env") {
		return false
	}
	words := strings.FieldsFunc(n, func(c rune) bool { return c == '_' || c == '-' })
	if len(words) == 0 {
		return false
	}
	switch words[len(words)-1] {
	case "token", "secret", "password", "passwd", "apikey", "credentials":
		return true
	case "key":
		return len(words) > 1 && slices.Contains([]string{"api", "private", "secret", "access", "signing"}, words[len(words)-2])
	}
	return false
}

// envName is stricter than POSIX (upper case only) on purpose: a secret
// pasted where its variable's name belongs almost always has lower-case
// letters, so it is refused here without being echoed, instead of being
// named later in a "variable is not set" error.
var envName = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`)

func (r *report) checkEnvName(key, v string) {
	if v != "" && !envName.MatchString(v) {
		r.add(key, "%s: must be the name of an environment variable (A-Z, 0-9 and _, such as \"SANDY_API_KEY\"); the value is not shown in case it is the secret itself", key)
	}
}

// checkSecretRef checks a *_env key of a provider's table, which may also
// name a Secrets Manager secret or an SSM parameter (ParseSecretRef).
func (r *report) checkSecretRef(key, v string) {
	if v == "" {
		return
	}
	if _, err := ParseSecretRef(v); err != nil {
		r.add(key, "%s: %v", key, err)
	}
}

// checkPassThrough checks a table that is passed on unvalidated (a
// third-party provider's): no secret values, and *_env keys name variables.
func (r *report) checkPassThrough(path string, raw any) {
	switch v := raw.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			key := join(path, k)
			if r.secretLiteral(key, k) {
				continue
			}
			if strings.HasSuffix(k, "_env") {
				s, ok := v[k].(string)
				if !ok {
					r.add(key, "%s: must be a string naming an environment variable or a secret, not %s", key, describeValue(v[k]))
					continue
				}
				r.checkSecretRef(key, s)
				continue
			}
			r.checkPassThrough(key, v[k])
		}
	case []any:
		for i, e := range v {
			r.checkPassThrough(index(path, i), e)
		}
	case []map[string]any:
		for i, e := range v {
			r.checkPassThrough(index(path, i), e)
		}
	}
}

// hint suggests what an unknown key k in table path was meant to be: a
// near spelling among the table's keys, the same key in another table, or
// the list of keys the table has.
func hint(path, k string, names []string) string {
	if best := providers.ClosestKey(k, names); best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	for _, full := range schemaKeys()[k] {
		if full != join(path, k) {
			return fmt.Sprintf(" (did you mean %q?)", full)
		}
	}
	if path == "" {
		return fmt.Sprintf(" (known tables and keys: %s)", strings.Join(names, ", "))
	}
	return fmt.Sprintf(" (known keys in [%s]: %s)", path, strings.Join(names, ", "))
}

// schemaKeys maps every key name in Config to the full paths it has, for
// pointing a key written in the wrong table to the right one.
var schemaKeys = sync.OnceValue(func() map[string][]string {
	keys := make(map[string][]string)
	var walk func(path string, t reflect.Type)
	walk = func(path string, t reflect.Type) {
		for name, i := range tomlFields(t) {
			full := join(path, name)
			keys[name] = append(keys[name], full)
			ft := t.Field(i).Type
			if ft.Kind() == reflect.Struct && !reflect.PointerTo(ft).Implements(textUnmarshaler) {
				walk(full, ft)
			}
		}
	}
	walk("", reflect.TypeFor[Config]())
	for _, v := range keys {
		slices.Sort(v)
	}
	return keys
})
