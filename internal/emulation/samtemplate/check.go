package samtemplate

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Problem is one way the template disagrees with itself or with the files
// it names.
type Problem struct {
	// Resource is the logical id the problem is in ("" for the template as
	// a whole, "Outputs.X" for an output).
	Resource string
	Message  string
}

func (p Problem) String() string {
	if p.Resource == "" {
		return p.Message
	}
	return p.Resource + ": " + p.Message
}

// Check runs the reference checks that the schema cannot express:
//
//   - every Ref, Fn::GetAtt, ${...} in Fn::Sub, DependsOn and Condition
//     names something the template declares (or a pseudo parameter);
//   - every CodeUri, ContentUri and DefinitionUri that is a local path exists;
//   - every resource built with BuildMethod makefile has its
//     build-<LogicalId> target in the Makefile sam will run, following the
//     Makefile's includes the way make will from sam's working directory;
//   - every ${...} in a state machine definition has a DefinitionSubstitutions
//     entry and every entry is used; every Task that invokes a Lambda names a
//     function of this template that the state machine's policies allow it to
//     invoke, and its LambdaInvokePolicy entries name no function it never
//     calls;
//   - every SAM policy template is one sam knows, with its parameters.
//
// The problems come sorted by resource.
func (t *Template) Check() []Problem {
	c := &checker{t: t, names: t.names()}
	c.references()
	for _, id := range sortedKeys(t.Resources()) {
		res := t.Resources()[id]
		typ, _ := res["Type"].(string)
		switch typ {
		case "AWS::Serverless::Function":
			c.function(id, res)
		case "AWS::Serverless::LayerVersion":
			c.localPath(id, "ContentUri", true, false)
			c.makefileBuild(id, res, "ContentUri")
		case "AWS::Serverless::StateMachine":
			c.stateMachine(id)
			c.policies(id)
		case "AWS::Serverless::HttpApi", "AWS::Serverless::Api":
			c.localPath(id, "DefinitionUri", false, true)
		}
	}
	slices.SortStableFunc(c.problems, func(a, b Problem) int { return strings.Compare(a.Resource, b.Resource) })
	return c.problems
}

type checker struct {
	t        *Template
	names    names
	problems []Problem
}

func (c *checker) addf(resource, format string, args ...any) {
	c.problems = append(c.problems, Problem{Resource: resource, Message: fmt.Sprintf(format, args...)})
}

// names is what a template may refer to.
type names struct {
	params     map[string]bool
	resources  map[string]string // logical id -> type
	conditions map[string]bool
}

var pseudoParams = map[string]bool{
	"AWS::AccountId": true, "AWS::NotificationARNs": true, "AWS::NoValue": true, "AWS::Partition": true,
	"AWS::Region": true, "AWS::StackId": true, "AWS::StackName": true, "AWS::URLSuffix": true,
}

func (t *Template) names() names {
	n := names{params: map[string]bool{}, resources: map[string]string{}, conditions: map[string]bool{}}
	for p := range asMap(t.Doc["Parameters"]) {
		n.params[p] = true
	}
	for c := range asMap(t.Doc["Conditions"]) {
		n.conditions[c] = true
	}
	for id, res := range t.Resources() {
		typ, _ := res["Type"].(string)
		n.resources[id] = typ
		// SAM's generated execution role may be referred to by its
		// documented logical id when the template does not bring its own.
		if typ == "AWS::Serverless::Function" || typ == "AWS::Serverless::StateMachine" {
			if _, own := asMap(res["Properties"])["Role"]; !own {
				n.resources[id+"Role"] = "AWS::IAM::Role"
			}
		}
	}
	return n
}

// attributes lists the Fn::GetAtt attributes of the types this project
// uses; other types are not checked. SAM passes Fn::GetAtt on a serverless
// resource through to the CloudFormation resource it generates under the
// same logical id.
var attributes = map[string][]string{
	"AWS::Serverless::Function":     {"Arn"},
	"AWS::Lambda::Function":         {"Arn", "SnapStartResponse", "SnapStartResponse.ApplyOn", "SnapStartResponse.OptimizationStatus"},
	"AWS::Serverless::StateMachine": {"Arn", "Name", "StateMachineRevisionId"},
	"AWS::StepFunctions::StateMachine": {
		"Arn", "Name", "StateMachineRevisionId",
	},
	"AWS::DynamoDB::Table":         {"Arn", "StreamArn"},
	"AWS::Serverless::SimpleTable": {"Arn", "StreamArn"},
	"AWS::Serverless::HttpApi":     {"ApiEndpoint", "ApiId"},
	"AWS::IAM::Role":               {"Arn", "RoleId"},
	// SAM renames a layer version with a content hash, so only Ref (its
	// ARN) reaches it.
	"AWS::Serverless::LayerVersion": {},
}

// references checks every reference in the parts of the template that
// CloudFormation evaluates (Metadata is free-form and is left alone).
func (c *checker) references() {
	for _, id := range sortedKeys(c.t.Resources()) {
		res := c.t.Resources()[id]
		c.walk(id, res["Properties"])
		if cond, ok := res["Condition"].(string); ok && !c.names.conditions[cond] {
			c.addf(id, "Condition %q is not declared in Conditions", cond)
		}
		deps := res["DependsOn"]
		if s, ok := deps.(string); ok {
			deps = []any{s}
		}
		for _, d := range asList(deps) {
			if s, _ := d.(string); c.names.resources[s] == "" {
				c.addf(id, "DependsOn %v: no such resource", d)
			}
		}
	}
	for _, section := range []string{"Globals", "Conditions", "Outputs"} {
		m := asMap(c.t.Doc[section])
		for _, k := range sortedKeys(m) {
			c.walk(section+"."+k, m[k])
		}
	}
}

func (c *checker) walk(where string, v any) {
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			c.walk(where, e)
		}
	case map[string]any:
		if len(x) == 1 {
			for fn, arg := range x {
				if c.intrinsic(where, fn, arg) {
					return
				}
			}
		}
		for _, k := range sortedKeys(x) {
			c.walk(where, x[k])
		}
	}
}

// intrinsic checks one intrinsic function call and reports whether fn was
// one (so that walk does not also read its argument as plain data).
func (c *checker) intrinsic(where, fn string, arg any) bool {
	switch fn {
	case "Ref":
		name, ok := arg.(string)
		if !ok {
			c.addf(where, "Ref wants a name, got %v", arg)
		} else if !c.names.params[name] && !pseudoParams[name] && c.names.resources[name] == "" {
			c.addf(where, "Ref %s: no such parameter or resource", name)
		}
	case "Fn::GetAtt":
		l := asList(arg)
		if len(l) != 2 {
			c.addf(where, "Fn::GetAtt wants [Resource, Attribute], got %v", arg)
			return true
		}
		res, _ := l[0].(string)
		if attr, ok := l[1].(string); ok {
			c.getAtt(where, res, attr)
		} else {
			c.walk(where, l[1])
		}
	case "Fn::Sub":
		c.sub(where, arg)
	case "Condition":
		if name, _ := arg.(string); !c.names.conditions[name] {
			c.addf(where, "Condition %v is not declared in Conditions", arg)
		}
	case "Fn::If":
		l := asList(arg)
		if len(l) != 3 {
			c.addf(where, "Fn::If wants [Condition, ValueIfTrue, ValueIfFalse], got %v", arg)
			return true
		}
		if name, _ := l[0].(string); !c.names.conditions[name] {
			c.addf(where, "Fn::If: condition %v is not declared in Conditions", l[0])
		}
		c.walk(where, l[1:])
	default:
		if !strings.HasPrefix(fn, "Fn::") {
			return false
		}
		c.walk(where, arg)
	}
	return true
}

func (c *checker) getAtt(where, res, attr string) {
	typ := c.names.resources[res]
	if typ == "" {
		c.addf(where, "Fn::GetAtt %s.%s: no such resource", res, attr)
		return
	}
	if known, ok := attributes[typ]; ok && !slices.Contains(known, attr) {
		c.addf(where, "Fn::GetAtt %s.%s: %s has no attribute %s (it has %s)", res, attr, typ, attr, strings.Join(known, ", "))
	}
}

// subVar matches ${Name}, ${Res.Attr} and the ${!Literal} escape.
var subVar = regexp.MustCompile(`\$\{([^}]*)\}`)

func (c *checker) sub(where string, arg any) {
	tmpl, ok := arg.(string)
	vars := map[string]any{}
	if !ok {
		l := asList(arg)
		if len(l) != 2 {
			c.addf(where, "Fn::Sub wants a string or [string, {variables}], got %v", arg)
			return
		}
		if tmpl, ok = l[0].(string); !ok {
			c.addf(where, "Fn::Sub: the template must be a string, got %v", l[0])
			return
		}
		vars = asMap(l[1])
		c.walk(where, vars)
	}
	for _, m := range subVar.FindAllStringSubmatch(tmpl, -1) {
		name := strings.TrimSpace(m[1])
		if strings.HasPrefix(name, "!") {
			continue
		}
		if _, ok := vars[name]; ok {
			continue
		}
		if res, attr, ok := strings.Cut(name, "."); ok {
			c.getAtt(where, res, attr)
			continue
		}
		if !c.names.params[name] && !pseudoParams[name] && c.names.resources[name] == "" {
			c.addf(where, "Fn::Sub ${%s}: no such parameter, resource or variable", name)
		}
	}
}

func (c *checker) function(id string, res map[string]any) {
	if pt, _ := c.t.Property(id, "PackageType"); pt == "Image" {
		return
	}
	if _, inline := c.t.Property(id, "InlineCode"); inline {
		return
	}
	c.localPath(id, "CodeUri", true, false)
	c.makefileBuild(id, res, "CodeUri")
	c.policies(id)
}

// localPath checks that a code or definition property naming a local path
// (not an S3 location) exists; wantFile says whether it must be a file.
func (c *checker) localPath(id, prop string, required, wantFile bool) {
	v, ok := c.t.Property(id, prop)
	if !ok {
		if required {
			c.addf(id, "%s is not set", prop)
		}
		return
	}
	p, ok := v.(string)
	if !ok || strings.HasPrefix(p, "s3://") {
		return
	}
	fi, err := os.Stat(c.t.abs(p))
	switch {
	case err != nil:
		c.addf(id, "%s %s: %v", prop, p, err)
	case wantFile && fi.IsDir():
		c.addf(id, "%s %s is a folder, want a file", prop, p)
	}
}

func (t *Template) abs(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(t.Dir, filepath.FromSlash(p))
}

// makefileBuild checks what `sam build` needs for BuildMethod makefile. sam
// runs `make --makefile <ContextPath>/Makefile build-<LogicalId>` in a copy
// of ProjectRootDirectory (default: the code folder), or in WorkingDirectory
// when one is given; the Makefile's relative includes resolve from there.
func (c *checker) makefileBuild(id string, res map[string]any, codeProp string) {
	meta := asMap(res["Metadata"])
	if meta["BuildMethod"] != "makefile" {
		return
	}
	code, _ := c.t.Property(id, codeProp)
	codeDir, ok := code.(string)
	if !ok {
		c.addf(id, "BuildMethod makefile needs %s to be a local folder", codeProp)
		return
	}
	dir := func(key, def string) string {
		if p, ok := meta[key].(string); ok {
			return c.t.abs(p)
		}
		return def
	}
	root := dir("ProjectRootDirectory", c.t.abs(codeDir))
	workDir := dir("WorkingDirectory", root)
	makefile := filepath.Join(dir("ContextPath", c.t.abs(codeDir)), "Makefile")
	for _, d := range []string{root, workDir} {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			c.addf(id, "build folder %s does not exist", d)
			return
		}
	}
	targets, err := makeTargets(makefile, workDir, map[string]bool{})
	if err != nil {
		c.addf(id, "BuildMethod makefile: %v", err)
		return
	}
	if !targets["build-"+id] {
		c.addf(id, "BuildMethod makefile: %s (with the files it includes from %s) has no target build-%s", makefile, workDir, id)
	}
}

var includeLine = regexp.MustCompile(`^\s*(-?include|sinclude)\s+(.+)$`)

// ruleTargets returns the targets a rule line declares ("a b: deps"), or
// nil for recipe lines, comments and assignments (=, :=, ::=, ?=...).
func ruleTargets(line string) []string {
	if strings.HasPrefix(line, "\t") {
		return nil
	}
	line, _, _ = strings.Cut(line, "#")
	i := strings.IndexAny(line, ":=")
	if i < 0 || line[i] == '=' {
		return nil
	}
	if strings.HasPrefix(strings.TrimLeft(line[i:], ":"), "=") {
		return nil
	}
	return strings.Fields(line[:i])
}

// makeTargets returns the explicit targets of a makefile and of the files
// it includes, includes resolving from workDir as they do for make run
// there. Names containing variables are skipped: they are not
// build-<LogicalId> targets sam could ask for by name.
func makeTargets(path, workDir string, seen map[string]bool) (map[string]bool, error) {
	targets := map[string]bool{}
	if seen[path] {
		return targets, nil
	}
	seen[path] = true
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if m := includeLine.FindStringSubmatch(line); m != nil {
			optional := m[1] != "include"
			for _, name := range strings.Fields(strings.SplitN(m[2], "#", 2)[0]) {
				if strings.Contains(name, "$") {
					continue
				}
				if !filepath.IsAbs(name) {
					name = filepath.Join(workDir, name)
				}
				sub, err := makeTargets(name, workDir, seen)
				if err != nil {
					if optional && os.IsNotExist(err) {
						continue
					}
					return nil, fmt.Errorf("%s includes %w", path, err)
				}
				for t := range sub {
					targets[t] = true
				}
			}
			continue
		}
		for _, t := range ruleTargets(line) {
			if !strings.Contains(t, "$") {
				targets[t] = true
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return targets, nil
}

// policyTemplates lists the parameters of the SAM policy templates a
// sandstep template may use, as samtranslator's policy_templates.json
// defines them. A misspelt template name passes the schema (Policies is
// free-form there) and fails only at deployment; here it fails at once.
var policyTemplates = map[string][]string{
	"LambdaInvokePolicy":                    {"FunctionName"},
	"DynamoDBCrudPolicy":                    {"TableName"},
	"DynamoDBReadPolicy":                    {"TableName"},
	"DynamoDBWritePolicy":                   {"TableName"},
	"StepFunctionsExecutionPolicy":          {"StateMachineName"},
	"SSMParameterReadPolicy":                {"ParameterName"},
	"AWSSecretsManagerGetSecretValuePolicy": {"SecretArn"},
	"SQSSendMessagePolicy":                  {"QueueName"},
	"CloudWatchPutMetricPolicy":             {},
}

// policyList returns a resource's Policies as a list (sam accepts one
// policy or a list).
func (t *Template) policyList(id string) []any {
	v, _ := t.Property(id, "Policies")
	if l, ok := v.([]any); ok {
		return l
	}
	if v == nil {
		return nil
	}
	return []any{v}
}

func (c *checker) policies(id string) {
	for _, p := range c.t.policyList(id) {
		m := asMap(p)
		if m == nil {
			continue // a managed policy name or ARN
		}
		if _, ok := m["Statement"]; ok {
			continue // an inline policy document
		}
		if _, ok := m["Fn::If"]; ok && len(m) == 1 {
			continue // a managed policy under a condition (checked with every intrinsic)
		}
		if _, ok := m["Ref"]; ok && len(m) == 1 {
			continue // a managed policy of the template
		}
		if len(m) != 1 {
			c.addf(id, "policy %v is neither a policy template nor a policy document", p)
			continue
		}
		for name, args := range m {
			want, ok := policyTemplates[name]
			if !ok {
				c.addf(id, "unknown SAM policy template %s (known here: %s)", name, strings.Join(sortedKeys(policyTemplates), ", "))
				continue
			}
			got := asMap(args)
			for _, w := range want {
				if _, ok := got[w]; !ok {
					c.addf(id, "%s needs parameter %s", name, w)
				}
			}
			for g := range got {
				if !slices.Contains(want, g) {
					c.addf(id, "%s has no parameter %s (it takes %s)", name, g, strings.Join(want, ", "))
				}
			}
		}
	}
}

// stateMachine checks a state machine's definition against its
// DefinitionSubstitutions and its policies.
func (c *checker) stateMachine(id string) {
	def, raw, ok := c.definition(id)
	if !ok {
		return
	}
	subs := asMap(asMap(asMap(c.t.Doc["Resources"])[id])["Properties"])["DefinitionSubstitutions"]
	used := map[string]bool{}
	for _, m := range subVar.FindAllStringSubmatch(raw, -1) {
		used[m[1]] = true
	}
	for _, name := range sortedKeys(used) {
		if _, ok := asMap(subs)[name]; !ok {
			c.addf(id, "definition uses ${%s}, which DefinitionSubstitutions does not define", name)
		}
	}
	for _, name := range sortedKeys(asMap(subs)) {
		if !used[name] {
			c.addf(id, "DefinitionSubstitutions defines %s, which the definition never uses", name)
		}
	}

	invoked := map[string]bool{}
	for _, task := range lambdaTasks(def) {
		fn, ok := c.substitutedFunction(asMap(subs)[task.placeholder])
		if !ok {
			c.addf(id, "state %s invokes ${%s}, which is not a Lambda function of this template (want !GetAtt <Function>.Arn)", task.state, task.placeholder)
			continue
		}
		invoked[fn] = true
	}
	if _, ownRole := asMap(asMap(asMap(c.t.Doc["Resources"])[id])["Properties"])["Role"]; ownRole {
		return // permissions live in a role declared elsewhere
	}
	allowed := c.invokePolicies(id)
	for _, fn := range sortedKeys(invoked) {
		if !allowed[fn] {
			c.addf(id, "the definition invokes %s, but no policy allows lambda:InvokeFunction on it (add LambdaInvokePolicy: {FunctionName: !Ref %s})", fn, fn)
		}
	}
	for _, fn := range sortedKeys(allowed) {
		if !invoked[fn] {
			c.addf(id, "policies allow invoking %s, which the definition never invokes", fn)
		}
	}
}

// definition loads a state machine's definition: the file DefinitionUri
// names (JSON or YAML) or the inline Definition. raw is the text that
// DefinitionSubstitutions apply to.
func (c *checker) definition(id string) (def map[string]any, raw string, ok bool) {
	props := asMap(asMap(asMap(c.t.Doc["Resources"])[id])["Properties"])
	if inline, ok := props["Definition"]; ok {
		b, err := json.Marshal(inline)
		if err != nil {
			c.addf(id, "Definition: %v", err)
			return nil, "", false
		}
		return asMap(inline), string(b), true
	}
	uri, ok := props["DefinitionUri"].(string)
	if !ok {
		if _, s3 := props["DefinitionUri"]; !s3 {
			c.addf(id, "neither Definition nor DefinitionUri is set")
		}
		return nil, "", false
	}
	b, err := os.ReadFile(c.t.abs(uri))
	if err != nil {
		c.addf(id, "DefinitionUri %s: %v", uri, err)
		return nil, "", false
	}
	def, err = Parse(b)
	if err != nil {
		c.addf(id, "DefinitionUri %s: %v", uri, err)
		return nil, "", false
	}
	return def, string(b), true
}

type lambdaTask struct {
	state       string
	placeholder string
}

// lambdaTasks finds the Task states (in branches and iterators too) that
// invoke a Lambda through a ${...} placeholder: as the Resource itself, or
// as the FunctionName of the lambda:invoke integration.
func lambdaTasks(def map[string]any) []lambdaTask {
	var out []lambdaTask
	states := asMap(def["States"])
	for _, name := range sortedKeys(states) {
		st := asMap(states[name])
		switch st["Type"] {
		case "Task":
			res, _ := st["Resource"].(string)
			if strings.HasPrefix(res, "arn:aws:states:::lambda:invoke") {
				for _, args := range []string{"Parameters", "Arguments"} {
					if fn, ok := asMap(st[args])["FunctionName"].(string); ok {
						res = fn
					}
				}
			}
			if m := placeholderOnly.FindStringSubmatch(res); m != nil {
				out = append(out, lambdaTask{state: name, placeholder: m[1]})
			}
		case "Parallel":
			for _, b := range asList(st["Branches"]) {
				out = append(out, lambdaTasks(asMap(b))...)
			}
		case "Map":
			for _, key := range []string{"Iterator", "ItemProcessor"} {
				if sub := asMap(st[key]); sub != nil {
					out = append(out, lambdaTasks(sub)...)
				}
			}
		}
	}
	return out
}

var placeholderOnly = regexp.MustCompile(`^\$\{([^}]+)\}$`)

var functionTypes = []string{"AWS::Serverless::Function", "AWS::Lambda::Function"}

// substitutedFunction returns the function a DefinitionSubstitutions value
// points at: !GetAtt F.Arn or !Ref F (a name, which lambda:invoke accepts).
func (c *checker) substitutedFunction(v any) (string, bool) {
	m := asMap(v)
	var fn string
	if l := asList(m["Fn::GetAtt"]); len(l) == 2 && l[1] == "Arn" {
		fn, _ = l[0].(string)
	} else if r, ok := m["Ref"].(string); ok {
		fn = r
	}
	return fn, fn != "" && slices.Contains(functionTypes, c.names.resources[fn])
}

// invokePolicies returns the functions a resource's policies let it
// invoke: LambdaInvokePolicy templates, and inline statements allowing
// lambda:InvokeFunction on the function's ARN.
func (c *checker) invokePolicies(id string) map[string]bool {
	allowed := map[string]bool{}
	for _, p := range c.t.policyList(id) {
		m := asMap(p)
		if tpl := asMap(m["LambdaInvokePolicy"]); tpl != nil {
			if fn, ok := asMap(tpl["FunctionName"])["Ref"].(string); ok {
				allowed[fn] = true
			}
			continue
		}
		stmts := m["Statement"]
		if s := asMap(stmts); s != nil {
			stmts = []any{s}
		}
		for _, s := range asList(stmts) {
			st := asMap(s)
			if st["Effect"] != "Allow" || !allowsInvoke(st["Action"]) {
				continue
			}
			rs := st["Resource"]
			if asMap(rs) != nil || rs == nil {
				rs = []any{rs}
			}
			for _, r := range asList(rs) {
				if fn := c.arnFunction(r); fn != "" {
					allowed[fn] = true
				}
			}
		}
	}
	return allowed
}

func allowsInvoke(action any) bool {
	if s, ok := action.(string); ok {
		action = []any{s}
	}
	for _, a := range asList(action) {
		if a == "lambda:InvokeFunction" || a == "lambda:*" || a == "*" {
			return true
		}
	}
	return false
}

// arnFunction recognises a function's ARN in a policy Resource: !GetAtt
// F.Arn, or !Sub "${F.Arn}" (optionally with ":*" for its versions).
func (c *checker) arnFunction(v any) string {
	m := asMap(v)
	if l := asList(m["Fn::GetAtt"]); len(l) == 2 && l[1] == "Arn" {
		if fn, _ := l[0].(string); slices.Contains(functionTypes, c.names.resources[fn]) {
			return fn
		}
	}
	if s, ok := m["Fn::Sub"].(string); ok {
		s = strings.TrimSuffix(s, ":*")
		if mm := placeholderOnly.FindStringSubmatch(s); mm != nil {
			if fn, ok := strings.CutSuffix(mm[1], ".Arn"); ok && slices.Contains(functionTypes, c.names.resources[fn]) {
				return fn
			}
		}
	}
	return ""
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
