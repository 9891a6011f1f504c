package asl

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/ohler55/ojg/jp"
)

// path is a compiled JSONPath. A path starting with "$$" reads the context
// object instead of the state's data.
//
// Definite paths (only field names and array indexes) are walked here, so a
// field that is present with the value null is told apart from a missing one
// and dot-notation names may contain characters such as '-' that Step
// Functions' JSONPath (Jayway) accepts. Anything else (wildcards, filters,
// slices, unions, deep scans) is evaluated by ojg and, as in Jayway, always
// yields a list.
type path struct {
	src     string
	context bool
	steps   []step
	expr    jp.Expr
}

type step struct {
	name    string
	index   int
	isIndex bool
}

func (p *path) definite() bool { return p.expr == nil }

func parsePath(src string) (*path, error) {
	if !strings.HasPrefix(src, "$") {
		return nil, fmt.Errorf("%q is not a JSONPath: it must start with '$'", src)
	}
	p := &path{src: src}
	body := src
	if strings.HasPrefix(src, "$$") {
		p.context = true
		body = src[1:]
	}
	if steps, ok := parseDefinite(body[1:]); ok {
		p.steps = steps
		return p, nil
	}
	x, err := jp.ParseString(body)
	if err != nil {
		return nil, fmt.Errorf("%q is not a valid JSONPath: %w", src, err)
	}
	if x.Normal() {
		for _, f := range x {
			switch t := f.(type) {
			case jp.Child:
				p.steps = append(p.steps, step{name: string(t)})
			case jp.Nth:
				p.steps = append(p.steps, step{index: int(t), isIndex: true})
			}
		}
		return p, nil
	}
	p.expr = x
	return p, nil
}

// parseReferencePath accepts only paths that identify a single node, as the
// language requires of ResultPath, ItemsPath, Variable and the *Path fields.
func parseReferencePath(src string) (*path, error) {
	p, err := parsePath(src)
	if err != nil {
		return nil, err
	}
	if !p.definite() {
		return nil, fmt.Errorf("%q is not a reference path: it may only name fields and array indexes", src)
	}
	return p, nil
}

// parseDefinite reads ".name", "['name']", "[\"name\"]" and "[n]" steps; it
// reports false for anything else so the caller can hand it to ojg.
func parseDefinite(s string) ([]step, bool) {
	var steps []step
	for len(s) > 0 {
		switch s[0] {
		case '.':
			s = s[1:]
			end := strings.IndexAny(s, ".[")
			if end < 0 {
				end = len(s)
			}
			name := s[:end]
			if name == "" || strings.ContainsAny(name, "*?@()'\"=<>!,: \t\n$") {
				return nil, false
			}
			steps = append(steps, step{name: name})
			s = s[end:]
		case '[':
			if len(s) < 3 {
				return nil, false
			}
			if q := s[1]; q == '\'' || q == '"' {
				name, rest, ok := readQuoted(s[2:], q)
				if !ok || !strings.HasPrefix(rest, "]") {
					return nil, false
				}
				steps = append(steps, step{name: name})
				s = rest[1:]
				continue
			}
			end := strings.IndexByte(s, ']')
			if end < 0 {
				return nil, false
			}
			n, err := strconv.Atoi(s[1:end])
			if err != nil {
				return nil, false
			}
			steps = append(steps, step{index: n, isIndex: true})
			s = s[end+1:]
		default:
			return nil, false
		}
	}
	return steps, true
}

func readQuoted(s string, quote byte) (string, string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && i+1 < len(s):
			i++
			b.WriteByte(s[i])
		case c == quote:
			return b.String(), s[i+1:], true
		default:
			b.WriteByte(c)
		}
	}
	return "", "", false
}

// get evaluates the path. For a definite path found reports whether the node
// exists; an indefinite path always succeeds with a (possibly empty) list.
func (p *path) get(data, contextObject any) (value any, found bool) {
	root := data
	if p.context {
		root = contextObject
	}
	if p.expr != nil {
		res := p.expr.Get(root)
		if res == nil {
			res = []any{}
		}
		return res, true
	}
	cur := root
	for _, s := range p.steps {
		if s.isIndex {
			arr, ok := cur.([]any)
			if !ok {
				return nil, false
			}
			i := s.index
			if i < 0 {
				i += len(arr)
			}
			if i < 0 || i >= len(arr) {
				return nil, false
			}
			cur = arr[i]
			continue
		}
		obj, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = obj[s.name]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// bracketString renders the path the way the service names it in errors
// ("$['a']['b']").
func (p *path) bracketString() string {
	if p.expr != nil {
		return p.expr.BracketString()
	}
	var b strings.Builder
	b.WriteString("$")
	for _, s := range p.steps {
		if s.isIndex {
			fmt.Fprintf(&b, "[%d]", s.index)
		} else {
			fmt.Fprintf(&b, "['%s']", s.name)
		}
	}
	return b.String()
}

var errResultPath = errors.New("reference path does not apply to the input")

// set returns a copy of root with value placed at the path, creating missing
// objects on the way, as ResultPath does. Only the containers along the path
// are copied; everything else is shared.
func (p *path) set(root, value any) (any, error) {
	return setSteps(root, p.steps, value)
}

func setSteps(cur any, steps []step, value any) (any, error) {
	if len(steps) == 0 {
		return value, nil
	}
	s := steps[0]
	if s.isIndex {
		arr, ok := cur.([]any)
		if !ok {
			return nil, errResultPath
		}
		i := s.index
		if i < 0 {
			i += len(arr)
		}
		if i < 0 || i >= len(arr) {
			return nil, errResultPath
		}
		child, err := setSteps(arr[i], steps[1:], value)
		if err != nil {
			return nil, err
		}
		out := make([]any, len(arr))
		copy(out, arr)
		out[i] = child
		return out, nil
	}
	var obj map[string]any
	switch t := cur.(type) {
	case map[string]any:
		obj = t
	case nil:
		// A missing or null intermediate field becomes an object.
	default:
		return nil, errResultPath
	}
	child, err := setSteps(obj[s.name], steps[1:], value)
	if err != nil {
		return nil, err
	}
	out := make(map[string]any, len(obj)+1)
	for k, v := range obj {
		out[k] = v
	}
	out[s.name] = child
	return out, nil
}
