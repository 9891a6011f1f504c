package samtemplate_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/sandstep/sandstep/internal/emulation/samtemplate"
)

func TestParseShortForms(t *testing.T) {
	src := `
AWSTemplateFormatVersion: 2010-09-09
Values:
  ref: !Ref Bucket
  refNumber: !Ref 0
  getAttString: !GetAtt Fn.Arn
  getAttDotted: !GetAtt Db.Endpoint.Address
  getAttList: !GetAtt [Fn, Arn]
  sub: !Sub "${AWS::Region}-x"
  subList: !Sub
    - "${Name}-${Other}"
    - Name: !Ref Bucket
      Other: literal
  join: !Join [",", [a, !Ref B]]
  if: !If [IsProd, 1, 2]
  select: !Select [0, !GetAZs ""]
  split: !Split ["|", "a|b"]
  findInMap: !FindInMap [Map, !Ref AWS::Region, Key]
  importValue: !ImportValue other-stack-export
  equals: !Equals [!Ref Stage, prod]
  and: !And [!Condition A, !Not [!Condition B]]
  or: !Or [!Condition A, !Condition B]
  base64: !Base64 text
  cidr: !Cidr [10.0.0.0/16, 4, 8]
  transform: !Transform {Name: AWS::Include, Parameters: {Location: s3://b/k}}
  anchored: &a {x: 1}
  aliased: *a
  plain: 3
`
	doc, err := samtemplate.Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "AWSTemplateFormatVersion": "2010-09-09",
  "Values": {
    "ref": {"Ref": "Bucket"},
    "refNumber": {"Ref": "0"},
    "getAttString": {"Fn::GetAtt": ["Fn", "Arn"]},
    "getAttDotted": {"Fn::GetAtt": ["Db", "Endpoint.Address"]},
    "getAttList": {"Fn::GetAtt": ["Fn", "Arn"]},
    "sub": {"Fn::Sub": "${AWS::Region}-x"},
    "subList": {"Fn::Sub": ["${Name}-${Other}", {"Name": {"Ref": "Bucket"}, "Other": "literal"}]},
    "join": {"Fn::Join": [",", ["a", {"Ref": "B"}]]},
    "if": {"Fn::If": ["IsProd", 1, 2]},
    "select": {"Fn::Select": [0, {"Fn::GetAZs": ""}]},
    "split": {"Fn::Split": ["|", "a|b"]},
    "findInMap": {"Fn::FindInMap": ["Map", {"Ref": "AWS::Region"}, "Key"]},
    "importValue": {"Fn::ImportValue": "other-stack-export"},
    "equals": {"Fn::Equals": [{"Ref": "Stage"}, "prod"]},
    "and": {"Fn::And": [{"Condition": "A"}, {"Fn::Not": [{"Condition": "B"}]}]},
    "or": {"Fn::Or": [{"Condition": "A"}, {"Condition": "B"}]},
    "base64": {"Fn::Base64": "text"},
    "cidr": {"Fn::Cidr": ["10.0.0.0/16", 4, 8]},
    "transform": {"Fn::Transform": {"Name": "AWS::Include", "Parameters": {"Location": "s3://b/k"}}},
    "anchored": {"x": 1},
    "aliased": {"x": 1},
    "plain": 3
  }
}`
	assertJSONEqual(t, doc, want)
}

func assertJSONEqual(t *testing.T, got any, want string) {
	t.Helper()
	var w, g any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		pretty, _ := json.MarshalIndent(g, "", "  ")
		t.Errorf("got\n%s\nwant\n%s", pretty, want)
	}
}

func TestParseRefusesWhatAWSRefuses(t *testing.T) {
	for name, tc := range map[string]struct{ src, want string }{
		"unknown tag":        {"a: !Reff X\n", "line 1: unknown tag !Reff"},
		"duplicate key":      {"Resources:\n  A: 1\n  A: 2\n", `line 3: duplicate key "A"`},
		"GetAtt without dot": {"a: !GetAtt Function\n", "want Resource.Attribute"},
		"two documents":      {"a: 1\n---\nb: 2\n", "one YAML document"},
		"not a mapping":      {"- a\n", "not a mapping"},
		"bad YAML":           {"a: [\n", "parse"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := samtemplate.Parse([]byte(tc.src))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestPropertyFallsBackToGlobals(t *testing.T) {
	tpl := loadRepoTemplate(t)
	if v, _ := tpl.Property("ApiFunction", "Timeout"); v != 29 {
		t.Errorf("ApiFunction Timeout = %v, want its own 29", v)
	}
	if v, _ := tpl.Property("DiscoverFunction", "Runtime"); v != "provided.al2023" {
		t.Errorf("DiscoverFunction Runtime = %v, want Globals' provided.al2023", v)
	}
	if _, ok := tpl.Property("JobsTable", "Runtime"); ok {
		t.Error("a DynamoDB table got a property from Globals.Function")
	}
}
