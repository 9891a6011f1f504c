package asl

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// intrinsicDefinition evaluates expr in a Pass state's Parameters.
func intrinsicDefinition(expr string) string {
	b, _ := json.Marshal(expr)
	return `{"StartAt": "F", "States": {"F": {"Type": "Pass", "Parameters": {"r.$": ` + string(b) + `}, "OutputPath": "$.r", "End": true}}}`
}

var intrinsicCases = []struct {
	expr, input, want string
}{
	{`States.Format('Hello, my name is {}.', $.name)`, `{"name": "Arnav"}`, `"Hello, my name is Arnav."`},
	{`States.Format($.template, $.name)`, `{"name": "Arnav", "template": "Hello, my name is {}."}`, `"Hello, my name is Arnav."`},
	{`States.Format('{} {} {} {}', 1, -2, true, null)`, `{}`, `"1 -2 true null"`},
	{`States.Format('{}', 2.5)`, `{}`, `"2.5"`},
	{`States.Format('braces \{\} quote \' {}', 'x')`, `{}`, `"braces {} quote ' x"`},
	{`States.Format('slash \\ {}', 'x')`, `{}`, `"slash \\ x"`},
	{`States.Format('{}', $.list)`, `{"list": ["a", 1]}`, `"[a, 1]"`},
	{`States.StringToJson($.s)`, `{"s": "{\"foo\": \"bar\"}"}`, `{"foo": "bar"}`},
	{`States.StringToJson($.s)`, `{"s": "  "}`, `null`},
	{`States.JsonToString($.o)`, `{"o": {"foo": "bar"}}`, `"{\"foo\":\"bar\"}"`},
	{`States.Array('Foo', 2022, $.someJson, null)`, `{"someJson": {"random": "abcdefg"}}`, `["Foo", 2022, {"random": "abcdefg"}, null]`},
	{`States.Array()`, `{}`, `[]`},
	{`States.ArrayPartition($.a, 4)`, `{"a": [1,2,3,4,5,6,7,8,9]}`, `[[1,2,3,4],[5,6,7,8],[9]]`},
	{`States.ArrayContains($.a, $.v)`, `{"a": [1, {"x": 2}, "s"], "v": {"x": 2}}`, `true`},
	{`States.ArrayContains($.a, 9)`, `{"a": [1, 2]}`, `false`},
	{`States.ArrayRange(1, 9, 2)`, `{}`, `[1, 3, 5, 7, 9]`},
	{`States.ArrayRange(5, 1, -2)`, `{}`, `[5, 3, 1]`},
	{`States.ArrayGetItem($.a, 1)`, `{"a": ["x", "y"]}`, `"y"`},
	{`States.ArrayLength($.a)`, `{"a": [1, 2, 3]}`, `3`},
	{`States.ArrayUnique($.a)`, `{"a": [1, 2, 2, "1", {"k": 1}, {"k": 1}]}`, `[1, 2, "1", {"k": 1}]`},
	{`States.Base64Encode($.s)`, `{"s": "Data to encode"}`, `"RGF0YSB0byBlbmNvZGU="`},
	{`States.Base64Decode('RGF0YSB0byBlbmNvZGU=')`, `{}`, `"Data to encode"`},
	{`States.Hash($.s, 'SHA-1')`, `{"s": "input data"}`, `"aaff4a450a104cd177d28d18d74485e8cae074b7"`},
	{`States.Hash('abc', 'SHA-256')`, `{}`, `"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"`},
	{`States.Hash('abc', 'MD5')`, `{}`, `"900150983cd24fb0d6963f7d28e17f72"`},
	{`States.JsonMerge($.a, $.b, false)`, `{"a": {"x": 1, "n": {"p": 1}}, "b": {"y": 2, "n": {"q": 2}}}`, `{"x": 1, "y": 2, "n": {"q": 2}}`},
	{`States.MathRandom(7, 8)`, `{}`, `7`},
	{`States.MathAdd($.n, -1)`, `{"n": 111}`, `110`},
	{`States.StringSplit($.s, '.+,=')`, `{"s": "This.is+a,test=string"}`, `["This", "is", "a", "test", "string"]`},
	{`States.StringSplit('a,,b', ',')`, `{}`, `["a", "b"]`},
	{`States.ArrayLength(States.StringSplit($.s, ' '))`, `{"s": "one two three"}`, `3`},
	{`States.Format('{}', $$.Execution.Name)`, `{}`, `"exec-1"`},
	{`States.ArrayLength($.items[*].id)`, `{"items": [{"id": 1}, {"id": 2}, {"name": 3}]}`, `2`},
}

// notValidated are cases the developer guide allows but asl-validator's
// intrinsic grammar (asl-path-validator 0.16) does not: it reads only integer
// literals and takes "\\" for an open escape. They stay out of
// TestDefinitionsPassASLValidator.
var notValidated = map[string]bool{
	`States.Format('{}', 2.5)`:          true,
	`States.Format('slash \\ {}', 'x')`: true,
}

var intrinsicFailures = []struct {
	expr, input, cause string
}{
	{`States.StringToJson($.s)`, `{"s": "{nope"}`, "not JSON text"},
	{`States.ArrayGetItem($.a, 5)`, `{"a": [1]}`, "out of bounds"},
	{`States.ArrayPartition($.a, 0)`, `{"a": [1]}`, "must be positive"},
	{`States.ArrayRange(1, 2000, 1)`, `{}`, "more than 1000"},
	{`States.MathAdd(1.5, 1)`, `{}`, "must be an integer"},
	{`States.Hash('x', 'SHA-3')`, `{}`, "unknown algorithm"},
	{`States.JsonMerge($.a, $.a, true)`, `{"a": {}}`, "shallow"},
	{`States.Base64Decode('%%%')`, `{}`, "not base64"},
	{`States.Format('{}', $.missing)`, `{}`, "The JsonPath argument for the field '$.missing' could not be found in the input '{}'"},
}

var _ = func() bool {
	seen := map[string]bool{}
	for _, c := range intrinsicCases {
		if !seen[c.expr] && !notValidated[c.expr] {
			seen[c.expr] = true
			asl("intrinsic "+c.expr, intrinsicDefinition(c.expr))
		}
	}
	return true
}()

func TestIntrinsicFunctions(t *testing.T) {
	for _, c := range intrinsicCases {
		t.Run(c.expr, func(t *testing.T) {
			res, x, _ := run(t, intrinsicDefinition(c.expr), c.input, nil)
			wantSucceeded(t, res, x, c.want)
		})
	}
}

func TestIntrinsicFailuresAreRuntimeErrors(t *testing.T) {
	for _, c := range intrinsicFailures {
		t.Run(c.expr, func(t *testing.T) {
			res, x, _ := run(t, intrinsicDefinition(c.expr), c.input, nil)
			wantFailed(t, res, x, ErrorRuntime)
			if !strings.Contains(res.Cause, c.cause) {
				t.Fatalf("cause %q, want %q", res.Cause, c.cause)
			}
		})
	}
}

func TestIntrinsicUUIDAndRandom(t *testing.T) {
	res, x, _ := run(t, intrinsicDefinition(`States.Array(States.UUID(), States.UUID(), States.MathRandom(1, 1000, 42), States.MathRandom(1, 1000, 42))`), `{}`, nil)
	if res.Status != StatusSucceeded {
		t.Fatalf("history:%s", historyString(x))
	}
	var out []any
	if err := json.Unmarshal(res.Output, &out); err != nil {
		t.Fatal(err)
	}
	v4 := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	if !v4.MatchString(out[0].(string)) || out[0] == out[1] {
		t.Fatalf("UUIDs %v %v", out[0], out[1])
	}
	if out[2] != out[3] || out[2].(float64) < 1 || out[2].(float64) >= 1000 {
		t.Fatalf("seeded MathRandom gave %v and %v", out[2], out[3])
	}
}
