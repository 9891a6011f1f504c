package providers

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"
)

// A provider owns its settings: the [provider.<name>] table of config.toml
// reaches Configure as JSON (Config.Settings), untouched by the host apart
// from its refusal of secret values. The provider decodes it with
// DecodeSettings, checks the values, and reports every problem at once in a
// *SettingsError, each naming its key; the host adds the file and line of
// each key (see config.Config.ProviderError), so a user reads
//
//	config.toml:41: provider.local.max_procs: unknown key (did you mean "max_processes"?)

// SettingProblem is one thing wrong with a provider's settings.
type SettingProblem struct {
	// Key is the key's path inside the provider's table: "max_processes",
	// "dns_servers[1]", "fail.Get".
	Key string
	// Message is a sentence that starts with the key as Key names it, so
	// that the host can put the table's path in front of it.
	Message string
}

// SettingsError is every problem of a provider's settings. It unwraps to
// ErrInvalidArgument, so that CodeOf says InvalidArgument; its problems
// cross the plugin boundary intact.
type SettingsError struct {
	Problems []SettingProblem
}

// Add records a problem with key; the message is format's, after the key.
func (e *SettingsError) Add(key, format string, args ...any) {
	e.Problems = append(e.Problems, SettingProblem{Key: key, Message: key + ": " + fmt.Sprintf(format, args...)})
}

// Err returns e when it holds a problem, else nil.
func (e *SettingsError) Err() error {
	if e == nil || len(e.Problems) == 0 {
		return nil
	}
	return e
}

func (e *SettingsError) Error() string {
	msgs := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		msgs[i] = p.Message
	}
	return "settings: " + strings.Join(msgs, "; ")
}

func (e *SettingsError) Unwrap() error { return ErrInvalidArgument }

// DecodeSettings decodes a settings JSON object into the struct v points
// to, over the values v already holds (its defaults). Keys are matched
// exactly to the fields' json tags; every unknown key and every value of
// the wrong type is reported, in one *SettingsError. Empty settings leave v
// as it is.
func DecodeSettings(settings []byte, v any) error {
	if len(bytes.TrimSpace(settings)) == 0 {
		return nil
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Struct {
		panic(fmt.Sprintf("providers.DecodeSettings: want a pointer to a struct, not %T", v))
	}
	var e SettingsError
	decodeObject(&e, "", settings, rv.Elem())
	return e.Err()
}

// decodeObject decodes a JSON object into struct rv; path is the object's
// key ("" at the top).
func decodeObject(e *SettingsError, path string, data []byte, rv reflect.Value) {
	var table map[string]json.RawMessage
	if err := json.Unmarshal(data, &table); err != nil {
		if path == "" {
			e.Problems = append(e.Problems, SettingProblem{Message: "must be a table (a JSON object)"})
		} else {
			e.Add(path, "must be a table, not %s", jsonKind(data))
		}
		return
	}
	fields := jsonFields(rv.Type())
	known := slices.Sorted(maps.Keys(fields))
	for _, k := range slices.Sorted(maps.Keys(table)) {
		key := k
		if path != "" {
			key = path + "." + k
		}
		i, ok := fields[k]
		if !ok {
			if best := ClosestKey(k, known); best != "" {
				e.Add(key, "unknown key (did you mean %q?)", best)
			} else {
				e.Add(key, "unknown key (known keys: %s)", strings.Join(known, ", "))
			}
			continue
		}
		fv := rv.Field(i)
		if fv.Kind() == reflect.Struct && !reflect.PointerTo(fv.Type()).Implements(textUnmarshaler) {
			decodeObject(e, key, table[k], fv)
			continue
		}
		// Into a fresh value, so that a bad value keeps the default.
		nv := reflect.New(fv.Type())
		if err := json.Unmarshal(table[k], nv.Interface()); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				want, got := describeGoType(fv.Type()), jsonKind(table[k])
				if fv.Kind() == reflect.Slice && got == "an array" {
					e.Add(key, "must be %s", want) // an element is wrong
				} else {
					e.Add(key, "must be %s, not %s", want, got)
				}
			} else {
				e.Add(key, "%v", unwrapJSON(err))
			}
			continue
		}
		fv.Set(nv.Elem())
	}
}

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

// jsonFields maps the json key of each tagged field of struct type t to its
// index.
func jsonFields(t reflect.Type) map[string]int {
	fields := make(map[string]int)
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			fields[name] = i
		}
	}
	return fields
}

// unwrapJSON drops encoding/json's wording around an UnmarshalText error.
func unwrapJSON(err error) error {
	if u := errors.Unwrap(err); u != nil {
		return u
	}
	return err
}

func describeGoType(t reflect.Type) string {
	if t == reflect.TypeFor[Duration]() {
		return `a duration such as "30s" or "5m"`
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice:
		switch t.Elem().Kind() {
		case reflect.String:
			return "an array of strings"
		case reflect.Int, reflect.Int64:
			return "an array of integers"
		}
		return "an array"
	default:
		return "a table"
	}
}

func jsonKind(raw json.RawMessage) string {
	switch b := bytes.TrimSpace(raw); {
	case len(b) == 0:
		return "nothing"
	case b[0] == '"':
		return "a string"
	case b[0] == '{':
		return "a table"
	case b[0] == '[':
		return "an array"
	case b[0] == 't' || b[0] == 'f':
		return "a boolean"
	case b[0] == 'n':
		return "null"
	case bytes.ContainsAny(b, ".eE"):
		return "a float"
	default:
		return "an integer"
	}
}

// ClosestKey returns the name nearest to k within a third of k's length in
// edits, or one that starts with k or k with it ("bwrap" for "bwrap_path");
// "" when none is that close. It is how a mistyped key gets its "did you
// mean".
func ClosestKey(k string, names []string) string {
	best, bestD := "", 1<<30
	for _, n := range names {
		if strings.EqualFold(n, k) {
			return n
		}
		d := editDistance(k, n)
		near := d <= max(1, len(k)/3) ||
			(min(len(k), len(n)) >= 4 && (strings.HasPrefix(n, k) || strings.HasPrefix(k, n)))
		if near && d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and swaps of neighbours each cost one.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// Duration is a time.Duration that settings write as a Go duration string
// ("30s", "5m").
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalText parses a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("invalid duration %q (want a number with a unit, e.g. \"30s\" or \"5m\")", string(b))
	}
	*d = Duration(v)
	return nil
}

// MarshalText writes a Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }
