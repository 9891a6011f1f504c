//go:build sandstep_faults

package localstack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/lambda/messages"

	"github.com/sandstep/sandstep/internal/emulation/asl"
)

// A build with the sandstep_faults tag (never a release) lets a test that
// runs `sandstep serve` as a child process break the phases from outside:
// before and after every Task invocation the server asks the controller at
// $SANDSTEP_FAULTS_URL what to do. This is Options.WrapInvoker for a
// server in another process.

// FaultsURLEnv names the controller's base URL.
const FaultsURLEnv = "SANDSTEP_FAULTS_URL"

// FaultQuestion is what the server asks, as JSON, at POST <url>/invoke.
type FaultQuestion struct {
	// Function is the logical id (DiscoverFunction...).
	Function string `json:"function"`
	JobID    string `json:"job_id"`
	// When is "before" the handler runs or "after" it returned.
	When string `json:"when"`
	// Error is the handler's error type, after a failed call.
	Error string `json:"error,omitempty"`
}

// FaultAnswer is what the controller decides.
type FaultAnswer struct {
	// Action: "go" (carry on), "fail" (the invocation fails with
	// ErrorType and Message; after the handler ran, its result is lost),
	// "hold" (the invocation never returns until its context ends, as a
	// process that hangs or is about to be killed).
	Action    string `json:"action"`
	ErrorType string `json:"error_type,omitempty"`
	Message   string `json:"message,omitempty"`
}

func init() {
	url := os.Getenv(FaultsURLEnv)
	if url == "" {
		return
	}
	client := &http.Client{Timeout: 30 * time.Second}
	faultHook = func(inv asl.Invoker) asl.Invoker {
		return &faultInvoker{next: inv, url: strings.TrimSuffix(url, "/") + "/invoke", client: client}
	}
}

type faultInvoker struct {
	next   asl.Invoker
	url    string
	client *http.Client
}

func (f *faultInvoker) Invoke(ctx context.Context, arn string, payload []byte) ([]byte, error) {
	q := FaultQuestion{Function: arn[strings.LastIndexByte(arn, ':')+1:], JobID: jobOf(payload), When: "before"}
	if out, err, done := f.apply(ctx, q); done {
		return out, err
	}
	out, err := f.next.Invoke(ctx, arn, payload)
	q.When = "after"
	if err != nil {
		q.Error = fmt.Sprintf("%T", err)
		if e, ok := err.(messages.InvokeResponse_Error); ok {
			q.Error = e.Type
		}
	}
	if fout, ferr, done := f.apply(ctx, q); done {
		return fout, ferr
	}
	return out, err
}

// apply asks the controller; done means the invocation ends with out, err.
// A controller that does not answer changes nothing.
func (f *faultInvoker) apply(ctx context.Context, q FaultQuestion) ([]byte, error, bool) {
	body, _ := json.Marshal(q)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.url, bytes.NewReader(body))
	if err != nil {
		return nil, nil, false
	}
	resp, err := f.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err(), true
		}
		return nil, nil, false
	}
	defer resp.Body.Close()
	var a FaultAnswer
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&a) != nil {
		return nil, nil, false
	}
	switch a.Action {
	case "fail":
		return nil, messages.InvokeResponse_Error{Type: a.ErrorType, Message: a.Message}, true
	case "hold":
		<-ctx.Done()
		return nil, ctx.Err(), true
	}
	return nil, nil, false
}

// jobOf finds the job in a phase's input or a status change event.
func jobOf(payload []byte) string {
	var in struct {
		JobID  string `json:"job_id"`
		Detail struct {
			Name string `json:"name"`
		} `json:"detail"`
	}
	_ = json.Unmarshal(payload, &in)
	if in.JobID != "" {
		return in.JobID
	}
	return in.Detail.Name
}
