package samtemplate_test

import (
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandstep/sandstep/internal/emulation/samtemplate"
)

// The repository's template must pass every reference check. Until each
// functions/<name>/main.go exists and the root Makefile includes lambda.mk,
// this names what is missing.
func TestRepoTemplateReferences(t *testing.T) {
	for _, p := range loadRepoTemplate(t).Check() {
		t.Error(p)
	}
}

// Every function is a Go main package in its CodeUri folder, which is
// what lambda.mk builds.
func TestRepoFunctionsAreGoMains(t *testing.T) {
	tpl := loadRepoTemplate(t)
	for id, res := range tpl.Resources() {
		if res["Type"] != "AWS::Serverless::Function" {
			continue
		}
		code, _ := tpl.Property(id, "CodeUri")
		dir, _ := code.(string)
		main := filepath.Join(tpl.Dir, dir, "main.go")
		f, err := parser.ParseFile(token.NewFileSet(), main, nil, parser.PackageClauseOnly)
		if err != nil {
			t.Errorf("%s: %v", id, err)
			continue
		}
		if f.Name.Name != "main" {
			t.Errorf("%s: %s is package %s, want main", id, main, f.Name.Name)
		}
	}
}

// The parts of the template other code relies on: function names and
// folders, their environment, the API routes, the cleanup rule.
func TestRepoTemplateShape(t *testing.T) {
	tpl := loadRepoTemplate(t)
	functions := map[string]struct {
		dir     string
		timeout int
	}{
		"ApiFunction":       {"functions/api", 29},
		"DiscoverFunction":  {"functions/discover", 900},
		"ProvisionFunction": {"functions/provision", 900},
		"CrawlFunction":     {"functions/crawl", 900},
		"SummarizeFunction": {"functions/summarize", 900},
		"ReportFunction":    {"functions/report", 900},
		"CleanupFunction":   {"functions/cleanup", 300},
		"RunFunction":       {"functions/run", 900},
		"ReaperFunction":    {"functions/reaper", 300},
		"AgentFunction":     {"functions/agent", 900},
	}
	for id, res := range tpl.Resources() {
		if res["Type"] == "AWS::Serverless::Function" {
			if _, ok := functions[id]; !ok {
				t.Errorf("unexpected function %s", id)
			}
		}
	}
	for id, want := range functions {
		if _, ok := tpl.Resources()[id]; !ok {
			t.Errorf("function %s is missing", id)
			continue
		}
		prop := func(name string) any { v, _ := tpl.Property(id, name); return v }
		if prop("CodeUri") != want.dir {
			t.Errorf("%s CodeUri = %v, want %s", id, prop("CodeUri"), want.dir)
		}
		if prop("Timeout") != want.timeout {
			t.Errorf("%s Timeout = %v, want %d", id, prop("Timeout"), want.timeout)
		}
		if prop("Runtime") != "provided.al2023" || prop("Handler") != "bootstrap" {
			t.Errorf("%s runs %v/%v, want provided.al2023/bootstrap", id, prop("Runtime"), prop("Handler"))
		}
		if a, _ := prop("Architectures").([]any); !slices.Equal(a, []any{"arm64"}) {
			t.Errorf("%s Architectures = %v, want [arm64]", id, a)
		}
		meta := mapAt(t, tpl.Doc, "Resources", id, "Metadata")
		if meta["BuildMethod"] != "makefile" || meta["ContextPath"] != "." || meta["ProjectRootDirectory"] != "." {
			t.Errorf("%s Metadata = %v, want the root Makefile over the whole module", id, meta)
		}
	}

	env := mapAt(t, tpl.Doc, "Globals", "Function", "Environment", "Variables")
	for k, want := range map[string]string{
		"SANDSTEP_CONFIG":     "/var/task/config.toml",
		"SANDSTEP_PLUGIN_DIR": "/opt/plugins",
	} {
		if env[k] != want {
			t.Errorf("Globals env %s = %v, want %s", k, env[k], want)
		}
	}
	for _, k := range []string{"SANDSTEP_TABLE_PREFIX", "LOG_LEVEL"} {
		if _, ok := env[k]; !ok {
			t.Errorf("Globals env has no %s", k)
		}
	}
	apiEnv := mapAt(t, tpl.Doc, "Resources", "ApiFunction", "Properties", "Environment", "Variables")
	if ref, _ := apiEnv["SANDSTEP_STATE_MACHINE_ARN"].(map[string]any); ref["Ref"] != "DeepResearchStateMachine" {
		t.Errorf("ApiFunction SANDSTEP_STATE_MACHINE_ARN = %v, want !Ref DeepResearchStateMachine", apiEnv["SANDSTEP_STATE_MACHINE_ARN"])
	}

	var routes []string
	for name, ev := range mapAt(t, tpl.Doc, "Resources", "ApiFunction", "Properties", "Events") {
		e := ev.(map[string]any)
		p := e["Properties"].(map[string]any)
		if e["Type"] != "HttpApi" || p["PayloadFormatVersion"] != "2.0" {
			t.Errorf("ApiFunction event %s: want an HttpApi event with payload format 2.0, got %v", name, e)
		}
		if ref, _ := p["ApiId"].(map[string]any); ref["Ref"] != "HttpApi" {
			t.Errorf("ApiFunction event %s is not on HttpApi: %v", name, p["ApiId"])
		}
		routes = append(routes, p["Method"].(string)+" "+p["Path"].(string))
	}
	slices.Sort(routes)
	wantRoutes := []string{
		"ANY /v1/sandboxes/{id}/ports/{port}", "ANY /v1/sandboxes/{id}/ports/{port}/{path+}", "DELETE /v1/sandboxes/{id}",
		"DELETE /v1/sessions/{sid}", "GET /", "GET /api/sandboxes/{id}", "GET /api/sandboxes/{id}/files/list",
		"GET /api/sandboxes/{id}/files/read", "GET /console/{file}", "GET /healthz",
		"GET /v1/agent-runs/{id}", "GET /v1/agent-runs/{id}/artifacts", "GET /v1/agent-runs/{id}/artifacts/{path+}", "GET /v1/agent-runs/{id}/events",
		"GET /v1/agent-runs/{id}/result", "GET /v1/jobs", "GET /v1/jobs/{id}",
		"GET /v1/jobs/{id}/artifacts", "GET /v1/jobs/{id}/artifacts/{path+}", "GET /v1/jobs/{id}/events", "GET /v1/jobs/{id}/report", "GET /v1/openapi.json", "GET /v1/providers",
		"GET /v1/sandboxes", "GET /v1/sandboxes/{id}", "GET /v1/sandboxes/{id}/artifacts", "GET /v1/sandboxes/{id}/artifacts/{path+}",
		"GET /v1/sandboxes/{id}/events", "GET /v1/sandboxes/{id}/execs/{eid}", "GET /v1/sandboxes/{id}/execs/{eid}/output",
		"GET /v1/sandboxes/{id}/files", "GET /v1/sessions", "GET /v1/sessions/{sid}", "GET /v1/sessions/{sid}/events",
		"GET /v1/sessions/{sid}/runs/{run}", "GET /v1/tools", "GET /v1/usage", "POST /api/sandboxes",
		"POST /api/sandboxes/{id}/exec", "POST /api/sandboxes/{id}/files/write", "POST /api/sandboxes/{id}/terminate",
		"POST /mcp", "POST /v1/agent-runs", "POST /v1/agent-runs/{id}/cancel", "POST /v1/jobs", "POST /v1/jobs/{id}/cancel", "POST /v1/sandboxes", "POST /v1/sandboxes/{id}/exec",
		"POST /v1/sandboxes/{id}/terminate", "POST /v1/sessions/{sid}", "POST /v1/sessions/{sid}/code_modules",
		"POST /v1/sessions/{sid}/run", "POST /v1/sessions/{sid}/search_docs", "PUT /v1/sandboxes/{id}/files",
	}
	if !slices.Equal(routes, wantRoutes) {
		t.Errorf("routes = %v, want %v", routes, wantRoutes)
	}

	rule := mapAt(t, tpl.Doc, "Resources", "CleanupFunction", "Properties", "Events", "ExecutionEnded")
	pattern := mapAt(t, rule, "Properties", "Pattern")
	if rule["Type"] != "EventBridgeRule" ||
		!slices.Equal(pattern["source"].([]any), []any{"aws.states"}) ||
		!slices.Equal(pattern["detail-type"].([]any), []any{"Step Functions Execution Status Change"}) {
		t.Errorf("CleanupFunction ExecutionEnded = %v, want an EventBridge rule on Step Functions status changes", rule)
	}
	detail := mapAt(t, pattern, "detail")
	if !slices.Equal(detail["status"].([]any), []any{"ABORTED", "TIMED_OUT", "FAILED"}) {
		t.Errorf("cleanup rule statuses = %v", detail["status"])
	}
	if arns := detail["stateMachineArn"].([]any); len(arns) != 1 || arns[0].(map[string]any)["Ref"] != "DeepResearchStateMachine" {
		t.Errorf("cleanup rule state machines = %v, want only DeepResearchStateMachine", arns)
	}
	for _, k := range []string{"Input", "InputPath", "InputTransformer"} {
		if _, ok := rule["Properties"].(map[string]any)[k]; ok {
			t.Errorf("cleanup rule sets %s; the handler expects the event itself", k)
		}
	}

	if typ := mapAt(t, tpl.Doc, "Resources", "DeepResearchStateMachine", "Properties")["Type"]; typ != "STANDARD" {
		t.Errorf("state machine Type = %v, want STANDARD", typ)
	}

	// Agent runs: a Standard workflow of their own, every Task the
	// AgentFunction, started by the API, its failed, timed-out and
	// aborted executions cleaned up by the AgentFunction.
	agentSM := mapAt(t, tpl.Doc, "Resources", "AgentRunStateMachine", "Properties")
	if agentSM["Type"] != "STANDARD" || agentSM["DefinitionUri"] != "statemachine/agent-run.asl.json" {
		t.Errorf("AgentRunStateMachine = %v, want a STANDARD machine of statemachine/agent-run.asl.json", agentSM)
	}
	if arn, _ := mapAt(t, agentSM, "DefinitionSubstitutions")["AgentFunctionArn"].(map[string]any); fmt.Sprint(arn["Fn::GetAtt"]) != "[AgentFunction Arn]" {
		t.Errorf("AgentRunStateMachine AgentFunctionArn = %v, want !GetAtt AgentFunction.Arn", arn)
	}
	if ref, _ := apiEnv["SANDSTEP_AGENT_STATE_MACHINE_ARN"].(map[string]any); ref["Ref"] != "AgentRunStateMachine" {
		t.Errorf("ApiFunction SANDSTEP_AGENT_STATE_MACHINE_ARN = %v, want !Ref AgentRunStateMachine", apiEnv["SANDSTEP_AGENT_STATE_MACHINE_ARN"])
	}
	agentRule := mapAt(t, tpl.Doc, "Resources", "AgentFunction", "Properties", "Events", "ExecutionEnded")
	agentDetail := mapAt(t, agentRule, "Properties", "Pattern", "detail")
	if !slices.Equal(agentDetail["status"].([]any), []any{"ABORTED", "TIMED_OUT", "FAILED"}) {
		t.Errorf("agent cleanup rule statuses = %v", agentDetail["status"])
	}
	if arns := agentDetail["stateMachineArn"].([]any); len(arns) != 1 || arns[0].(map[string]any)["Ref"] != "AgentRunStateMachine" {
		t.Errorf("agent cleanup rule state machines = %v, want only AgentRunStateMachine", arns)
	}
	outputs := mapAt(t, tpl.Doc, "Outputs")
	for _, k := range []string{"ApiUrl", "StateMachineArn", "JobsTableName", "SessionsTableName", "SandboxesTableName", "DocsTableName"} {
		if _, ok := outputs[k]; !ok {
			t.Errorf("output %s is missing", k)
		}
	}
}

// Each case breaks the real template in one way and expects Check to name
// it; problems the unbroken template already has are not counted.
func TestCheckFindsMistakes(t *testing.T) {
	baseline := map[string]bool{}
	for _, p := range loadRepoTemplate(t).Check() {
		baseline[p.String()] = true
	}
	res := func(t *testing.T, doc map[string]any, id string) map[string]any {
		return mapAt(t, doc, "Resources", id, "Properties")
	}
	for name, tc := range map[string]struct {
		mutate func(t *testing.T, doc map[string]any)
		want   string // "" = no new problem
	}{
		"Ref to nothing": {
			mutate: func(t *testing.T, doc map[string]any) {
				res(t, doc, "DiscoverFunction")["Policies"] = []any{map[string]any{"DynamoDBCrudPolicy": map[string]any{"TableName": map[string]any{"Ref": "JobTable"}}}}
			},
			want: "DiscoverFunction: Ref JobTable: no such parameter or resource",
		},
		"GetAtt of an attribute the type lacks": {
			mutate: func(t *testing.T, doc map[string]any) {
				mapAt(t, doc, "Outputs", "StateMachineArn")["Value"] = map[string]any{"Fn::GetAtt": []any{"DeepResearchStateMachine", "Id"}}
			},
			want: "Outputs.StateMachineArn: Fn::GetAtt DeepResearchStateMachine.Id: AWS::Serverless::StateMachine has no attribute Id",
		},
		"Sub of an unknown name": {
			mutate: func(t *testing.T, doc map[string]any) {
				mapAt(t, doc, "Outputs", "ApiUrl")["Value"] = map[string]any{"Fn::Sub": "https://${HttpAPI}.example/${!Literal}"}
			},
			want: "Outputs.ApiUrl: Fn::Sub ${HttpAPI}: no such parameter, resource or variable",
		},
		"Sub list form variables are names": {
			mutate: func(t *testing.T, doc map[string]any) {
				mapAt(t, doc, "Outputs", "ApiUrl")["Value"] = map[string]any{"Fn::Sub": []any{"${Id}-${AWS::Region}-${HttpApi.ApiEndpoint}", map[string]any{"Id": map[string]any{"Ref": "HttpApi"}}}}
			},
		},
		"Sub with a bad attribute": {
			mutate: func(t *testing.T, doc map[string]any) {
				mapAt(t, doc, "Outputs", "ApiUrl")["Value"] = map[string]any{"Fn::Sub": "${HttpApi.Url}"}
			},
			want: "Fn::GetAtt HttpApi.Url: AWS::Serverless::HttpApi has no attribute Url",
		},
		"DependsOn nothing": {
			mutate: func(t *testing.T, doc map[string]any) {
				mapAt(t, doc, "Resources", "HttpApi")["DependsOn"] = "ApiFunctions"
			},
			want: "HttpApi: DependsOn ApiFunctions: no such resource",
		},
		"undeclared condition": {
			mutate: func(t *testing.T, doc map[string]any) {
				mapAt(t, doc, "Resources", "HttpApi")["Condition"] = "IsProd"
			},
			want: `HttpApi: Condition "IsProd" is not declared in Conditions`,
		},
		"generated role is referable": {
			mutate: func(t *testing.T, doc map[string]any) {
				mapAt(t, doc, "Outputs")["Role"] = map[string]any{"Value": map[string]any{"Fn::GetAtt": []any{"ApiFunctionRole", "Arn"}}}
			},
		},
		"CodeUri that does not exist": {
			mutate: func(t *testing.T, doc map[string]any) {
				res(t, doc, "ReportFunction")["CodeUri"] = "functions/no-such-folder"
			},
			want: "ReportFunction: CodeUri functions/no-such-folder:",
		},
		"DefinitionUri that does not exist": {
			mutate: func(t *testing.T, doc map[string]any) {
				res(t, doc, "DeepResearchStateMachine")["DefinitionUri"] = "statemachine/nope.asl.json"
			},
			want: "DeepResearchStateMachine: DefinitionUri statemachine/nope.asl.json:",
		},
		"placeholder without substitution": {
			mutate: func(t *testing.T, doc map[string]any) {
				delete(res(t, doc, "DeepResearchStateMachine")["DefinitionSubstitutions"].(map[string]any), "CrawlFunctionArn")
			},
			want: "definition uses ${CrawlFunctionArn}, which DefinitionSubstitutions does not define",
		},
		"substitution never used": {
			mutate: func(t *testing.T, doc map[string]any) {
				res(t, doc, "DeepResearchStateMachine")["DefinitionSubstitutions"].(map[string]any)["ApiFunctionArn"] = map[string]any{"Fn::GetAtt": []any{"ApiFunction", "Arn"}}
			},
			want: "DefinitionSubstitutions defines ApiFunctionArn, which the definition never uses",
		},
		"task placeholder that is not a function": {
			mutate: func(t *testing.T, doc map[string]any) {
				res(t, doc, "DeepResearchStateMachine")["DefinitionSubstitutions"].(map[string]any)["ReportFunctionArn"] = map[string]any{"Fn::GetAtt": []any{"JobsTable", "Arn"}}
			},
			want: "state Report invokes ${ReportFunctionArn}, which is not a Lambda function of this template",
		},
		"invoked function without a policy": {
			mutate: func(t *testing.T, doc map[string]any) {
				p := res(t, doc, "DeepResearchStateMachine")
				p["Policies"] = slices.DeleteFunc(p["Policies"].([]any), func(v any) bool {
					return v.(map[string]any)["LambdaInvokePolicy"].(map[string]any)["FunctionName"].(map[string]any)["Ref"] == "CrawlFunction"
				})
			},
			want: "the definition invokes CrawlFunction, but no policy allows lambda:InvokeFunction on it",
		},
		"policy for a function never invoked": {
			mutate: func(t *testing.T, doc map[string]any) {
				p := res(t, doc, "DeepResearchStateMachine")
				p["Policies"] = append(p["Policies"].([]any), map[string]any{"LambdaInvokePolicy": map[string]any{"FunctionName": map[string]any{"Ref": "ApiFunction"}}})
			},
			want: "policies allow invoking ApiFunction, which the definition never invokes",
		},
		"inline statement is as good as LambdaInvokePolicy": {
			mutate: func(t *testing.T, doc map[string]any) {
				p := res(t, doc, "DeepResearchStateMachine")
				var kept []any
				for _, v := range p["Policies"].([]any) {
					if v.(map[string]any)["LambdaInvokePolicy"].(map[string]any)["FunctionName"].(map[string]any)["Ref"] != "CrawlFunction" {
						kept = append(kept, v)
					}
				}
				p["Policies"] = append(kept, map[string]any{"Statement": []any{map[string]any{
					"Effect": "Allow", "Action": []any{"lambda:InvokeFunction"},
					"Resource": []any{map[string]any{"Fn::GetAtt": []any{"CrawlFunction", "Arn"}}, map[string]any{"Fn::Sub": "${CrawlFunction.Arn}:*"}},
				}}})
			},
		},
		"misspelt policy template": {
			mutate: func(t *testing.T, doc map[string]any) {
				res(t, doc, "ReportFunction")["Policies"] = []any{map[string]any{"DynamoDbCrudPolicy": map[string]any{"TableName": map[string]any{"Ref": "JobsTable"}}}}
			},
			want: "ReportFunction: unknown SAM policy template DynamoDbCrudPolicy",
		},
		"policy template parameter misspelt": {
			mutate: func(t *testing.T, doc map[string]any) {
				res(t, doc, "ReportFunction")["Policies"] = []any{map[string]any{"DynamoDBCrudPolicy": map[string]any{"Table": map[string]any{"Ref": "JobsTable"}}}}
			},
			want: "ReportFunction: DynamoDBCrudPolicy needs parameter TableName",
		},
		"makefile build without the target": {
			mutate: func(t *testing.T, doc map[string]any) {
				resources := mapAt(t, doc, "Resources")
				resources["ReportsFunction"] = resources["ReportFunction"]
			},
			want: "has no target build-ReportsFunction",
		},
	} {
		t.Run(name, func(t *testing.T) {
			tpl := loadRepoTemplate(t)
			tc.mutate(t, tpl.Doc)
			var added []string
			for _, p := range problemStrings(tpl.Check()) {
				if !baseline[p] {
					added = append(added, p)
				}
			}
			if tc.want == "" {
				if len(added) > 0 {
					t.Fatalf("new problems:\n%s", strings.Join(added, "\n"))
				}
				return
			}
			if !slices.ContainsFunc(added, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Fatalf("no new problem contains %q; new problems:\n%s", tc.want, strings.Join(added, "\n"))
			}
		})
	}
}

// sam runs make from ProjectRootDirectory (or WorkingDirectory), so that is
// where a Makefile's includes are found.
func TestCheckMakefileTargets(t *testing.T) {
	for name, tc := range map[string]struct {
		files map[string]string
		meta  string
		want  string // "" = no problem
	}{
		"target in an included file": {
			files: map[string]string{"Makefile": "all:\n\techo\ninclude lambda.mk\n", "lambda.mk": "X := 1\nbuild-Fn build-Other: ; true\n"},
			meta:  "ContextPath: .\n      ProjectRootDirectory: .",
		},
		"include missing": {
			files: map[string]string{"Makefile": "all:\n", "lambda.mk": "build-Fn:\n"},
			meta:  "ContextPath: .\n      ProjectRootDirectory: .",
			want:  "has no target build-Fn",
		},
		"included file missing": {
			files: map[string]string{"Makefile": "include nope.mk\nbuild-Fn:\n"},
			meta:  "ContextPath: .\n      ProjectRootDirectory: .",
			want:  "includes open",
		},
		"optional include missing": {
			files: map[string]string{"Makefile": "-include nope.mk\nbuild-Fn:\n"},
			meta:  "ContextPath: .\n      ProjectRootDirectory: .",
		},
		"assignment is not a target": {
			files: map[string]string{"Makefile": "build-Fn := 1\nbuild-Fn ::= 2\n"},
			meta:  "ContextPath: .\n      ProjectRootDirectory: .",
			want:  "has no target build-Fn",
		},
		"includes resolve from WorkingDirectory": {
			files: map[string]string{"Makefile": "include lambda.mk\n", "work/lambda.mk": "build-Fn:\n"},
			meta:  "ContextPath: .\n      ProjectRootDirectory: .\n      WorkingDirectory: work",
		},
		"default Makefile is in the code folder": {
			files: map[string]string{"fn/Makefile": "build-Fn:\n"},
		},
		"no Makefile in the code folder": {
			files: map[string]string{"Makefile": "build-Fn:\n"},
			want:  "fn/Makefile: no such file",
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.MkdirAll(filepath.Join(dir, "fn"), 0o755); err != nil {
				t.Fatal(err)
			}
			for p, body := range tc.files {
				p = filepath.Join(dir, p)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			src := "Resources:\n  Fn:\n    Type: AWS::Serverless::Function\n    Metadata:\n      BuildMethod: makefile\n      " +
				tc.meta + "\n    Properties:\n      CodeUri: fn\n      Runtime: provided.al2023\n      Handler: bootstrap\n"
			path := filepath.Join(dir, "template.yaml")
			if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			tpl, err := samtemplate.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			got := problemStrings(tpl.Check())
			switch {
			case tc.want == "" && len(got) > 0:
				t.Fatalf("problems:\n%s", strings.Join(got, "\n"))
			case tc.want != "" && !slices.ContainsFunc(got, func(p string) bool { return strings.Contains(p, tc.want) }):
				t.Fatalf("no problem contains %q; got:\n%s", tc.want, strings.Join(got, "\n"))
			}
		})
	}
}

// Task states inside Parallel branches and Map iterators count too, and the
// lambda:invoke integration names its function in Parameters.FunctionName.
func TestCheckNestedAndIntegrationTasks(t *testing.T) {
	dir := t.TempDir()
	def := `{"StartAt": "P", "States": {
  "P": {"Type": "Parallel", "Next": "M", "Branches": [
    {"StartAt": "A", "States": {"A": {"Type": "Task", "Resource": "${AArn}", "End": true}}}]},
  "M": {"Type": "Map", "End": true, "ItemProcessor": {"StartAt": "B", "States": {
    "B": {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke", "Parameters": {"FunctionName": "${BName}"}, "End": true}}}}}}`
	src := `Resources:
  A:
    Type: AWS::Serverless::Function
    Properties: {CodeUri: fn, Runtime: provided.al2023, Handler: bootstrap}
  B:
    Type: AWS::Serverless::Function
    Properties: {CodeUri: fn, Runtime: provided.al2023, Handler: bootstrap}
  SM:
    Type: AWS::Serverless::StateMachine
    Properties:
      DefinitionUri: sm.json
      DefinitionSubstitutions:
        AArn: !GetAtt A.Arn
        BName: !Ref B
      Policies:
        - LambdaInvokePolicy: {FunctionName: !Ref A}
`
	for p, body := range map[string]string{"sm.json": def, "template.yaml": src, "fn/main.go": "package main\n"} {
		p = filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tpl, err := samtemplate.Load(filepath.Join(dir, "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	got := problemStrings(tpl.Check())
	want := []string{"SM: the definition invokes B, but no policy allows lambda:InvokeFunction on it (add LambdaInvokePolicy: {FunctionName: !Ref B})"}
	if !slices.Equal(got, want) {
		t.Fatalf("problems = %q, want %q", got, want)
	}
}
