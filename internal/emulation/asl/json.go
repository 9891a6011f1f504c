package asl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// MaxPayloadBytes is Step Functions' quota on a state's input or output and on
// a task's result: 256 KiB of data as a UTF-8 encoded JSON string.
const MaxPayloadBytes = 262144

// Values flowing through an execution are plain Go JSON values: nil, bool,
// int64, float64, string, []any and map[string]any. Integers stay int64 so
// ids and counters survive a round trip exactly. Values are never mutated
// once built; every transformation copies what it changes.

// decodeJSON parses exactly one JSON value.
func decodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("unexpected data after the JSON value")
	}
	return normalizeNumbers(v)
}

func normalizeNumbers(v any) (any, error) {
	switch t := v.(type) {
	case json.Number:
		return numberValue(string(t))
	case []any:
		for i, e := range t {
			n, err := normalizeNumbers(e)
			if err != nil {
				return nil, err
			}
			t[i] = n
		}
		return t, nil
	case map[string]any:
		for k, e := range t {
			n, err := normalizeNumbers(e)
			if err != nil {
				return nil, err
			}
			t[k] = n
		}
		return t, nil
	default:
		return v, nil
	}
}

func numberValue(s string) (any, error) {
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i, nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return nil, fmt.Errorf("number %s is out of range", s)
	}
	return f, nil
}

// encodeJSON renders v compactly and without HTML escaping, as Step Functions
// does, so sizes measured here match the service's.
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// mustJSON is for values built by the engine itself from decoded JSON, which
// always encode.
func mustJSON(v any) string {
	b, err := encodeJSON(v)
	if err != nil {
		panic(fmt.Sprintf("asl: value does not encode as JSON: %v", err))
	}
	return string(b)
}

func isNumber(v any) bool {
	switch v.(type) {
	case int64, float64:
		return true
	}
	return false
}

func toFloat(v any) (float64, bool) {
	switch t := v.(type) {
	case int64:
		return float64(t), true
	case float64:
		return t, true
	}
	return 0, false
}

// toInteger accepts integral numbers only, as the service does for counts and
// seconds ("1.5" is not a valid integer).
func toInteger(v any) (int64, bool) {
	switch t := v.(type) {
	case int64:
		return t, true
	case float64:
		if t == float64(int64(t)) {
			return int64(t), true
		}
	}
	return 0, false
}

// jsonEqual compares decoded JSON values structurally, treating 1 and 1.0 as
// the same number.
func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case string:
		y, ok := b.(string)
		return ok && x == y
	case int64, float64:
		if xi, ok := a.(int64); ok {
			if yi, ok := b.(int64); ok {
				return xi == yi
			}
		}
		xf, _ := toFloat(a)
		yf, ok := toFloat(b)
		return ok && xf == yf
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !jsonEqual(xv, yv) {
				return false
			}
		}
		return true
	}
	return false
}

func sortedKeys(m map[string]any) []string {
	return slices.Sorted(maps.Keys(m))
}
