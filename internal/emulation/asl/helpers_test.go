package asl

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// handlers maps function ARNs to in-process handlers, as a host does.
type handlers map[string]func(ctx context.Context, payload []byte) ([]byte, error)

func (h handlers) Invoke(ctx context.Context, arn string, payload []byte) ([]byte, error) {
	fn, ok := h[arn]
	if !ok {
		return nil, fmt.Errorf("no handler for %s", arn)
	}
	return fn(ctx, payload)
}

// echo returns its payload.
func echo(_ context.Context, p []byte) ([]byte, error) { return p, nil }

// constant returns the same JSON every time.
func constant(out string) func(context.Context, []byte) ([]byte, error) {
	return func(context.Context, []byte) ([]byte, error) { return []byte(out), nil }
}

// recorder keeps the payloads a handler received.
type recorder struct {
	mu       sync.Mutex
	payloads []string
}

func (r *recorder) wrap(fn func(context.Context, []byte) ([]byte, error)) func(context.Context, []byte) ([]byte, error) {
	return func(ctx context.Context, p []byte) ([]byte, error) {
		r.mu.Lock()
		r.payloads = append(r.payloads, string(p))
		r.mu.Unlock()
		return fn(ctx, p)
	}
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.payloads...)
}

const (
	fnA = "arn:aws:lambda:us-east-1:123456789012:function:a"
	fnB = "arn:aws:lambda:us-east-1:123456789012:function:b"
	fnC = "arn:aws:lambda:us-east-1:123456789012:function:c"
)

var testEpoch = time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)

func mustLoad(t testing.TB, def string, opts ...LoadOptions) *Machine {
	t.Helper()
	var o LoadOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	m, err := Load([]byte(def), o)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return m
}

// run executes def to completion on an InstantClock and returns the result
// with the execution and the clock.
func run(t testing.TB, def, input string, inv Invoker, opts ...StartOption) (Result, *Execution, *InstantClock) {
	t.Helper()
	return runMachine(t, mustLoad(t, def), input, inv, opts...)
}

func runMachine(t testing.TB, m *Machine, input string, inv Invoker, opts ...StartOption) (Result, *Execution, *InstantClock) {
	t.Helper()
	if inv == nil {
		inv = handlers{}
	}
	clock := NewInstantClock(testEpoch)
	quiet := WithLogger(slog.New(slog.DiscardHandler))
	x, err := m.Start(context.Background(), "exec-1", []byte(input), inv, append([]StartOption{WithClock(clock), quiet}, opts...)...)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := x.Wait(ctx)
	if err != nil {
		t.Fatalf("Wait: %v (history: %s)", err, historyString(x))
	}
	return res, x, clock
}

func historyString(x *Execution) string {
	var b strings.Builder
	for _, e := range x.History() {
		fmt.Fprintf(&b, "\n  %d<-%d %s %s %s", e.ID, e.PreviousID, e.Type, e.StateName, e.Details)
	}
	return b.String()
}

// wantSucceeded fails unless res SUCCEEDED with output equal (as JSON) to want.
func wantSucceeded(t testing.TB, res Result, x *Execution, want string) {
	t.Helper()
	if res.Status != StatusSucceeded {
		t.Fatalf("status %s (%s: %s), want SUCCEEDED; history:%s", res.Status, res.Error, res.Cause, historyString(x))
	}
	if !sameJSON(t, string(res.Output), want) {
		t.Fatalf("output %s, want %s", res.Output, want)
	}
}

func wantFailed(t testing.TB, res Result, x *Execution, errName string) {
	t.Helper()
	if res.Status != StatusFailed || res.Error != errName {
		t.Fatalf("got %s %q (%s), want FAILED %q; history:%s", res.Status, res.Error, res.Cause, errName, historyString(x))
	}
}

func sameJSON(t testing.TB, a, b string) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal([]byte(a), &x); err != nil {
		t.Fatalf("not JSON: %s: %v", a, err)
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		t.Fatalf("not JSON: %s: %v", b, err)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

// eventTypes lists the history's event types, for order assertions.
func eventTypes(x *Execution) []EventType {
	var out []EventType
	for _, e := range x.History() {
		out = append(out, e.Type)
	}
	return out
}

func eventsOf(x *Execution, typ EventType) []HistoryEvent {
	var out []HistoryEvent
	for _, e := range x.History() {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

func details(t testing.TB, e HistoryEvent) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(e.Details, &m); err != nil {
		t.Fatalf("event %d details: %v", e.ID, err)
	}
	return m
}

// aslDefs holds every test definition that must be valid Amazon States
// Language; TestDefinitionsPassASLValidator checks them with asl-validator.
var aslDefs = map[string]string{}

// asl registers a valid test definition under a unique name and returns it.
func asl(name, def string) string {
	if _, dup := aslDefs[name]; dup {
		panic("duplicate test definition " + name)
	}
	aslDefs[name] = def
	return def
}
