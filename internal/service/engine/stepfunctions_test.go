package engine_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/sandstep/sandstep/internal/service/awsenv"
	"github.com/sandstep/sandstep/internal/service/engine"
)

const machine = "arn:aws:states:eu-west-1:000000000000:stateMachine:research"

// fakeSFN keeps executions by name, as Step Functions' JSON protocol
// describes them, and checks that every call is signed for "states".
type fakeSFN struct {
	t     *testing.T
	mu    sync.Mutex
	execs map[string]string // name -> input
	stops []string
}

func (f *fakeSFN) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if auth := r.Header.Get("Authorization"); !strings.Contains(auth, "/eu-west-1/states/aws4_request") {
		f.t.Errorf("unsigned or wrongly scoped call: %q", auth)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-amz-json-1.0" {
		f.t.Errorf("content type %q", ct)
	}
	var in map[string]string
	_ = json.NewDecoder(r.Body).Decode(&in)
	f.mu.Lock()
	defer f.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	fail := func(code string) {
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]string{"__type": "com.amazonaws.swf.service.model#" + code, "message": code})
	}
	switch r.Header.Get("X-Amz-Target") {
	case "AWSStepFunctions.StartExecution":
		if in["stateMachineArn"] != machine {
			fail("StateMachineDoesNotExist")
			return
		}
		if _, ok := f.execs[in["name"]]; ok {
			fail("ExecutionAlreadyExists")
			return
		}
		f.execs[in["name"]] = in["input"]
		_ = json.NewEncoder(w).Encode(map[string]any{"executionArn": "arn:aws:states:eu-west-1:000000000000:execution:research:" + in["name"], "startDate": 1})
	case "AWSStepFunctions.StopExecution":
		name := in["executionArn"][strings.LastIndexByte(in["executionArn"], ':')+1:]
		if _, ok := f.execs[name]; !ok || in["error"] != "JobCancelled" {
			fail("ExecutionDoesNotExist")
			return
		}
		f.stops = append(f.stops, in["executionArn"]+" "+in["cause"])
		_, _ = w.Write([]byte(`{"stopDate":1}`))
	default:
		fail("UnknownOperationException")
	}
}

func newSFN(t *testing.T) (*engine.StepFunctions, *fakeSFN) {
	f := &fakeSFN{t: t, execs: map[string]string{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	env := awsenv.FromEnv(func(k string) string {
		return map[string]string{"AWS_REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "s", "AWS_ENDPOINT_URL_SFN": srv.URL}[k]
	})
	return engine.NewStepFunctions(env, machine), f
}

// Start is idempotent by execution name; Stop of an execution that does
// not exist is no error; other failures are.
func TestStepFunctionsStartStop(t *testing.T) {
	sf, f := newSFN(t)
	ctx := context.Background()
	arn, err := sf.Start(ctx, "acme.job-1", []byte(`{"job_id":"acme.job-1"}`))
	if err != nil || arn != "arn:aws:states:eu-west-1:000000000000:execution:research:acme.job-1" {
		t.Fatalf("start = %q, %v", arn, err)
	}
	if f.execs["acme.job-1"] != `{"job_id":"acme.job-1"}` {
		t.Fatalf("input = %q", f.execs["acme.job-1"])
	}
	again, err := sf.Start(ctx, "acme.job-1", []byte(`{}`))
	if err != nil || again != arn {
		t.Fatalf("second start = %q, %v; want the first execution's ARN", again, err)
	}
	if err := sf.Stop(ctx, "acme.job-1", "cancelled by the reaper"); err != nil {
		t.Fatal(err)
	}
	if len(f.stops) != 1 || f.stops[0] != arn+" cancelled by the reaper" {
		t.Fatalf("stops = %v", f.stops)
	}
	if err := sf.Stop(ctx, "never-started", "x"); err != nil {
		t.Fatalf("stopping a missing execution: %v", err)
	}
	other := *sf
	other.StateMachineARN = "arn:aws:states:eu-west-1:000000000000:stateMachine:gone"
	if _, err := other.Start(ctx, "acme.job-2", nil); err == nil || !strings.Contains(err.Error(), "StateMachineDoesNotExist") {
		t.Fatalf("start on a missing machine: %v", err)
	}
}
