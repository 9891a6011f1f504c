package asl

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"
)

// LoadOptions configures Load.
type LoadOptions struct {
	// Substitutions fills the definition's ${Name} placeholders, as
	// DefinitionSubstitutions does for AWS::StepFunctions::StateMachine.
	// A placeholder without a substitution is an error; "${!Name}" stands for
	// a literal "${Name}".
	Substitutions map[string]string
	// Name is the state machine's name ($$.StateMachine.Name). Default
	// "StateMachine".
	Name string
	// ARN is the state machine's ARN ($$.StateMachine.Id); execution ARNs are
	// derived from it. Default arn:aws:states:local:000000000000:stateMachine:<Name>.
	ARN string
}

// Machine is a loaded, validated state machine. It is immutable and may run
// any number of executions concurrently.
type Machine struct {
	name    string
	arn     string
	region  string
	timeout time.Duration // 0: none
	root    *program
	// fingerprint identifies the definition text after substitution.
	fingerprint string
}

// Name returns the state machine's name.
func (m *Machine) Name() string { return m.name }

// ARN returns the state machine's ARN.
func (m *Machine) ARN() string { return m.arn }

// program is a set of states with a start: the top level, a Parallel branch
// or a Map item processor.
type program struct {
	startAt string
	states  map[string]*state
}

type stateType string

const (
	typePass     stateType = "Pass"
	typeTask     stateType = "Task"
	typeChoice   stateType = "Choice"
	typeWait     stateType = "Wait"
	typeSucceed  stateType = "Succeed"
	typeFail     stateType = "Fail"
	typeParallel stateType = "Parallel"
	typeMap      stateType = "Map"
)

// optPath is InputPath, OutputPath or ResultPath: absent means "$", an
// explicit null has its own meaning per field.
type optPath struct {
	isNull bool
	p      *path // nil with !isNull: "$"
}

type state struct {
	name string
	typ  stateType
	next string // empty: the state ends its program

	inputPath, outputPath, resultPath optPath
	parameters, resultSelector        *template
	result                            any
	hasResult                         bool

	// Task
	lambdaInvoke   bool   // arn:aws:states:::lambda:invoke
	functionARN    string // the Resource of a plain Lambda ARN task
	timeoutSeconds int64
	timeoutPath    *path
	retry          []*retrier
	catch          []*catcher

	// Choice
	choices     []*choiceRule
	defaultNext string

	// Wait
	seconds       *int64
	secondsPath   *path
	timestamp     *time.Time
	timestampPath *path

	// Fail
	errorName, cause       *string
	errorValue, causeValue *dynamicString

	// Parallel
	branches []*program

	// Map
	itemsPath                 *path
	itemSelector              *template
	processor                 *program
	maxConcurrency            int64
	maxConcurrencyPath        *path
	toleratedCount            *int64
	toleratedCountPath        *path
	toleratedPercentage       *float64
	toleratedPercentagePath   *path
	hasToleratedFailureConfig bool
}

// dynamicString is Fail's ErrorPath or CausePath: a reference path or an
// intrinsic function that yields a string.
type dynamicString struct {
	src  string
	path *path
	call *intrinsic
}

type retrier struct {
	errorEquals []string
	interval    float64 // seconds
	maxAttempts int64
	backoffRate float64
	maxDelay    float64 // seconds, 0: no cap
	fullJitter  bool
}

type catcher struct {
	errorEquals []string
	next        string
	resultPath  optPath
}

const (
	maxStateNameLen   = 80
	maxSeconds        = 99999999
	maxRetryDelayCap  = 31622400
	maxInlineParallel = 40 // inline Map runs at most 40 iterations at a time
)

var (
	placeholderRE   = regexp.MustCompile(`\$\{(!?)([^}]*)\}`)
	lambdaInvokeRE  = regexp.MustCompile(`^arn:aws[a-z-]*:states:::lambda:invoke$`)
	lambdaARNRE     = regexp.MustCompile(`^arn:aws[a-z-]*:lambda:[a-z0-9-]+:\d{12}:function:[A-Za-z0-9_-]{1,64}(:(\$LATEST|[A-Za-z0-9_-]{1,128}))?$`)
	stateMachineARN = regexp.MustCompile(`^arn:aws[a-z-]*:states:([a-z0-9-]+):(\d{12}):stateMachine:([A-Za-z0-9_-]{1,80})$`)
)

// Load parses a JSONPath Amazon States Language definition, fills its
// placeholders, validates it and refuses, naming state and feature, whatever
// the engine does not implement: JSONata, variables (Assign), Distributed
// Map, Activities, callbacks (.waitForTaskToken), Credentials, heartbeats and
// every Task resource other than a Lambda function ARN or
// arn:aws:states:::lambda:invoke. All problems are reported at once, each a
// *DefinitionError, joined with errors.Join.
func Load(definition []byte, opts LoadOptions) (*Machine, error) {
	l := &loader{names: map[string]bool{}}
	text := l.substitute(string(definition), opts.Substitutions)
	if len(l.errs) > 0 {
		return nil, l.err()
	}
	raw, err := decodeJSON([]byte(text))
	if err != nil {
		return nil, &DefinitionError{Reason: "the definition is not JSON: " + err.Error()}
	}
	top, ok := raw.(map[string]any)
	if !ok {
		return nil, &DefinitionError{Reason: "the definition must be a JSON object"}
	}
	m := &Machine{name: opts.Name, arn: opts.ARN, region: "local", fingerprint: fingerprint(text)}
	if m.name == "" {
		m.name = "StateMachine"
	}
	if m.arn == "" {
		m.arn = "arn:aws:states:local:000000000000:stateMachine:" + m.name
	} else if sub := stateMachineARN.FindStringSubmatch(m.arn); sub != nil {
		m.region = sub[1]
	} else {
		return nil, &DefinitionError{Reason: fmt.Sprintf("LoadOptions.ARN %q is not a state machine ARN", m.arn)}
	}
	l.fields("", "the definition", top, []string{"Comment", "StartAt", "States", "TimeoutSeconds", "Version", "QueryLanguage"}, nil)
	l.queryLanguage("", top)
	if v, ok := top["TimeoutSeconds"]; ok {
		if n, ok := l.integer("", "TimeoutSeconds", v, 1, maxSeconds); ok {
			m.timeout = time.Duration(n) * time.Second
		}
	}
	m.root = l.program("", top)
	if len(l.errs) > 0 {
		return nil, l.err()
	}
	return m, nil
}

type loader struct {
	errs  []error
	names map[string]bool
}

func (l *loader) err() error {
	if len(l.errs) == 1 {
		return l.errs[0]
	}
	return errors.Join(l.errs...)
}

func (l *loader) fail(st, field, format string, args ...any) {
	l.errs = append(l.errs, &DefinitionError{State: st, Field: field, Reason: fmt.Sprintf(format, args...)})
}

func (l *loader) unsupported(st, field, format string, args ...any) {
	l.errs = append(l.errs, &DefinitionError{State: st, Field: field, Reason: fmt.Sprintf(format, args...), Unsupported: true})
}

func (l *loader) substitute(text string, subs map[string]string) string {
	return placeholderRE.ReplaceAllStringFunc(text, func(m string) string {
		sub := placeholderRE.FindStringSubmatch(m)
		if sub[1] == "!" {
			return "${" + sub[2] + "}"
		}
		v, ok := subs[sub[2]]
		if !ok {
			l.fail("", "", "placeholder ${%s} has no substitution", sub[2])
			return m
		}
		return v
	})
}

// fields reports fields of the object (what names it in messages) that are
// not in allowed; refused maps fields this engine knows but does not
// implement to the reason.
func (l *loader) fields(st, what string, m map[string]any, allowed []string, refused map[string]string) {
	for _, k := range sortedKeys(m) {
		if slices.Contains(allowed, k) {
			continue
		}
		if why, ok := refused[k]; ok {
			l.unsupported(st, k, "%s", why)
			continue
		}
		l.fail(st, k, "is not a valid field of %s", what)
	}
}

func (l *loader) queryLanguage(st string, m map[string]any) {
	v, ok := m["QueryLanguage"]
	if !ok {
		return
	}
	switch v {
	case "JSONPath":
	case "JSONata":
		l.unsupported(st, "QueryLanguage", "JSONata; only JSONPath is implemented")
	default:
		l.fail(st, "QueryLanguage", "must be JSONPath or JSONata")
	}
}

func (l *loader) str(st, field string, v any) (string, bool) {
	s, ok := v.(string)
	if !ok {
		l.fail(st, field, "must be a string")
	}
	return s, ok
}

func (l *loader) integer(st, field string, v any, lo, hi int64) (int64, bool) {
	n, ok := toInteger(v)
	if !ok || n < lo || n > hi {
		l.fail(st, field, "must be an integer from %d to %d", lo, hi)
		return 0, false
	}
	return n, true
}

func (l *loader) refPath(st, field string, v any) *path {
	s, ok := l.str(st, field, v)
	if !ok {
		return nil
	}
	p, err := parseReferencePath(s)
	if err != nil {
		l.fail(st, field, "%v", err)
		return nil
	}
	return p
}

func (l *loader) optPath(st, field string, m map[string]any, reference bool) optPath {
	v, ok := m[field]
	if !ok {
		return optPath{}
	}
	return l.optPathValue(st, field, v, reference)
}

func (l *loader) optPathValue(st, field string, v any, reference bool) optPath {
	if v == nil {
		return optPath{isNull: true}
	}
	s, ok := l.str(st, field, v)
	if !ok {
		return optPath{}
	}
	parse := parsePath
	if reference {
		parse = parseReferencePath
	}
	p, err := parse(s)
	if err != nil {
		l.fail(st, field, "%v", err)
		return optPath{}
	}
	if reference && p.context {
		l.fail(st, field, "must refer to the state's data, not the context object")
		return optPath{}
	}
	return optPath{p: p}
}

func (l *loader) template(st, field string, m map[string]any) *template {
	v, ok := m[field]
	if !ok {
		return nil
	}
	t, err := compileTemplate(v)
	if err != nil {
		l.fail(st, field, "%v", err)
		return nil
	}
	return t
}

func (l *loader) program(scope string, m map[string]any) *program {
	p := &program{states: map[string]*state{}}
	start, ok := m["StartAt"].(string)
	if !ok || start == "" {
		l.fail(scope, "StartAt", "must name a state")
	}
	p.startAt = start
	raw, ok := m["States"].(map[string]any)
	if !ok || len(raw) == 0 {
		l.fail(scope, "States", "must be a non-empty object of states")
		return p
	}
	for _, name := range sortedKeys(raw) {
		if n := len([]rune(name)); n == 0 || n > maxStateNameLen {
			l.fail(name, "", "a state name must have 1 to %d characters", maxStateNameLen)
		}
		if l.names[name] {
			l.fail(name, "", "the state name is used more than once in the definition")
		}
		l.names[name] = true
		sm, ok := raw[name].(map[string]any)
		if !ok {
			l.fail(name, "", "a state must be an object")
			continue
		}
		p.states[name] = l.state(name, sm)
	}
	if start != "" && p.states[start] == nil && len(raw) > 0 {
		l.fail(scope, "StartAt", "names %q, which is not a state here", start)
	}
	l.checkTransitions(p)
	return p
}

// checkTransitions verifies that every Next names a state of the same
// program and that every state can be reached, as the service does.
func (l *loader) checkTransitions(p *program) {
	targets := func(s *state) []string {
		var out []string
		if s.next != "" {
			out = append(out, s.next)
		}
		if s.defaultNext != "" {
			out = append(out, s.defaultNext)
		}
		for _, c := range s.choices {
			out = append(out, c.next)
		}
		for _, c := range s.catch {
			out = append(out, c.next)
		}
		return out
	}
	for _, name := range slices.Sorted(maps.Keys(p.states)) {
		s := p.states[name]
		if s == nil {
			continue
		}
		for _, t := range targets(s) {
			if _, ok := p.states[t]; !ok {
				l.fail(name, "", "transition to %q, which is not a state here", t)
			}
		}
	}
	seen := map[string]bool{}
	queue := []string{p.startAt}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		s, ok := p.states[n]
		if !ok || seen[n] {
			continue
		}
		seen[n] = true
		if s != nil {
			queue = append(queue, targets(s)...)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(p.states)) {
		if !seen[name] && p.states[p.startAt] != nil {
			l.fail(name, "", "the state cannot be reached from StartAt")
		}
	}
}

var common = []string{"Type", "Comment", "QueryLanguage"}

var jsonataEra = map[string]string{
	"Assign":    "variables (Assign)",
	"Arguments": "Arguments, a JSONata field",
	"Output":    "Output, a JSONata field",
}

func refusedWith(extra map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range jsonataEra {
		out[k] = v
	}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

func (l *loader) state(name string, m map[string]any) *state {
	s := &state{name: name}
	typ, _ := m["Type"].(string)
	s.typ = stateType(typ)
	l.queryLanguage(name, m)
	if c, ok := m["Comment"]; ok {
		l.str(name, "Comment", c)
	}
	switch s.typ {
	case typePass:
		l.fields(name, "a "+typ+" state", m, append([]string{"Next", "End", "InputPath", "OutputPath", "ResultPath", "Parameters", "Result"}, common...), refusedWith(nil))
		l.transition(s, m)
		l.paths(s, m)
		s.parameters = l.template(name, "Parameters", m)
		s.result, s.hasResult = m["Result"]
	case typeTask:
		l.fields(name, "a "+typ+" state", m, append([]string{"Next", "End", "InputPath", "OutputPath", "ResultPath", "Parameters", "ResultSelector", "Resource", "TimeoutSeconds", "TimeoutSecondsPath", "Retry", "Catch"}, common...),
			refusedWith(map[string]string{
				"Credentials":          "Credentials (cross-account roles)",
				"HeartbeatSeconds":     "heartbeats, which only callback and activity tasks use",
				"HeartbeatSecondsPath": "heartbeats, which only callback and activity tasks use",
			}))
		l.transition(s, m)
		l.paths(s, m)
		s.parameters = l.template(name, "Parameters", m)
		s.resultSelector = l.template(name, "ResultSelector", m)
		l.resource(s, m)
		l.timeout(s, m)
		l.retryCatch(s, m)
	case typeChoice:
		l.fields(name, "a "+typ+" state", m, append([]string{"Choices", "Default", "InputPath", "OutputPath"}, common...), refusedWith(nil))
		s.inputPath = l.optPath(name, "InputPath", m, false)
		s.outputPath = l.optPath(name, "OutputPath", m, false)
		list, ok := m["Choices"].([]any)
		if !ok || len(list) == 0 {
			l.fail(name, "Choices", "must be a non-empty array of rules")
		}
		for i, raw := range list {
			r, err := parseChoiceRule(raw, true)
			if err != nil {
				l.fail(name, fmt.Sprintf("Choices[%d]", i), "%v", err)
				continue
			}
			s.choices = append(s.choices, r)
		}
		if d, ok := m["Default"]; ok {
			s.defaultNext, _ = l.str(name, "Default", d)
		}
	case typeWait:
		l.fields(name, "a "+typ+" state", m, append([]string{"Next", "End", "InputPath", "OutputPath", "Seconds", "SecondsPath", "Timestamp", "TimestampPath"}, common...), refusedWith(nil))
		l.transition(s, m)
		s.inputPath = l.optPath(name, "InputPath", m, false)
		s.outputPath = l.optPath(name, "OutputPath", m, false)
		l.wait(s, m)
	case typeSucceed:
		l.fields(name, "a "+typ+" state", m, append([]string{"InputPath", "OutputPath"}, common...), refusedWith(nil))
		s.inputPath = l.optPath(name, "InputPath", m, false)
		s.outputPath = l.optPath(name, "OutputPath", m, false)
	case typeFail:
		l.fields(name, "a "+typ+" state", m, append([]string{"Error", "Cause", "ErrorPath", "CausePath"}, common...), refusedWith(nil))
		l.failFields(s, m)
	case typeParallel:
		l.fields(name, "a "+typ+" state", m, append([]string{"Next", "End", "InputPath", "OutputPath", "ResultPath", "Parameters", "ResultSelector", "Branches", "Retry", "Catch"}, common...), refusedWith(nil))
		l.transition(s, m)
		l.paths(s, m)
		s.parameters = l.template(name, "Parameters", m)
		s.resultSelector = l.template(name, "ResultSelector", m)
		l.retryCatch(s, m)
		list, ok := m["Branches"].([]any)
		if !ok || len(list) == 0 {
			l.fail(name, "Branches", "must be a non-empty array of state machines")
		}
		for i, raw := range list {
			bm, ok := raw.(map[string]any)
			if !ok {
				l.fail(name, fmt.Sprintf("Branches[%d]", i), "must be an object")
				continue
			}
			l.fields(name, fmt.Sprintf("Branches[%d]", i), bm, []string{"StartAt", "States", "Comment", "QueryLanguage"}, nil)
			l.queryLanguage(name, bm)
			s.branches = append(s.branches, l.program(name, bm))
		}
	case typeMap:
		l.mapState(s, m)
	default:
		l.fail(name, "Type", "must be one of Pass, Task, Choice, Wait, Succeed, Fail, Parallel or Map")
	}
	return s
}

func (l *loader) transition(s *state, m map[string]any) {
	next, hasNext := m["Next"]
	end, hasEnd := m["End"]
	switch {
	case hasNext && hasEnd:
		l.fail(s.name, "", "a state has either Next or End, not both")
	case hasNext:
		s.next, _ = l.str(s.name, "Next", next)
	case hasEnd:
		if end != true {
			l.fail(s.name, "End", "must be true")
		}
	default:
		l.fail(s.name, "", "a %s state needs Next or End", s.typ)
	}
}

func (l *loader) paths(s *state, m map[string]any) {
	s.inputPath = l.optPath(s.name, "InputPath", m, false)
	s.outputPath = l.optPath(s.name, "OutputPath", m, false)
	s.resultPath = l.optPath(s.name, "ResultPath", m, true)
}

func (l *loader) resource(s *state, m map[string]any) {
	res, ok := m["Resource"].(string)
	if !ok || res == "" {
		l.fail(s.name, "Resource", "must be a string")
		return
	}
	switch {
	case lambdaARNRE.MatchString(res):
		s.functionARN = res
	case lambdaInvokeRE.MatchString(res):
		s.lambdaInvoke = true
		l.lambdaInvokeParameters(s, m)
	case strings.HasSuffix(res, ".waitForTaskToken"):
		l.unsupported(s.name, "Resource", "callbacks (%s)", res)
	case strings.Contains(res, ":activity:"):
		l.unsupported(s.name, "Resource", "activities (%s)", res)
	case strings.Contains(res, ".sync"):
		l.unsupported(s.name, "Resource", "the run-a-job integration pattern (%s)", res)
	case strings.Contains(res, ":states:::"):
		l.unsupported(s.name, "Resource", "the service integration %s; only Lambda function ARNs and arn:aws:states:::lambda:invoke are implemented", res)
	default:
		l.unsupported(s.name, "Resource", "%q; only Lambda function ARNs (arn:aws:lambda:REGION:ACCOUNT:function:NAME[:QUALIFIER]) and arn:aws:states:::lambda:invoke are implemented", res)
	}
}

func (l *loader) lambdaInvokeParameters(s *state, m map[string]any) {
	params, ok := m["Parameters"].(map[string]any)
	if !ok {
		l.fail(s.name, "Parameters", "arn:aws:states:::lambda:invoke needs Parameters with FunctionName and Payload")
		return
	}
	has := func(k string) bool {
		_, a := params[k]
		_, b := params[k+".$"]
		return a || b
	}
	if !has("FunctionName") {
		l.fail(s.name, "Parameters", "arn:aws:states:::lambda:invoke needs FunctionName")
	}
	if !has("Payload") {
		l.unsupported(s.name, "Parameters", "arn:aws:states:::lambda:invoke without Payload")
	}
	for _, k := range sortedKeys(params) {
		base := strings.TrimSuffix(k, ".$")
		switch base {
		case "FunctionName", "Payload", "Qualifier":
		case "InvocationType":
			if params[k] != "RequestResponse" {
				l.unsupported(s.name, "Parameters."+k, "only the RequestResponse invocation type")
			}
		default:
			l.unsupported(s.name, "Parameters."+k, "Lambda Invoke parameter %s", base)
		}
	}
}

func (l *loader) timeout(s *state, m map[string]any) {
	v, hasSeconds := m["TimeoutSeconds"]
	p, hasPath := m["TimeoutSecondsPath"]
	switch {
	case hasSeconds && hasPath:
		l.fail(s.name, "", "TimeoutSeconds and TimeoutSecondsPath are mutually exclusive")
	case hasSeconds:
		s.timeoutSeconds, _ = l.integer(s.name, "TimeoutSeconds", v, 1, maxSeconds)
	case hasPath:
		s.timeoutPath = l.refPath(s.name, "TimeoutSecondsPath", p)
	}
}

func (l *loader) errorEquals(st, field string, v any) []string {
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		l.fail(st, field, "must be a non-empty array of error names")
		return nil
	}
	var out []string
	for _, e := range list {
		name, ok := e.(string)
		if !ok {
			l.fail(st, field, "error names must be strings")
			return nil
		}
		out = append(out, name)
	}
	if slices.Contains(out, ErrorALL) && len(out) > 1 {
		l.fail(st, field, "States.ALL must appear alone")
	}
	return out
}

func (l *loader) retryCatch(s *state, m map[string]any) {
	if v, ok := m["Retry"]; ok {
		list, ok := v.([]any)
		if !ok {
			l.fail(s.name, "Retry", "must be an array of retriers")
		}
		for i, raw := range list {
			field := fmt.Sprintf("Retry[%d]", i)
			rm, ok := raw.(map[string]any)
			if !ok {
				l.fail(s.name, field, "must be an object")
				continue
			}
			l.fields(s.name, field, rm, []string{"ErrorEquals", "IntervalSeconds", "MaxAttempts", "BackoffRate", "MaxDelaySeconds", "JitterStrategy", "Comment"}, nil)
			r := &retrier{interval: 1, maxAttempts: 3, backoffRate: 2}
			r.errorEquals = l.errorEquals(s.name, field+".ErrorEquals", rm["ErrorEquals"])
			if slices.Contains(r.errorEquals, ErrorALL) && i != len(list)-1 {
				l.fail(s.name, field, "a retrier with States.ALL must be the last one")
			}
			if v, ok := rm["IntervalSeconds"]; ok {
				n, _ := l.integer(s.name, field+".IntervalSeconds", v, 1, maxSeconds)
				r.interval = float64(n)
			}
			if v, ok := rm["MaxAttempts"]; ok {
				r.maxAttempts, _ = l.integer(s.name, field+".MaxAttempts", v, 0, maxSeconds)
			}
			if v, ok := rm["BackoffRate"]; ok {
				f, isNum := toFloat(v)
				if !isNum || f < 1 || math.IsInf(f, 0) {
					l.fail(s.name, field+".BackoffRate", "must be a number of at least 1.0")
				}
				r.backoffRate = f
			}
			if v, ok := rm["MaxDelaySeconds"]; ok {
				n, _ := l.integer(s.name, field+".MaxDelaySeconds", v, 1, maxRetryDelayCap-1)
				r.maxDelay = float64(n)
			}
			if v, ok := rm["JitterStrategy"]; ok {
				switch v {
				case "FULL":
					r.fullJitter = true
				case "NONE":
				default:
					l.fail(s.name, field+".JitterStrategy", "must be FULL or NONE")
				}
			}
			s.retry = append(s.retry, r)
		}
	}
	if v, ok := m["Catch"]; ok {
		list, ok := v.([]any)
		if !ok {
			l.fail(s.name, "Catch", "must be an array of catchers")
		}
		for i, raw := range list {
			field := fmt.Sprintf("Catch[%d]", i)
			cm, ok := raw.(map[string]any)
			if !ok {
				l.fail(s.name, field, "must be an object")
				continue
			}
			l.fields(s.name, field, cm, []string{"ErrorEquals", "Next", "ResultPath", "Comment"}, map[string]string{"Assign": "variables (Assign)", "Output": "Output, a JSONata field"})
			c := &catcher{errorEquals: l.errorEquals(s.name, field+".ErrorEquals", cm["ErrorEquals"])}
			if slices.Contains(c.errorEquals, ErrorALL) && i != len(list)-1 {
				l.fail(s.name, field, "a catcher with States.ALL must be the last one")
			}
			c.next, _ = cm["Next"].(string)
			if c.next == "" {
				l.fail(s.name, field+".Next", "must name a state")
			}
			if v, ok := cm["ResultPath"]; ok {
				c.resultPath = l.optPathValue(s.name, field+".ResultPath", v, true)
			}
			s.catch = append(s.catch, c)
		}
	}
}

func (l *loader) wait(s *state, m map[string]any) {
	var set []string
	for _, k := range []string{"Seconds", "SecondsPath", "Timestamp", "TimestampPath"} {
		if _, ok := m[k]; ok {
			set = append(set, k)
		}
	}
	if len(set) != 1 {
		l.fail(s.name, "", "a Wait state needs exactly one of Seconds, SecondsPath, Timestamp or TimestampPath")
		return
	}
	v := m[set[0]]
	switch set[0] {
	case "Seconds":
		if n, ok := l.integer(s.name, "Seconds", v, 0, maxSeconds); ok {
			s.seconds = &n
		}
	case "SecondsPath":
		s.secondsPath = l.refPath(s.name, "SecondsPath", v)
	case "Timestamp":
		str, _ := v.(string)
		t, ok := parseTimestamp(str)
		if !ok {
			l.fail(s.name, "Timestamp", "must be an RFC 3339 timestamp such as 2016-03-14T01:59:00Z")
			return
		}
		s.timestamp = &t
	case "TimestampPath":
		s.timestampPath = l.refPath(s.name, "TimestampPath", v)
	}
}

func (l *loader) failFields(s *state, m map[string]any) {
	pair := func(lit, dyn string) (*string, *dynamicString) {
		lv, hasLit := m[lit]
		dv, hasDyn := m[dyn]
		switch {
		case hasLit && hasDyn:
			l.fail(s.name, "", "%s and %s are mutually exclusive", lit, dyn)
		case hasLit:
			str, ok := l.str(s.name, lit, lv)
			if ok {
				return &str, nil
			}
		case hasDyn:
			src, ok := l.str(s.name, dyn, dv)
			if !ok {
				return nil, nil
			}
			d := &dynamicString{src: src}
			if isIntrinsic(src) {
				c, err := parseIntrinsic(src)
				if err != nil {
					l.fail(s.name, dyn, "%v", err)
					return nil, nil
				}
				d.call = c
			} else {
				p, err := parseReferencePath(src)
				if err != nil {
					l.fail(s.name, dyn, "%v", err)
					return nil, nil
				}
				d.path = p
			}
			return nil, d
		}
		return nil, nil
	}
	s.errorName, s.errorValue = pair("Error", "ErrorPath")
	s.cause, s.causeValue = pair("Cause", "CausePath")
}

func (l *loader) mapState(s *state, m map[string]any) {
	name := s.name
	l.fields(name, "a Map state", m, append([]string{"Next", "End", "InputPath", "OutputPath", "ResultPath", "Parameters", "ItemSelector", "ResultSelector", "ItemsPath", "MaxConcurrency", "MaxConcurrencyPath", "Iterator", "ItemProcessor", "ToleratedFailurePercentage", "ToleratedFailurePercentagePath", "ToleratedFailureCount", "ToleratedFailureCountPath", "Retry", "Catch"}, common...),
		refusedWith(map[string]string{
			"ItemReader":   "Distributed Map (ItemReader)",
			"ResultWriter": "Distributed Map (ResultWriter)",
			"ItemBatcher":  "Distributed Map (ItemBatcher)",
			"Label":        "Distributed Map (Label)",
			"Items":        "Items, a JSONata field",
		}))
	l.transition(s, m)
	l.paths(s, m)
	l.retryCatch(s, m)
	s.resultSelector = l.template(name, "ResultSelector", m)
	_, hasParams := m["Parameters"]
	_, hasSelector := m["ItemSelector"]
	switch {
	case hasParams && hasSelector:
		l.fail(name, "", "Parameters (the former name of ItemSelector) and ItemSelector are mutually exclusive")
	case hasParams:
		s.itemSelector = l.template(name, "Parameters", m)
	case hasSelector:
		s.itemSelector = l.template(name, "ItemSelector", m)
	}
	if v, ok := m["ItemsPath"]; ok {
		s.itemsPath = l.refPath(name, "ItemsPath", v)
	}
	mc, hasMC := m["MaxConcurrency"]
	mcp, hasMCP := m["MaxConcurrencyPath"]
	switch {
	case hasMC && hasMCP:
		l.fail(name, "", "MaxConcurrency and MaxConcurrencyPath are mutually exclusive")
	case hasMC:
		s.maxConcurrency, _ = l.integer(name, "MaxConcurrency", mc, 0, math.MaxInt32)
	case hasMCP:
		s.maxConcurrencyPath = l.refPath(name, "MaxConcurrencyPath", mcp)
	}
	if v, ok := m["ToleratedFailureCount"]; ok {
		if n, ok := l.integer(name, "ToleratedFailureCount", v, 0, math.MaxInt32); ok {
			s.toleratedCount = &n
		}
	}
	if v, ok := m["ToleratedFailureCountPath"]; ok {
		s.toleratedCountPath = l.refPath(name, "ToleratedFailureCountPath", v)
	}
	if v, ok := m["ToleratedFailurePercentage"]; ok {
		f, isNum := toFloat(v)
		if !isNum || f < 0 || f > 100 {
			l.fail(name, "ToleratedFailurePercentage", "must be a number from 0 to 100")
		}
		s.toleratedPercentage = &f
	}
	if v, ok := m["ToleratedFailurePercentagePath"]; ok {
		s.toleratedPercentagePath = l.refPath(name, "ToleratedFailurePercentagePath", v)
	}
	if s.toleratedCount != nil && s.toleratedCountPath != nil {
		l.fail(name, "", "ToleratedFailureCount and ToleratedFailureCountPath are mutually exclusive")
	}
	if s.toleratedPercentage != nil && s.toleratedPercentagePath != nil {
		l.fail(name, "", "ToleratedFailurePercentage and ToleratedFailurePercentagePath are mutually exclusive")
	}
	s.hasToleratedFailureConfig = s.toleratedCount != nil || s.toleratedCountPath != nil || s.toleratedPercentage != nil || s.toleratedPercentagePath != nil

	ip, hasIP := m["ItemProcessor"]
	it, hasIt := m["Iterator"]
	var proc map[string]any
	switch {
	case hasIP && hasIt:
		l.fail(name, "", "Iterator (the former name of ItemProcessor) and ItemProcessor are mutually exclusive")
		return
	case hasIP:
		proc, _ = ip.(map[string]any)
	case hasIt:
		proc, _ = it.(map[string]any)
	}
	if proc == nil {
		l.fail(name, "ItemProcessor", "a Map state needs an ItemProcessor object")
		return
	}
	l.fields(name, "ItemProcessor", proc, []string{"StartAt", "States", "Comment", "ProcessorConfig", "QueryLanguage"}, nil)
	l.queryLanguage(name, proc)
	if pc, ok := proc["ProcessorConfig"]; ok {
		pcm, ok := pc.(map[string]any)
		if !ok {
			l.fail(name, "ItemProcessor.ProcessorConfig", "must be an object")
		}
		switch pcm["Mode"] {
		case "INLINE", nil:
		case "DISTRIBUTED":
			l.unsupported(name, "ItemProcessor.ProcessorConfig.Mode", "Distributed Map (Mode DISTRIBUTED)")
		default:
			l.fail(name, "ItemProcessor.ProcessorConfig.Mode", "must be INLINE or DISTRIBUTED")
		}
		for _, k := range sortedKeys(pcm) {
			if k != "Mode" && k != "ExecutionType" {
				l.fail(name, "ItemProcessor.ProcessorConfig."+k, "is not a valid field")
			}
		}
		if _, ok := pcm["ExecutionType"]; ok && pcm["Mode"] != "DISTRIBUTED" {
			l.fail(name, "ItemProcessor.ProcessorConfig.ExecutionType", "is only valid in DISTRIBUTED mode")
		}
	}
	s.processor = l.program(name, proc)
}
