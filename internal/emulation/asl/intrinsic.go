package asl

import (
	"crypto/md5"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	mrand "math/rand/v2"
	"strings"
	"unicode/utf8"
)

// intrinsic is a parsed call such as States.Format('x {}', $.a).
type intrinsic struct {
	name string
	args []intrinsicArg
}

// intrinsicArg is one argument: a literal, a path or a nested call.
type intrinsicArg struct {
	literal any
	// parts holds a string literal split at its unescaped "{}" placeholders,
	// so States.Format can tell them from escaped braces.
	parts []string
	path  *path
	call  *intrinsic
}

type intrinsicSpec struct {
	min, max int // max < 0: variadic
	eval     func(args []any, parts [][]string) (any, error)
}

var intrinsics = map[string]intrinsicSpec{
	"States.Format":         {1, -1, fnFormat},
	"States.StringToJson":   {1, 1, fnStringToJSON},
	"States.JsonToString":   {1, 1, fnJSONToString},
	"States.Array":          {0, -1, func(a []any, _ [][]string) (any, error) { return append([]any{}, a...), nil }},
	"States.ArrayPartition": {2, 2, fnArrayPartition},
	"States.ArrayContains":  {2, 2, fnArrayContains},
	"States.ArrayRange":     {3, 3, fnArrayRange},
	"States.ArrayGetItem":   {2, 2, fnArrayGetItem},
	"States.ArrayLength":    {1, 1, fnArrayLength},
	"States.ArrayUnique":    {1, 1, fnArrayUnique},
	"States.Base64Encode":   {1, 1, fnBase64Encode},
	"States.Base64Decode":   {1, 1, fnBase64Decode},
	"States.Hash":           {2, 2, fnHash},
	"States.JsonMerge":      {3, 3, fnJSONMerge},
	"States.MathRandom":     {2, 3, fnMathRandom},
	"States.MathAdd":        {2, 2, fnMathAdd},
	"States.StringSplit":    {2, 2, fnStringSplit},
	"States.UUID":           {0, 0, fnUUID},
}

func isIntrinsic(s string) bool { return strings.HasPrefix(s, "States.") }

func parseIntrinsic(src string) (*intrinsic, error) {
	p := &intrinsicParser{s: src}
	call, err := p.call()
	if err != nil {
		return nil, fmt.Errorf("intrinsic function %q: %w", src, err)
	}
	p.skipSpace()
	if p.i != len(p.s) {
		return nil, fmt.Errorf("intrinsic function %q: unexpected %q after the call", src, p.s[p.i:])
	}
	return call, nil
}

type intrinsicParser struct {
	s string
	i int
}

func (p *intrinsicParser) skipSpace() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == '\n') {
		p.i++
	}
}

func (p *intrinsicParser) call() (*intrinsic, error) {
	open := strings.IndexByte(p.s[p.i:], '(')
	if open < 0 {
		return nil, errors.New("missing '('")
	}
	name := strings.TrimSpace(p.s[p.i : p.i+open])
	spec, ok := intrinsics[name]
	if !ok {
		return nil, fmt.Errorf("unknown function %q", name)
	}
	p.i += open + 1
	c := &intrinsic{name: name}
	p.skipSpace()
	if p.i < len(p.s) && p.s[p.i] == ')' {
		p.i++
	} else {
		for {
			p.skipSpace()
			arg, err := p.arg()
			if err != nil {
				return nil, err
			}
			c.args = append(c.args, arg)
			p.skipSpace()
			if p.i >= len(p.s) {
				return nil, errors.New("missing ')'")
			}
			if p.s[p.i] == ')' {
				p.i++
				break
			}
			if p.s[p.i] != ',' {
				return nil, fmt.Errorf("expected ',' or ')' at %q", p.s[p.i:])
			}
			p.i++
		}
	}
	if len(c.args) < spec.min || (spec.max >= 0 && len(c.args) > spec.max) {
		return nil, fmt.Errorf("%s takes %s, got %d", name, arity(spec), len(c.args))
	}
	if name == "States.Format" && c.args[0].parts != nil && len(c.args[0].parts)-1 != len(c.args)-1 {
		return nil, fmt.Errorf("States.Format has %d placeholders and %d values", len(c.args[0].parts)-1, len(c.args)-1)
	}
	return c, nil
}

func arity(s intrinsicSpec) string {
	switch {
	case s.max < 0:
		return fmt.Sprintf("at least %d arguments", s.min)
	case s.min == s.max:
		return fmt.Sprintf("%d arguments", s.min)
	default:
		return fmt.Sprintf("%d to %d arguments", s.min, s.max)
	}
}

func (p *intrinsicParser) arg() (intrinsicArg, error) {
	if p.i >= len(p.s) {
		return intrinsicArg{}, errors.New("missing argument")
	}
	rest := p.s[p.i:]
	switch {
	case rest[0] == '\'':
		return p.stringLiteral()
	case rest[0] == '$':
		start := p.i
		depth, quote := 0, byte(0)
		for ; p.i < len(p.s); p.i++ {
			c := p.s[p.i]
			if quote != 0 {
				if c == quote {
					quote = 0
				}
				continue
			}
			if c == '\'' || c == '"' {
				quote = c
			} else if c == '[' || c == '(' {
				depth++
			} else if c == ']' || c == ')' {
				if depth == 0 {
					break
				}
				depth--
			} else if c == ',' && depth == 0 {
				break
			}
		}
		src := strings.TrimSpace(p.s[start:p.i])
		pth, err := parsePath(src)
		if err != nil {
			return intrinsicArg{}, err
		}
		return intrinsicArg{path: pth}, nil
	case strings.HasPrefix(rest, "States."):
		c, err := p.call()
		if err != nil {
			return intrinsicArg{}, err
		}
		return intrinsicArg{call: c}, nil
	}
	end := strings.IndexAny(rest, ",) \t\n")
	if end < 0 {
		end = len(rest)
	}
	tok := rest[:end]
	p.i += end
	switch tok {
	case "true":
		return intrinsicArg{literal: true}, nil
	case "false":
		return intrinsicArg{literal: false}, nil
	case "null":
		return intrinsicArg{literal: nil}, nil
	}
	n, err := numberValue(tok)
	if err != nil || tok == "" || !strings.ContainsAny(tok[:1], "-0123456789") {
		return intrinsicArg{}, fmt.Errorf("invalid argument %q", tok)
	}
	return intrinsicArg{literal: n}, nil
}

// stringLiteral reads a quoted string; \' \{ \} and \\ are the escapes the
// language defines, and a lone backslash is an error.
func (p *intrinsicParser) stringLiteral() (intrinsicArg, error) {
	p.i++ // opening quote
	var cur strings.Builder
	var parts []string
	var value strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '\\':
			if p.i+1 >= len(p.s) || !strings.ContainsRune(`'{}\`, rune(p.s[p.i+1])) {
				return intrinsicArg{}, errors.New("open escape '\\' in a string literal")
			}
			cur.WriteByte(p.s[p.i+1])
			value.WriteByte(p.s[p.i+1])
			p.i += 2
		case c == '\'':
			p.i++
			parts = append(parts, cur.String())
			return intrinsicArg{literal: value.String(), parts: parts}, nil
		case c == '{' && p.i+1 < len(p.s) && p.s[p.i+1] == '}':
			parts = append(parts, cur.String())
			cur.Reset()
			value.WriteString("{}")
			p.i += 2
		default:
			cur.WriteByte(c)
			value.WriteByte(c)
			p.i++
		}
	}
	return intrinsicArg{}, errors.New("unterminated string literal")
}

// evalIntrinsic runs a call against the state's data and context object.
func evalIntrinsic(c *intrinsic, data, contextObject any) (any, error) {
	args := make([]any, len(c.args))
	parts := make([][]string, len(c.args))
	for i, a := range c.args {
		switch {
		case a.call != nil:
			v, err := evalIntrinsic(a.call, data, contextObject)
			if err != nil {
				return nil, err
			}
			args[i] = v
		case a.path != nil:
			v, ok := a.path.get(data, contextObject)
			if !ok {
				src := data
				if a.path.context {
					src = contextObject
				}
				return nil, &pathArgError{path: a.path.src, input: src}
			}
			args[i] = v
		default:
			args[i] = a.literal
			parts[i] = a.parts
		}
	}
	v, err := intrinsics[c.name].eval(args, parts)
	if err != nil {
		var pe *pathArgError
		if errors.As(err, &pe) {
			return nil, err
		}
		return nil, fmt.Errorf("%s: %w", c.name, err)
	}
	return v, nil
}

// pathArgError is a path argument that selects nothing.
type pathArgError struct {
	path  string
	input any
}

func (e *pathArgError) Error() string {
	return fmt.Sprintf("The JsonPath argument for the field '%s' could not be found in the input '%s'", e.path, mustJSON(e.input))
}

func fnFormat(args []any, parts [][]string) (any, error) {
	segments := parts[0]
	if segments == nil {
		s, ok := args[0].(string)
		if !ok {
			return nil, errors.New("the format template must be a string")
		}
		segments = strings.Split(s, "{}")
	}
	if len(segments)-1 != len(args)-1 {
		return nil, fmt.Errorf("%d placeholders and %d values", len(segments)-1, len(args)-1)
	}
	var b strings.Builder
	for i, seg := range segments {
		b.WriteString(seg)
		if i+1 < len(segments) {
			b.WriteString(formatValue(args[i+1]))
		}
	}
	return b.String(), nil
}

// formatValue renders a value the way the service's States.Format does:
// strings verbatim, scalars as JSON, containers in Java's toString style.
func formatValue(v any) string {
	switch t := v.(type) {
	case string:
		return t
	case []any:
		items := make([]string, len(t))
		for i, e := range t {
			items[i] = formatValue(e)
		}
		return "[" + strings.Join(items, ", ") + "]"
	case map[string]any:
		items := make([]string, 0, len(t))
		for _, k := range sortedKeys(t) {
			items = append(items, k+"="+formatValue(t[k]))
		}
		return "{" + strings.Join(items, ", ") + "}"
	default:
		return mustJSON(v)
	}
}

func fnStringToJSON(args []any, _ [][]string) (any, error) {
	s, ok := args[0].(string)
	if !ok {
		return nil, errors.New("argument must be a string")
	}
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	v, err := decodeJSON([]byte(s))
	if err != nil {
		return nil, fmt.Errorf("argument is not JSON text: %w", err)
	}
	return v, nil
}

func fnJSONToString(args []any, _ [][]string) (any, error) {
	b, err := encodeJSON(args[0])
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

func arrayArg(v any) ([]any, error) {
	a, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("expected an array, got %s", mustJSON(v))
	}
	return a, nil
}

func intArg(v any, what string) (int64, error) {
	n, ok := toInteger(v)
	if !ok {
		return 0, fmt.Errorf("%s must be an integer, got %s", what, mustJSON(v))
	}
	return n, nil
}

func fnArrayPartition(args []any, _ [][]string) (any, error) {
	arr, err := arrayArg(args[0])
	if err != nil {
		return nil, err
	}
	size, err := intArg(args[1], "the chunk size")
	if err != nil {
		return nil, err
	}
	if size <= 0 {
		return nil, fmt.Errorf("the chunk size must be positive, got %d", size)
	}
	out := []any{}
	for i := 0; i < len(arr); i += int(size) {
		end := min(i+int(size), len(arr))
		out = append(out, append([]any{}, arr[i:end]...))
	}
	return out, nil
}

func fnArrayContains(args []any, _ [][]string) (any, error) {
	arr, err := arrayArg(args[0])
	if err != nil {
		return nil, err
	}
	for _, e := range arr {
		if jsonEqual(e, args[1]) {
			return true, nil
		}
	}
	return false, nil
}

const maxIntrinsicArray = 1000

func fnArrayRange(args []any, _ [][]string) (any, error) {
	var n [3]int64
	for i, what := range []string{"start", "end", "step"} {
		v, err := intArg(args[i], what)
		if err != nil {
			return nil, err
		}
		n[i] = v
	}
	start, end, step := n[0], n[1], n[2]
	if step == 0 {
		return nil, errors.New("step must not be 0")
	}
	out := []any{}
	for v := start; (step > 0 && v <= end) || (step < 0 && v >= end); v += step {
		if len(out) == maxIntrinsicArray {
			return nil, fmt.Errorf("the range has more than %d items", maxIntrinsicArray)
		}
		out = append(out, v)
	}
	return out, nil
}

func fnArrayGetItem(args []any, _ [][]string) (any, error) {
	arr, err := arrayArg(args[0])
	if err != nil {
		return nil, err
	}
	i, err := intArg(args[1], "the index")
	if err != nil {
		return nil, err
	}
	if i < 0 || i >= int64(len(arr)) {
		return nil, fmt.Errorf("index %d is out of bounds for an array of %d items", i, len(arr))
	}
	return arr[i], nil
}

func fnArrayLength(args []any, _ [][]string) (any, error) {
	arr, err := arrayArg(args[0])
	if err != nil {
		return nil, err
	}
	return int64(len(arr)), nil
}

func fnArrayUnique(args []any, _ [][]string) (any, error) {
	arr, err := arrayArg(args[0])
	if err != nil {
		return nil, err
	}
	out := []any{}
	for _, e := range arr {
		dup := false
		for _, o := range out {
			if jsonEqual(e, o) {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, e)
		}
	}
	return out, nil
}

const maxIntrinsicString = 10000

func stringArg(v any, what string) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s must be a string, got %s", what, mustJSON(v))
	}
	if utf8.RuneCountInString(s) > maxIntrinsicString {
		return "", fmt.Errorf("%s is longer than %d characters", what, maxIntrinsicString)
	}
	return s, nil
}

func fnBase64Encode(args []any, _ [][]string) (any, error) {
	s, err := stringArg(args[0], "the input")
	if err != nil {
		return nil, err
	}
	return base64.StdEncoding.EncodeToString([]byte(s)), nil
}

func fnBase64Decode(args []any, _ [][]string) (any, error) {
	s, err := stringArg(args[0], "the input")
	if err != nil {
		return nil, err
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("the input is not base64: %w", err)
	}
	if !utf8.Valid(b) {
		return nil, errors.New("the decoded data is not UTF-8 text")
	}
	return string(b), nil
}

func fnHash(args []any, _ [][]string) (any, error) {
	s, err := stringArg(args[0], "the data")
	if err != nil {
		return nil, err
	}
	alg, _ := args[1].(string)
	var h hash.Hash
	switch alg {
	case "MD5":
		h = md5.New()
	case "SHA-1":
		h = sha1.New()
	case "SHA-256":
		h = sha256.New()
	case "SHA-384":
		h = sha512.New384()
	case "SHA-512":
		h = sha512.New()
	default:
		return nil, fmt.Errorf("unknown algorithm %s (use MD5, SHA-1, SHA-256, SHA-384 or SHA-512)", mustJSON(args[1]))
	}
	h.Write([]byte(s))
	return hex.EncodeToString(h.Sum(nil)), nil
}

func fnJSONMerge(args []any, _ [][]string) (any, error) {
	a, ok1 := args[0].(map[string]any)
	b, ok2 := args[1].(map[string]any)
	if !ok1 || !ok2 {
		return nil, errors.New("both values to merge must be objects")
	}
	if deep, ok := args[2].(bool); !ok || deep {
		return nil, errors.New("only the shallow merge is supported: the third argument must be false")
	}
	out := make(map[string]any, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out, nil
}

// fnMathRandom returns an integer from start (inclusive) to end (exclusive);
// a seed makes the result repeatable.
func fnMathRandom(args []any, _ [][]string) (any, error) {
	start, err := intArg(args[0], "start")
	if err != nil {
		return nil, err
	}
	end, err := intArg(args[1], "end")
	if err != nil {
		return nil, err
	}
	if end <= start {
		return nil, fmt.Errorf("end (%d) must be greater than start (%d)", end, start)
	}
	span := uint64(end - start)
	if len(args) == 3 {
		seed, err := intArg(args[2], "seed")
		if err != nil {
			return nil, err
		}
		r := mrand.New(mrand.NewPCG(uint64(seed), uint64(seed)))
		return start + int64(r.Uint64N(span)), nil
	}
	return start + int64(mrand.Uint64N(span)), nil
}

func fnMathAdd(args []any, _ [][]string) (any, error) {
	a, err := intArg(args[0], "the first value")
	if err != nil {
		return nil, err
	}
	b, err := intArg(args[1], "the second value")
	if err != nil {
		return nil, err
	}
	return a + b, nil
}

func fnStringSplit(args []any, _ [][]string) (any, error) {
	s, ok := args[0].(string)
	if !ok {
		return nil, fmt.Errorf("the input must be a string, got %s", mustJSON(args[0]))
	}
	delims, ok := args[1].(string)
	if !ok {
		return nil, fmt.Errorf("the delimiters must be a string, got %s", mustJSON(args[1]))
	}
	out := []any{}
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return strings.ContainsRune(delims, r) }) {
		out = append(out, f)
	}
	return out, nil
}

func fnUUID(_ []any, _ [][]string) (any, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:], nil
}
