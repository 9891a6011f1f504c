package asl

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// choiceRule is one Choice rule or a nested condition inside And, Or or Not.
type choiceRule struct {
	next string

	and, or []*choiceRule
	not     *choiceRule

	variable  *path
	op        string // comparison operator without a "Path" suffix, e.g. "StringEquals"
	value     any    // literal operand
	valuePath *path  // operand of a ...Path operator
	pattern   []globPart
	when      time.Time // parsed literal of a Timestamp operator
}

type opFamily int

const (
	famString opFamily = iota
	famNumeric
	famBoolean
	famTimestamp
	famIs
	famMatches
)

var comparisonOps = map[string]opFamily{
	"StringEquals": famString, "StringLessThan": famString, "StringGreaterThan": famString,
	"StringLessThanEquals": famString, "StringGreaterThanEquals": famString,
	"StringMatches": famMatches,
	"NumericEquals": famNumeric, "NumericLessThan": famNumeric, "NumericGreaterThan": famNumeric,
	"NumericLessThanEquals": famNumeric, "NumericGreaterThanEquals": famNumeric,
	"BooleanEquals":   famBoolean,
	"TimestampEquals": famTimestamp, "TimestampLessThan": famTimestamp, "TimestampGreaterThan": famTimestamp,
	"TimestampLessThanEquals": famTimestamp, "TimestampGreaterThanEquals": famTimestamp,
	"IsNull": famIs, "IsPresent": famIs, "IsNumeric": famIs, "IsString": famIs, "IsBoolean": famIs, "IsTimestamp": famIs,
}

// parseChoiceRule compiles a rule; top says whether it is a top-level rule,
// which must name its Next state, or a nested one, which must not.
func parseChoiceRule(raw any, top bool) (*choiceRule, error) {
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, errors.New("a choice rule must be an object")
	}
	r := &choiceRule{}
	var ops []string
	for k, v := range m {
		switch k {
		case "Comment":
			if _, ok := v.(string); !ok {
				return nil, errors.New("Comment must be a string")
			}
		case "Next":
			s, ok := v.(string)
			if !ok || s == "" {
				return nil, errors.New("Next must be a state name")
			}
			if !top {
				return nil, errors.New("a rule inside And, Or or Not must not have Next")
			}
			r.next = s
		case "Variable":
			s, ok := v.(string)
			if !ok {
				return nil, errors.New("Variable must be a path")
			}
			p, err := parseReferencePath(s)
			if err != nil {
				return nil, fmt.Errorf("Variable: %w", err)
			}
			r.variable = p
		case "And", "Or":
			list, ok := v.([]any)
			if !ok || len(list) == 0 {
				return nil, fmt.Errorf("%s must be a non-empty array of rules", k)
			}
			var rules []*choiceRule
			for i, e := range list {
				sub, err := parseChoiceRule(e, false)
				if err != nil {
					return nil, fmt.Errorf("%s[%d]: %w", k, i, err)
				}
				rules = append(rules, sub)
			}
			if k == "And" {
				r.and = rules
			} else {
				r.or = rules
			}
			ops = append(ops, k)
		case "Not":
			sub, err := parseChoiceRule(v, false)
			if err != nil {
				return nil, fmt.Errorf("Not: %w", err)
			}
			r.not = sub
			ops = append(ops, k)
		default:
			if err := r.setComparison(k, v); err != nil {
				return nil, err
			}
			ops = append(ops, k)
		}
	}
	switch {
	case len(ops) == 0:
		return nil, errors.New("a choice rule needs a comparison operator, And, Or or Not")
	case len(ops) > 1:
		return nil, fmt.Errorf("a choice rule has exactly one operator, found %s", strings.Join(ops, ", "))
	case top && r.next == "":
		return nil, errors.New("a top-level choice rule must have Next")
	case r.op != "" && r.variable == nil:
		return nil, fmt.Errorf("%s needs a Variable", ops[0])
	case r.op == "" && r.variable != nil:
		return nil, errors.New("Variable is only allowed with a comparison operator")
	}
	return r, nil
}

func (r *choiceRule) setComparison(key string, v any) error {
	op, isPath := strings.CutSuffix(key, "Path")
	fam, known := comparisonOps[op]
	if !known || (isPath && (fam == famIs || fam == famMatches)) {
		return fmt.Errorf("%q is not a choice rule field", key)
	}
	r.op = op
	if isPath {
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s must be a path", key)
		}
		p, err := parseReferencePath(s)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		r.valuePath = p
		return nil
	}
	r.value = v
	switch fam {
	case famString:
		if _, ok := v.(string); !ok {
			return fmt.Errorf("%s needs a string", key)
		}
	case famMatches:
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s needs a string", key)
		}
		pat, err := compileGlob(s)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		r.pattern = pat
	case famNumeric:
		if !isNumber(v) {
			return fmt.Errorf("%s needs a number", key)
		}
	case famBoolean, famIs:
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%s needs true or false", key)
		}
	case famTimestamp:
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s needs a timestamp string", key)
		}
		t, ok := parseTimestamp(s)
		if !ok {
			return fmt.Errorf("%s: %q is not an RFC 3339 timestamp", key, s)
		}
		r.when = t
	}
	return nil
}

// eval decides the rule for the Choice state's effective input. A Variable
// that selects nothing is a States.Runtime error except for IsPresent; a
// value of the wrong type simply does not match.
func (r *choiceRule) eval(data, contextObject any) (bool, *failure) {
	switch {
	case r.and != nil:
		for _, sub := range r.and {
			ok, f := sub.eval(data, contextObject)
			if f != nil || !ok {
				return false, f
			}
		}
		return true, nil
	case r.or != nil:
		for _, sub := range r.or {
			ok, f := sub.eval(data, contextObject)
			if f != nil || ok {
				return ok, f
			}
		}
		return false, nil
	case r.not != nil:
		ok, f := r.not.eval(data, contextObject)
		return !ok && f == nil, f
	}
	v, found := r.variable.get(data, contextObject)
	if r.op == "IsPresent" {
		return found == r.value.(bool), nil
	}
	if !found {
		return false, runtimeFailure("Invalid path '%s': The choice state's condition path references an invalid value.", r.variable.src)
	}
	operand := r.value
	when := r.when
	if r.valuePath != nil {
		var ok bool
		if operand, ok = r.valuePath.get(data, contextObject); !ok {
			return false, runtimeFailure("Invalid path '%s': The choice state's condition path references an invalid value.", r.valuePath.src)
		}
		if comparisonOps[r.op] == famTimestamp {
			s, _ := operand.(string)
			if when, ok = parseTimestamp(s); !ok {
				return false, nil
			}
		}
	}
	return compare(r.op, v, operand, when, r.pattern), nil
}

func compare(op string, v, operand any, when time.Time, pattern []globPart) bool {
	switch comparisonOps[op] {
	case famIs:
		want := operand.(bool)
		var is bool
		switch op {
		case "IsNull":
			is = v == nil
		case "IsNumeric":
			is = isNumber(v)
		case "IsString":
			_, is = v.(string)
		case "IsBoolean":
			_, is = v.(bool)
		case "IsTimestamp":
			s, ok := v.(string)
			_, is = parseTimestamp(s)
			is = is && ok
		}
		return is == want
	case famMatches:
		s, ok := v.(string)
		return ok && matchGlob(pattern, s)
	case famBoolean:
		a, ok1 := v.(bool)
		b, ok2 := operand.(bool)
		return ok1 && ok2 && a == b
	case famString:
		a, ok1 := v.(string)
		b, ok2 := operand.(string)
		return ok1 && ok2 && ordered(op, strings.Compare(a, b))
	case famNumeric:
		if !isNumber(v) || !isNumber(operand) {
			return false
		}
		return ordered(op, compareNumbers(v, operand))
	case famTimestamp:
		s, ok := v.(string)
		if !ok {
			return false
		}
		t, ok := parseTimestamp(s)
		return ok && ordered(op, t.Compare(when))
	}
	return false
}

func compareNumbers(a, b any) int {
	if x, ok := a.(int64); ok {
		if y, ok := b.(int64); ok {
			switch {
			case x < y:
				return -1
			case x > y:
				return 1
			}
			return 0
		}
	}
	x, _ := toFloat(a)
	y, _ := toFloat(b)
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

func ordered(op string, c int) bool {
	switch {
	case strings.HasSuffix(op, "LessThanEquals"):
		return c <= 0
	case strings.HasSuffix(op, "GreaterThanEquals"):
		return c >= 0
	case strings.HasSuffix(op, "LessThan"):
		return c < 0
	case strings.HasSuffix(op, "GreaterThan"):
		return c > 0
	default: // ...Equals
		return c == 0
	}
}

// parseTimestamp accepts the RFC 3339 profile the language uses: an
// uppercase T, seconds, optional fraction and a Z or numeric offset.
func parseTimestamp(s string) (time.Time, bool) {
	if len(s) < 20 || s[10] != 'T' {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}

// globPart is a literal run or, when star is set, a '*' wildcard.
type globPart struct {
	lit  string
	star bool
}

// compileGlob reads a StringMatches pattern: '*' matches any run of
// characters, "\*" is a literal star and "\\" a literal backslash.
func compileGlob(s string) ([]globPart, error) {
	var parts []globPart
	var cur strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '\\':
			if i+1 >= len(s) || (s[i+1] != '*' && s[i+1] != '\\') {
				return nil, fmt.Errorf("invalid escape in pattern %q: only \\* and \\\\ are allowed", s)
			}
			i++
			cur.WriteByte(s[i])
		case '*':
			if cur.Len() > 0 {
				parts = append(parts, globPart{lit: cur.String()})
				cur.Reset()
			}
			parts = append(parts, globPart{star: true})
		default:
			cur.WriteByte(c)
		}
	}
	if cur.Len() > 0 {
		parts = append(parts, globPart{lit: cur.String()})
	}
	return parts, nil
}

func matchGlob(parts []globPart, s string) bool {
	if len(parts) == 0 {
		return s == ""
	}
	p := parts[0]
	if !p.star {
		rest, ok := strings.CutPrefix(s, p.lit)
		return ok && matchGlob(parts[1:], rest)
	}
	for len(parts) > 1 && parts[1].star {
		parts = parts[1:]
	}
	if len(parts) == 1 {
		return true
	}
	for i := 0; i <= len(s); i++ {
		if matchGlob(parts[1:], s[i:]) {
			return true
		}
	}
	return false
}
