// Package apitest holds what tests of every package assert about the
// API's answers, so that the rule has one owner.
package apitest

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// CheckAnswer asserts what every answer of the API is, whatever it was
// asked: never a 5xx (a panic in a handler becomes a 500), and every 4xx
// the JSON error shape {"error":{"code","message","field"}} whose field,
// when it names one, is what its message is about. It returns a JSON
// object answer decoded, or nil.
func CheckAnswer(t testing.TB, rec *httptest.ResponseRecorder, what string) map[string]any {
	t.Helper()
	res := rec.Result()
	body := rec.Body.Bytes()
	if res.StatusCode >= 500 {
		t.Fatalf("%s: %d %s", what, res.StatusCode, body)
	}
	ct := res.Header.Get("Content-Type")
	if res.StatusCode < 400 {
		if strings.HasPrefix(ct, "application/json") && !json.Valid(body) {
			t.Fatalf("%s: %d with a body that is not JSON: %q", what, res.StatusCode, body)
		}
		var m map[string]any
		_ = json.Unmarshal(body, &m)
		return m
	}
	var shape struct {
		Error *struct {
			Code    string  `json:"code"`
			Message string  `json:"message"`
			Field   *string `json:"field"`
		} `json:"error"`
	}
	if !strings.HasPrefix(ct, "application/json") || json.NewDecoder(bytes.NewReader(body)).Decode(&shape) != nil || shape.Error == nil {
		t.Fatalf("%s: %d is not the JSON error shape (%s): %q", what, res.StatusCode, ct, body)
	}
	e := shape.Error
	if e.Code == "" || e.Message == "" {
		t.Fatalf("%s: error without code or message: %q", what, body)
	}
	if f := e.Field; f != nil && !mentions(e.Message, *f) {
		t.Fatalf("%s: field %q is not what the message %q is about", what, *f, e.Message)
	}
	return nil
}

// mentions reports whether a message names field: as it is, quoted (an
// unknown field sent by the client), or in words ("session_id" is "the
// session id" in a sentence).
func mentions(msg, field string) bool {
	return field != "" && (strings.Contains(msg, field) || strings.Contains(msg, strconv.Quote(field)) ||
		strings.Contains(msg, strings.ReplaceAll(field, "_", " ")))
}
