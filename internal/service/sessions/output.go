package sessions

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"
)

// Limits of what a run returns. A run's record holds all of them, so
// together they stay far below DynamoDB's 400 KB item limit.
const (
	MaxCodeBytes   = 256 << 10
	MaxOutputBytes = 64 << 10 // each of stdout and stderr
	MaxResultBytes = 64 << 10
	MaxErrorBytes  = 16 << 10
)

// redactor replaces the values of the dependency secrets wherever a run's
// output, result or error, or an error of ours, could carry them.
type redactor struct {
	// pairs are (value, replacement), longest value first so that a
	// secret containing another is replaced whole.
	pairs  []string
	maxLen int
}

func newRedactor(secrets map[string]string) *redactor {
	type pair struct{ value, name string }
	var ps []pair
	for name, v := range secrets {
		if v == "" {
			continue
		}
		ps = append(ps, pair{v, name})
		// In a JSON result the value appears escaped.
		b, _ := json.Marshal(v)
		if esc := string(b[1 : len(b)-1]); esc != v {
			ps = append(ps, pair{esc, name})
		}
	}
	slices.SortFunc(ps, func(a, b pair) int { return len(b.value) - len(a.value) })
	r := &redactor{}
	for _, p := range ps {
		r.pairs = append(r.pairs, p.value, "[REDACTED:"+p.name+"]")
		r.maxLen = max(r.maxLen, len(p.value))
	}
	return r
}

func (r *redactor) String(s string) string {
	if len(r.pairs) == 0 {
		return s
	}
	return strings.NewReplacer(r.pairs...).Replace(s)
}

// JSON redacts a JSON text; should the replacement break it (a secret that
// was a number), the redacted text becomes a JSON string.
func (r *redactor) JSON(raw json.RawMessage) json.RawMessage {
	if len(r.pairs) == 0 || raw == nil {
		return raw
	}
	s := r.String(string(raw))
	if s == string(raw) {
		return raw
	}
	if json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	b, _ := json.Marshal(s)
	return b
}

// Error redacts an error for a client or a log line.
func (r *redactor) Error(err error) string {
	if err == nil {
		return ""
	}
	return r.String(err.Error())
}

// redactedError shows its cause's text with the secrets replaced, and
// keeps the cause for errors.Is and errors.As.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// hide wraps an error from the provider, whose text may quote what it was
// given, before it goes into an *Error that callers log.
func (s *Service) hide(err error) error {
	if err == nil || len(s.redact.pairs) == 0 {
		return err
	}
	return &redactedError{msg: s.redact.Error(err), err: err}
}

// hideBuild is hide for what a dependency install said, which may also
// quote build_env's credentials.
func (s *Service) hideBuild(err error) error {
	if err == nil || len(s.buildRedact.pairs) == 0 {
		return err
	}
	return &redactedError{msg: s.buildRedact.Error(err), err: err}
}

// buildSecrets are the secrets plus what of build_env is secret: a value
// with a URL's user information (a proxy's "http://user:password@host"),
// whole and its password alone, since tools print proxy URLs their own way.
// Other values (a CA bundle's path, a NO_PROXY list) help read an error and
// are shown.
func buildSecrets(secrets, buildEnv map[string]string) map[string]string {
	out := maps.Clone(secrets)
	if out == nil {
		out = map[string]string{}
	}
	for name, v := range buildEnv {
		u, err := url.Parse(v)
		if err != nil || u.User == nil {
			continue
		}
		out[name] = v
		if pw, ok := u.User.Password(); ok && pw != "" {
			out[name+"_PASSWORD"] = pw
			out[name+"_USERINFO"] = u.User.String()
		}
	}
	return out
}

// capture keeps the beginning of a stream up to keep bytes and, when tail
// is set, its last tail bytes, where a run's result line is.
type capture struct {
	keep  int
	tail  int
	head  []byte
	end   []byte
	total int64
}

func (c *capture) Write(p []byte) (int, error) {
	c.total += int64(len(p))
	if room := c.keep - len(c.head); room > 0 {
		c.head = append(c.head, p[:min(room, len(p))]...)
	}
	if c.tail > 0 {
		c.end = append(c.end, p...)
		if len(c.end) > 2*c.tail {
			c.end = append(c.end[:0], c.end[len(c.end)-c.tail:]...)
		}
	}
	return len(p), nil
}

// whole returns everything written, if it was all kept.
func (c *capture) whole() ([]byte, bool) {
	if c.total <= int64(len(c.head)) {
		return c.head, true
	}
	if c.tail > 0 && c.total <= int64(len(c.end)) {
		return c.end, true
	}
	return nil, false
}

func (c *capture) last() []byte {
	if len(c.end) > c.tail {
		return c.end[len(c.end)-c.tail:]
	}
	return c.end
}

// text turns captured output into what a client sees: redacted, cut to
// MaxOutputBytes on a character boundary. Secrets are replaced before the
// cut, with room kept for the longest, so a cut never leaves half of one.
func text(b []byte, total int64, r *redactor) (string, bool) {
	s := r.String(string(b))
	truncated := total > int64(len(b))
	if len(s) > MaxOutputBytes {
		s, truncated = cutAt(s, MaxOutputBytes), true
	}
	if truncated {
		s += fmt.Sprintf("\n[sandstep: output truncated; %d bytes in all]", total)
	}
	return strings.ToValidUTF8(s, "\uFFFD"), truncated
}

// cutAt returns at most the first n bytes of s, ending on a character
// boundary.
func cutAt(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// verdict is the runner's result line.
type verdict struct {
	OK        bool            `json:"ok"`
	Error     *string         `json:"error"`
	Truncated bool            `json:"truncated"`
	Result    json.RawMessage `json:"result"`
	// Interpreter is set by a stateful run's interpreter.
	Interpreter *Interpreter `json:"interpreter"`
}

// splitVerdict finds the runner's result line at the end of stdout and
// returns the output before it. Without one (the code exited the process,
// or the run timed out), found is false and out is stdout as it is.
func splitVerdict(stdout []byte, mark string) (out []byte, v verdict, found bool) {
	i := bytes.LastIndex(stdout, []byte(mark))
	if i < 0 {
		return stdout, v, false
	}
	if err := json.Unmarshal(bytes.TrimSpace(stdout[i+len(mark):]), &v); err != nil {
		return stdout, v, false
	}
	out = stdout[:i]
	// The runner starts its line with a newline of its own.
	out = bytes.TrimSuffix(out, []byte("\n"))
	return out, v, true
}
