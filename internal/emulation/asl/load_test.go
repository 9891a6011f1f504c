package asl

import (
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestLoadDeepResearchDefinition(t *testing.T) {
	def, err := os.ReadFile("../../../statemachine/deep-research.asl.json")
	if err != nil {
		t.Fatalf("the repository's state machine: %v", err)
	}
	subs := map[string]string{}
	for _, m := range placeholderRE.FindAllStringSubmatch(string(def), -1) {
		subs[m[2]] = "arn:aws:lambda:us-east-1:123456789012:function:" + strings.TrimSuffix(m[2], "FunctionArn")
	}
	if len(subs) == 0 {
		t.Fatal("the definition has no ${...} placeholders; the test expects the template's DefinitionSubstitutions")
	}
	if _, err := Load(def, LoadOptions{Substitutions: subs}); err != nil {
		t.Fatalf("Load: %v", err)
	}
}

var defSubstitution = `{
  "StartAt": "Call",
  "States": {
    "Call": {"Type": "Task", "Resource": "${FnArn}", "Parameters": {"literal": "${!NotAPlaceholder}"}, "End": true}
  }
}`

func TestLoadSubstitutions(t *testing.T) {
	m, err := Load([]byte(defSubstitution), LoadOptions{Substitutions: map[string]string{"FnArn": fnA}})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	var rec recorder
	res, x, _ := runMachine(t, m, `{}`, handlers{fnA: rec.wrap(echo)})
	wantSucceeded(t, res, x, `{"literal":"${NotAPlaceholder}"}`)

	_, err = Load([]byte(defSubstitution), LoadOptions{Substitutions: map[string]string{"Other": fnA}})
	var de *DefinitionError
	if !errors.As(err, &de) || !strings.Contains(de.Reason, "${FnArn}") {
		t.Fatalf("missing substitution: got %v, want an error naming ${FnArn}", err)
	}
}

var (
	defJSONataTop = asl("jsonata-top", `{
  "QueryLanguage": "JSONata",
  "StartAt": "P",
  "States": {"P": {"Type": "Pass", "Output": "{% $states.input %}", "End": true}}
}`)
	defJSONataState = asl("jsonata-state", `{
  "StartAt": "P",
  "States": {"P": {"Type": "Pass", "QueryLanguage": "JSONata", "Output": {"a": "{% 1 %}"}, "End": true}}
}`)
	defDistributedMap = asl("distributed-map", `{
  "StartAt": "M",
  "States": {"M": {"Type": "Map", "ItemProcessor": {
    "ProcessorConfig": {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"},
    "StartAt": "I", "States": {"I": {"Type": "Pass", "End": true}}}, "End": true}}
}`)
	defItemReader = asl("item-reader", `{
  "StartAt": "M",
  "States": {"M": {"Type": "Map",
    "ItemReader": {"Resource": "arn:aws:states:::s3:getObject", "Parameters": {"Bucket": "b", "Key": "k"}},
    "ItemProcessor": {"StartAt": "I", "States": {"I": {"Type": "Pass", "End": true}}}, "End": true}}
}`)
	defResultWriter = asl("result-writer", `{
  "StartAt": "M",
  "States": {"M": {"Type": "Map",
    "ResultWriter": {"Resource": "arn:aws:states:::s3:putObject", "Parameters": {"Bucket": "b", "Prefix": "p"}},
    "ItemProcessor": {"StartAt": "I", "States": {"I": {"Type": "Pass", "End": true}}}, "End": true}}
}`)
	defDynamoDB = asl("dynamodb-integration", `{
  "StartAt": "Put",
  "States": {"Put": {"Type": "Task", "Resource": "arn:aws:states:::dynamodb:putItem",
    "Parameters": {"TableName": "t", "Item": {"pk": {"S": "x"}}}, "End": true}}
}`)
	defCallback = asl("callback", `{
  "StartAt": "Wait",
  "States": {"Wait": {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke.waitForTaskToken",
    "Parameters": {"FunctionName": "f", "Payload": {"token.$": "$$.Task.Token"}}, "End": true}}
}`)
	defActivity = asl("activity", `{
  "StartAt": "Act",
  "States": {"Act": {"Type": "Task", "Resource": "arn:aws:states:us-east-1:123456789012:activity:work", "End": true}}
}`)
	defCredentials = asl("credentials", `{
  "StartAt": "T",
  "States": {"T": {"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:123456789012:function:a",
    "Credentials": {"RoleArn": "arn:aws:iam::123456789012:role/r"}, "End": true}}
}`)
	defAssign = asl("assign", `{
  "StartAt": "P",
  "States": {"P": {"Type": "Pass", "Assign": {"x": 1}, "End": true}}
}`)
	defHeartbeat = asl("heartbeat", `{
  "StartAt": "T",
  "States": {"T": {"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:123456789012:function:a",
    "TimeoutSeconds": 60, "HeartbeatSeconds": 10, "End": true}}
}`)
	defInvokeNoPayload = asl("invoke-without-payload", `{
  "StartAt": "T",
  "States": {"T": {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke",
    "Parameters": {"FunctionName": "f"}, "End": true}}
}`)
	defInvokeAsync = asl("invoke-async", `{
  "StartAt": "T",
  "States": {"T": {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke",
    "Parameters": {"FunctionName": "f", "Payload": {}, "InvocationType": "Event"}, "End": true}}
}`)
)

func TestLoadRefusesWhatIsNotImplemented(t *testing.T) {
	cases := []struct {
		name, def, state, field string
	}{
		{"JSONata at the top level", defJSONataTop, "", "QueryLanguage"},
		{"JSONata in a state", defJSONataState, "P", "QueryLanguage"},
		{"Distributed Map", defDistributedMap, "M", "ItemProcessor.ProcessorConfig.Mode"},
		{"ItemReader", defItemReader, "M", "ItemReader"},
		{"ResultWriter", defResultWriter, "M", "ResultWriter"},
		{"DynamoDB integration", defDynamoDB, "Put", "Resource"},
		{"callback", defCallback, "Wait", "Resource"},
		{"activity", defActivity, "Act", "Resource"},
		{"Credentials", defCredentials, "T", "Credentials"},
		{"Assign", defAssign, "P", "Assign"},
		{"HeartbeatSeconds", defHeartbeat, "T", "HeartbeatSeconds"},
		{"lambda:invoke without Payload", defInvokeNoPayload, "T", "Parameters"},
		{"asynchronous lambda:invoke", defInvokeAsync, "T", "Parameters.InvocationType"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load([]byte(c.def), LoadOptions{})
			if err == nil {
				t.Fatal("Load accepted it")
			}
			if !slices.ContainsFunc(definitionErrors(err), func(de *DefinitionError) bool {
				return de.Unsupported && de.State == c.state && de.Field == c.field
			}) {
				t.Fatalf("got %v, want an unsupported-feature error for state %q field %q", err, c.state, c.field)
			}
		})
	}
}

func definitionErrors(err error) []*DefinitionError {
	var out []*DefinitionError
	var walk func(error)
	walk = func(e error) {
		if de, ok := e.(*DefinitionError); ok {
			out = append(out, de)
		}
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, c := range j.Unwrap() {
				walk(c)
			}
		}
	}
	walk(err)
	return out
}

func TestLoadRejectsInvalidDefinitions(t *testing.T) {
	cases := []struct {
		name, def, want string
	}{
		{"not JSON", `{"StartAt":`, "not JSON"},
		{"missing StartAt", `{"States":{"A":{"Type":"Succeed"}}}`, "StartAt"},
		{"unknown StartAt", `{"StartAt":"B","States":{"A":{"Type":"Succeed"}}}`, `names "B"`},
		{"missing transition target", `{"StartAt":"A","States":{"A":{"Type":"Pass","Next":"Nowhere"}}}`, `"Nowhere"`},
		{"unreachable state", `{"StartAt":"A","States":{"A":{"Type":"Succeed"},"B":{"Type":"Succeed"}}}`, "cannot be reached"},
		{"Next and End", `{"StartAt":"A","States":{"A":{"Type":"Pass","Next":"B","End":true},"B":{"Type":"Succeed"}}}`, "not both"},
		{"neither Next nor End", `{"StartAt":"A","States":{"A":{"Type":"Pass"}}}`, "needs Next or End"},
		{"unknown field", `{"StartAt":"A","States":{"A":{"Type":"Pass","Bogus":1,"End":true}}}`, "Bogus"},
		{"unknown type", `{"StartAt":"A","States":{"A":{"Type":"Sleep","End":true}}}`, "Type"},
		{"States.ALL not alone", `{"StartAt":"A","States":{"A":{"Type":"Task","Resource":"` + fnA + `","Catch":[{"ErrorEquals":["States.ALL","X"],"Next":"B"}],"End":true},"B":{"Type":"Succeed"}}}`, "alone"},
		{"States.ALL not last", `{"StartAt":"A","States":{"A":{"Type":"Task","Resource":"` + fnA + `","Retry":[{"ErrorEquals":["States.ALL"]},{"ErrorEquals":["X"]}],"End":true}}}`, "last"},
		{"BackoffRate below 1", `{"StartAt":"A","States":{"A":{"Type":"Task","Resource":"` + fnA + `","Retry":[{"ErrorEquals":["X"],"BackoffRate":0.5}],"End":true}}}`, "BackoffRate"},
		{"JitterStrategy", `{"StartAt":"A","States":{"A":{"Type":"Task","Resource":"` + fnA + `","Retry":[{"ErrorEquals":["X"],"JitterStrategy":"HALF"}],"End":true}}}`, "JitterStrategy"},
		{"choice rule with two operators", `{"StartAt":"C","States":{"C":{"Type":"Choice","Choices":[{"Variable":"$.a","StringEquals":"x","NumericEquals":1,"Next":"D"}],"Default":"D"},"D":{"Type":"Succeed"}}}`, "exactly one operator"},
		{"nested choice rule with Next", `{"StartAt":"C","States":{"C":{"Type":"Choice","Choices":[{"Not":{"Variable":"$.a","IsNull":true,"Next":"D"},"Next":"D"}]},"D":{"Type":"Succeed"}}}`, "must not have Next"},
		{"wrong operand type", `{"StartAt":"C","States":{"C":{"Type":"Choice","Choices":[{"Variable":"$.a","NumericEquals":"1","Next":"D"}]},"D":{"Type":"Succeed"}}}`, "needs a number"},
		{"bad timestamp operand", `{"StartAt":"C","States":{"C":{"Type":"Choice","Choices":[{"Variable":"$.a","TimestampEquals":"2024-01-01","Next":"D"}]},"D":{"Type":"Succeed"}}}`, "RFC 3339"},
		{"bad path", `{"StartAt":"A","States":{"A":{"Type":"Pass","InputPath":"a.b","End":true}}}`, "must start with '$'"},
		{"ResultPath not a reference path", `{"StartAt":"A","States":{"A":{"Type":"Pass","ResultPath":"$.a[*]","End":true}}}`, "reference path"},
		{"unknown intrinsic", `{"StartAt":"A","States":{"A":{"Type":"Pass","Parameters":{"x.$":"States.Nope(1)"},"End":true}}}`, "unknown function"},
		{"intrinsic arity", `{"StartAt":"A","States":{"A":{"Type":"Pass","Parameters":{"x.$":"States.MathAdd(1)"},"End":true}}}`, "takes 2 arguments"},
		{"format placeholders", `{"StartAt":"A","States":{"A":{"Type":"Pass","Parameters":{"x.$":"States.Format('{} {}', 1)"},"End":true}}}`, "placeholders"},
		{"open escape", `{"StartAt":"A","States":{"A":{"Type":"Pass","Parameters":{"x.$":"States.Format('a\\b')"},"End":true}}}`, "open escape"},
		{"Wait with two durations", `{"StartAt":"W","States":{"W":{"Type":"Wait","Seconds":1,"SecondsPath":"$.s","End":true}}}`, "exactly one"},
		{"duplicate state names", `{"StartAt":"P","States":{"P":{"Type":"Parallel","Branches":[{"StartAt":"P","States":{"P":{"Type":"Succeed"}}}],"End":true}}}`, "more than once"},
		{"Map without processor", `{"StartAt":"M","States":{"M":{"Type":"Map","End":true}}}`, "ItemProcessor"},
		{"lambda:invoke without FunctionName", `{"StartAt":"T","States":{"T":{"Type":"Task","Resource":"arn:aws:states:::lambda:invoke","Parameters":{"Payload":{}},"End":true}}}`, "FunctionName"},
		{"template field not a string", `{"StartAt":"A","States":{"A":{"Type":"Pass","Parameters":{"x.$":1},"End":true}}}`, "must be a string"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load([]byte(c.def), LoadOptions{})
			if err == nil {
				t.Fatal("Load accepted it")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %q, want it to mention %q", err, c.want)
			}
			if des := definitionErrors(err); len(des) == 0 || slices.ContainsFunc(des, func(de *DefinitionError) bool { return de.Unsupported }) {
				t.Fatalf("got %#v, want only *DefinitionError for invalid ASL", err)
			}
		})
	}
}

func TestLoadReportsEveryProblemAtOnce(t *testing.T) {
	def := `{"StartAt":"A","States":{
	  "A":{"Type":"Pass","Bogus":1,"Next":"Nowhere"},
	  "B":{"Type":"Task","Resource":"arn:aws:states:::sqs:sendMessage","End":true}}}`
	_, err := Load([]byte(def), LoadOptions{})
	des := definitionErrors(err)
	var got []string
	for _, de := range des {
		got = append(got, de.Error())
	}
	for _, want := range []string{`state "A": Bogus`, `"Nowhere"`, `state "B": Resource: not supported`, `state "B": the state cannot be reached`} {
		if !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, want) }) {
			t.Errorf("missing %q in %q", want, got)
		}
	}
}

func TestLoadStateMachineIdentity(t *testing.T) {
	if _, err := Load([]byte(`{"StartAt":"A","States":{"A":{"Type":"Succeed"}}}`), LoadOptions{ARN: "not-an-arn"}); err == nil {
		t.Fatal("Load accepted an invalid ARN")
	}
	m := mustLoad(t, `{"StartAt":"A","States":{"A":{"Type":"Succeed"}}}`,
		LoadOptions{Name: "jobs", ARN: "arn:aws:states:eu-west-1:123456789012:stateMachine:jobs"})
	if m.Name() != "jobs" || m.ARN() != "arn:aws:states:eu-west-1:123456789012:stateMachine:jobs" || m.region != "eu-west-1" {
		t.Fatalf("got %s %s %s", m.Name(), m.ARN(), m.region)
	}
}

// TestDefinitionsPassASLValidator checks that the definitions these tests
// treat as valid (including the ones the engine refuses as unimplemented)
// are valid Amazon States Language as asl-validator reads it.
func TestDefinitionsPassASLValidator(t *testing.T) {
	t.Parallel() // node compiles the schema per definition: seconds, not milliseconds
	bin, err := filepath.Abs("../../../node_modules/.bin/asl-validator")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		missingDependency(t, "asl-validator (npm install at the repository root): "+err.Error())
	}
	if _, err := exec.LookPath("node"); err != nil {
		missingDependency(t, "node: "+err.Error())
	}
	dir := t.TempDir()
	var args []string
	for _, name := range slices.Sorted(maps.Keys(aslDefs)) {
		p := filepath.Join(dir, name+".asl.json")
		if err := os.WriteFile(p, []byte(aslDefs[name]), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--json-path", p)
	}
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("asl-validator: %v\n%s", err, out)
	}
}

func missingDependency(t *testing.T, what string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("missing dependency: %s", what)
	}
	t.Skipf("missing dependency: %s", what)
}
