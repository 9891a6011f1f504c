package asl

import (
	"strings"
	"testing"
)

var defPaths = asl("paths", `{
  "StartAt": "Select",
  "States": {
    "Select": {"Type": "Pass", "Parameters": {
        "ids.$": "$.items[*].id",
        "big.$": "$.items[?(@.size > 10)].id",
        "last.$": "$.items[-1:]",
        "dashed.$": "$.with-dash",
        "quoted.$": "$['with space']",
        "nested.$": "$.items[1]",
        "all.$": "$..id",
        "nothing.$": "$.items[*].absent",
        "null.$": "$.nullable"},
      "ResultPath": "$.selected", "Next": "IntoArray"},
    "IntoArray": {"Type": "Pass", "Result": "replaced", "ResultPath": "$.items[0].id", "Next": "EmptyInput"},
    "EmptyInput": {"Type": "Pass", "InputPath": null, "ResultPath": "$.fromEmpty", "Next": "Narrow"},
    "Narrow": {"Type": "Pass", "InputPath": "$.selected", "OutputPath": "$.ids", "Next": "Nothing"},
    "Nothing": {"Type": "Pass", "OutputPath": null, "End": true}
  }
}`)

func TestPaths(t *testing.T) {
	input := `{"items": [{"id": "a", "size": 5}, {"id": "b", "size": 20}, {"id": "c", "size": 30}],
	  "with-dash": 1, "with space": 2, "nullable": null}`
	res, x, _ := run(t, defPaths, input, nil)
	wantSucceeded(t, res, x, `{}`)
	exited := eventsOf(x, EventPassStateExited)
	checks := map[int]string{
		0: `{"items": [{"id": "a", "size": 5}, {"id": "b", "size": 20}, {"id": "c", "size": 30}],
		     "with-dash": 1, "with space": 2, "nullable": null,
		     "selected": {"ids": ["a", "b", "c"], "big": ["b", "c"], "last": [{"id": "c", "size": 30}], "dashed": 1, "quoted": 2,
		                  "nested": {"id": "b", "size": 20}, "all": ["a", "b", "c"], "nothing": [], "null": null}}`,
		3: `["a", "b", "c"]`,
	}
	for i, want := range checks {
		if got := details(t, exited[i])["output"].(string); !sameJSON(t, got, want) {
			t.Errorf("%s output %s, want %s", exited[i].StateName, got, want)
		}
	}
	if got := details(t, exited[1])["output"].(string); !strings.Contains(got, `{"id":"replaced","size":5}`) {
		t.Errorf("IntoArray output %s", got)
	}
	if got := details(t, exited[2])["output"].(string); !strings.Contains(got, `"fromEmpty":{}`) {
		t.Errorf("EmptyInput output %s", got)
	}
}

var defMissingPaths = asl("missing-paths", `{
  "StartAt": "Route",
  "States": {
    "Route": {"Type": "Choice", "Choices": [
      {"Variable": "$.case", "StringEquals": "input", "Next": "In"},
      {"Variable": "$.case", "StringEquals": "output", "Next": "Out"}
    ], "Default": "Context"},
    "In": {"Type": "Pass", "InputPath": "$.no.such", "End": true},
    "Out": {"Type": "Pass", "OutputPath": "$.none", "End": true},
    "Context": {"Type": "Pass", "Parameters": {"v.$": "$$.Execution.Input.absent"}, "End": true}
  }
}`)

func TestMissingPathsAreRuntimeErrors(t *testing.T) {
	for input, cause := range map[string]string{
		`{"case": "input"}`:   "An error occurred while executing the state 'In' (entered at the event id #4). Invalid path '$.no.such' : No results for path: $['no']['such']",
		`{"case": "output"}`:  "Invalid path '$.none' : No results for path: $['none']",
		`{"case": "context"}`: "The JSONPath '$$.Execution.Input.absent' specified for the field 'v.$' could not be found in the input",
	} {
		res, x, _ := run(t, defMissingPaths, input, nil)
		wantFailed(t, res, x, ErrorRuntime)
		if !strings.Contains(res.Cause, cause) {
			t.Errorf("input %s: cause %q, want %q", input, res.Cause, cause)
		}
	}
}
