package asl

import (
	"strings"
	"testing"
)

// choiceCase is one rule and the branch each input should take: "Yes" when
// the rule matches, "No" for the Default, or an error name.
type choiceCase struct {
	name   string
	rule   string
	inputs map[string]string
}

var choiceCases = []choiceCase{
	{"StringEquals", `{"Variable": "$.s", "StringEquals": "abc"}`, map[string]string{
		`{"s": "abc"}`: "Yes", `{"s": "abd"}`: "No", `{"s": 1}`: "No"}},
	{"StringLessThan", `{"Variable": "$.s", "StringLessThan": "b"}`, map[string]string{
		`{"s": "a"}`: "Yes", `{"s": "b"}`: "No", `{"s": "c"}`: "No"}},
	{"StringGreaterThan", `{"Variable": "$.s", "StringGreaterThan": "b"}`, map[string]string{
		`{"s": "c"}`: "Yes", `{"s": "b"}`: "No"}},
	{"StringLessThanEquals", `{"Variable": "$.s", "StringLessThanEquals": "b"}`, map[string]string{
		`{"s": "b"}`: "Yes", `{"s": "ba"}`: "No"}},
	{"StringGreaterThanEquals", `{"Variable": "$.s", "StringGreaterThanEquals": "b"}`, map[string]string{
		`{"s": "b"}`: "Yes", `{"s": "a"}`: "No"}},
	{"StringEqualsPath", `{"Variable": "$.s", "StringEqualsPath": "$.t"}`, map[string]string{
		`{"s": "x", "t": "x"}`: "Yes", `{"s": "x", "t": "y"}`: "No", `{"s": "x"}`: ErrorRuntime}},
	{"StringLessThanPath", `{"Variable": "$.s", "StringLessThanPath": "$.t"}`, map[string]string{
		`{"s": "a", "t": "b"}`: "Yes", `{"s": "b", "t": "a"}`: "No"}},
	{"StringGreaterThanEqualsPath", `{"Variable": "$.s", "StringGreaterThanEqualsPath": "$.t"}`, map[string]string{
		`{"s": "b", "t": "b"}`: "Yes", `{"s": "a", "t": "b"}`: "No"}},
	{"StringMatches", `{"Variable": "$.s", "StringMatches": "log-*.txt"}`, map[string]string{
		`{"s": "log-2024.txt"}`: "Yes", `{"s": "log-.txt"}`: "Yes", `{"s": "log.txt"}`: "No", `{"s": "log-1.txt.gz"}`: "No"}},
	{"StringMatches escaped star", `{"Variable": "$.s", "StringMatches": "a\\*b*"}`, map[string]string{
		`{"s": "a*bc"}`: "Yes", `{"s": "axbc"}`: "No"}},
	{"StringMatches escaped backslash", `{"Variable": "$.s", "StringMatches": "c:\\\\*"}`, map[string]string{
		`{"s": "c:\\dir"}`: "Yes", `{"s": "c:/dir"}`: "No"}},
	{"StringMatches several stars", `{"Variable": "$.s", "StringMatches": "*.a.*.z"}`, map[string]string{
		`{"s": "x.a.b.c.z"}`: "Yes", `{"s": "x.a.z"}`: "No"}},
	{"NumericEquals", `{"Variable": "$.n", "NumericEquals": 1}`, map[string]string{
		`{"n": 1}`: "Yes", `{"n": 1.0}`: "Yes", `{"n": "1"}`: "No", `{"n": 2}`: "No"}},
	{"NumericLessThan", `{"Variable": "$.n", "NumericLessThan": 2.5}`, map[string]string{
		`{"n": 2}`: "Yes", `{"n": 2.5}`: "No"}},
	{"NumericGreaterThan", `{"Variable": "$.n", "NumericGreaterThan": 2.5}`, map[string]string{
		`{"n": 3}`: "Yes", `{"n": 2.5}`: "No"}},
	{"NumericLessThanEquals", `{"Variable": "$.n", "NumericLessThanEquals": 2}`, map[string]string{
		`{"n": 2}`: "Yes", `{"n": 2.01}`: "No"}},
	{"NumericGreaterThanEquals", `{"Variable": "$.n", "NumericGreaterThanEquals": 2}`, map[string]string{
		`{"n": 2}`: "Yes", `{"n": 1.5}`: "No", `{"n": true}`: "No"}},
	{"NumericEqualsPath", `{"Variable": "$.n", "NumericEqualsPath": "$.m"}`, map[string]string{
		`{"n": 3, "m": 3.0}`: "Yes", `{"n": 3, "m": 4}`: "No"}},
	{"NumericGreaterThanPath", `{"Variable": "$.n", "NumericGreaterThanPath": "$.m"}`, map[string]string{
		`{"n": 9007199254740993, "m": 9007199254740992}`: "Yes", `{"n": 1, "m": 1}`: "No"}},
	{"NumericLessThanEqualsPath", `{"Variable": "$.n", "NumericLessThanEqualsPath": "$.m"}`, map[string]string{
		`{"n": 1, "m": 1}`: "Yes", `{"n": 2, "m": 1}`: "No"}},
	{"BooleanEquals", `{"Variable": "$.b", "BooleanEquals": true}`, map[string]string{
		`{"b": true}`: "Yes", `{"b": false}`: "No", `{"b": "true"}`: "No", `{}`: ErrorRuntime}},
	{"BooleanEqualsPath", `{"Variable": "$.b", "BooleanEqualsPath": "$.c"}`, map[string]string{
		`{"b": false, "c": false}`: "Yes", `{"b": false, "c": true}`: "No"}},
	{"TimestampEquals", `{"Variable": "$.t", "TimestampEquals": "2024-03-01T12:00:00Z"}`, map[string]string{
		`{"t": "2024-03-01T13:00:00+01:00"}`: "Yes", `{"t": "2024-03-01T12:00:00.001Z"}`: "No", `{"t": "yesterday"}`: "No"}},
	{"TimestampLessThan", `{"Variable": "$.t", "TimestampLessThan": "2024-03-01T12:00:00Z"}`, map[string]string{
		`{"t": "2024-03-01T11:59:59.999Z"}`: "Yes", `{"t": "2024-03-01T12:00:00Z"}`: "No"}},
	{"TimestampGreaterThan", `{"Variable": "$.t", "TimestampGreaterThan": "2024-03-01T12:00:00Z"}`, map[string]string{
		`{"t": "2024-03-01T12:00:01Z"}`: "Yes", `{"t": "2024-03-01T11:00:00Z"}`: "No"}},
	{"TimestampLessThanEquals", `{"Variable": "$.t", "TimestampLessThanEquals": "2024-03-01T12:00:00Z"}`, map[string]string{
		`{"t": "2024-03-01T12:00:00Z"}`: "Yes", `{"t": "2024-03-01T12:00:01Z"}`: "No"}},
	{"TimestampGreaterThanEquals", `{"Variable": "$.t", "TimestampGreaterThanEquals": "2024-03-01T12:00:00Z"}`, map[string]string{
		`{"t": "2024-03-01T12:00:00Z"}`: "Yes", `{"t": "2024-03-01T11:59:59Z"}`: "No"}},
	{"TimestampGreaterThanPath", `{"Variable": "$.t", "TimestampGreaterThanPath": "$.u"}`, map[string]string{
		`{"t": "2024-03-02T00:00:00Z", "u": "2024-03-01T00:00:00Z"}`: "Yes", `{"t": "2024-03-02T00:00:00Z", "u": "soon"}`: "No"}},
	{"TimestampEqualsPath", `{"Variable": "$.t", "TimestampEqualsPath": "$.u"}`, map[string]string{
		`{"t": "2024-03-02T00:00:00Z", "u": "2024-03-02T01:00:00+01:00"}`: "Yes"}},
	{"IsNull", `{"Variable": "$.v", "IsNull": true}`, map[string]string{
		`{"v": null}`: "Yes", `{"v": 0}`: "No", `{}`: ErrorRuntime}},
	{"IsNull false", `{"Variable": "$.v", "IsNull": false}`, map[string]string{
		`{"v": 0}`: "Yes", `{"v": null}`: "No"}},
	{"IsPresent", `{"Variable": "$.v", "IsPresent": true}`, map[string]string{
		`{"v": null}`: "Yes", `{}`: "No"}},
	{"IsPresent false", `{"Variable": "$.a.b[2]", "IsPresent": false}`, map[string]string{
		`{"a": {"b": [1, 2]}}`: "Yes", `{"a": {"b": [1, 2, 3]}}`: "No"}},
	{"IsNumeric", `{"Variable": "$.v", "IsNumeric": true}`, map[string]string{
		`{"v": 1.5}`: "Yes", `{"v": "1.5"}`: "No"}},
	{"IsString", `{"Variable": "$.v", "IsString": true}`, map[string]string{
		`{"v": "x"}`: "Yes", `{"v": ["x"]}`: "No"}},
	{"IsBoolean", `{"Variable": "$.v", "IsBoolean": true}`, map[string]string{
		`{"v": false}`: "Yes", `{"v": "false"}`: "No"}},
	{"IsTimestamp", `{"Variable": "$.v", "IsTimestamp": true}`, map[string]string{
		`{"v": "2024-03-01T12:00:00Z"}`: "Yes", `{"v": "2024-03-01"}`: "No", `{"v": 5}`: "No"}},
	{"And", `{"And": [{"Variable": "$.s", "StringEquals": "a"}, {"Variable": "$.n", "NumericGreaterThan": 1}]}`, map[string]string{
		`{"s": "a", "n": 2}`: "Yes", `{"s": "a", "n": 1}`: "No", `{"s": "b"}`: "No"}},
	{"Or", `{"Or": [{"Variable": "$.s", "StringEquals": "a"}, {"Variable": "$.n", "NumericGreaterThan": 1}]}`, map[string]string{
		`{"s": "b", "n": 2}`: "Yes", `{"s": "a"}`: "Yes", `{"s": "b", "n": 0}`: "No"}},
	{"Not", `{"Not": {"Variable": "$.x", "IsPresent": true}}`, map[string]string{
		`{}`: "Yes", `{"x": 1}`: "No"}},
	{"nested", `{"Or": [{"And": [{"Variable": "$.a", "BooleanEquals": true}, {"Not": {"Variable": "$.b", "IsNull": true}}]}, {"Variable": "$.c", "StringMatches": "go*"}]}`, map[string]string{
		`{"a": true, "b": 1, "c": "x"}`: "Yes", `{"a": true, "b": null, "c": "gopher"}`: "Yes", `{"a": false, "b": 1, "c": "x"}`: "No"}},
	{"context object", `{"Variable": "$$.Execution.Name", "StringEquals": "exec-1"}`, map[string]string{
		`{}`: "Yes"}},
}

// choiceDefinition wraps a rule in a machine whose output says which way it went.
func choiceDefinition(rule string) string {
	rule = strings.TrimSpace(rule)
	return `{"StartAt": "C", "States": {
  "C": {"Type": "Choice", "Choices": [` + rule[:len(rule)-1] + `, "Next": "Yes"}], "Default": "No"},
  "Yes": {"Type": "Pass", "Result": "Yes", "End": true},
  "No": {"Type": "Pass", "Result": "No", "End": true}}}`
}

var _ = func() bool {
	for _, c := range choiceCases {
		asl("choice "+c.name, choiceDefinition(c.rule))
	}
	return true
}()

func TestChoiceOperators(t *testing.T) {
	for _, c := range choiceCases {
		t.Run(c.name, func(t *testing.T) {
			m := mustLoad(t, choiceDefinition(c.rule))
			for input, want := range c.inputs {
				res, x, _ := runMachine(t, m, input, nil)
				if want == "Yes" || want == "No" {
					wantSucceeded(t, res, x, `"`+want+`"`)
				} else {
					wantFailed(t, res, x, want)
				}
			}
		})
	}
}

var defChoiceNoDefault = asl("choice-no-default", `{"StartAt": "C", "States": {
  "C": {"Type": "Choice", "InputPath": "$.in", "OutputPath": "$.keep",
        "Choices": [{"Variable": "$.n", "NumericEquals": 1, "Next": "Done"}]},
  "Done": {"Type": "Succeed"}}}`)

func TestChoiceWithoutMatchOrDefault(t *testing.T) {
	res, x, _ := run(t, defChoiceNoDefault, `{"in": {"n": 1, "keep": "k"}}`, nil)
	wantSucceeded(t, res, x, `"k"`)
	res, x, _ = run(t, defChoiceNoDefault, `{"in": {"n": 2}}`, nil)
	wantFailed(t, res, x, ErrorNoChoiceMatched)
}

func TestChoiceMissingVariableIsRuntimeError(t *testing.T) {
	res, x, _ := runMachine(t, mustLoad(t, choiceDefinition(`{"Variable": "$.s", "StringEquals": "a"}`)), `{}`, nil)
	wantFailed(t, res, x, ErrorRuntime)
	want := "An error occurred while executing the state 'C' (entered at the event id #2). Invalid path '$.s': The choice state's condition path references an invalid value."
	if res.Cause != want {
		t.Fatalf("cause %q, want %q", res.Cause, want)
	}
}
