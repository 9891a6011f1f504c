package config

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Problem is one thing wrong with a configuration.
type Problem struct {
	File string
	// Line is 1-based. A key that is not in the file (a default that
	// clashes with a value, a required key) gets the line of its table; 0
	// when that is not in the file either.
	Line int
	// Key is the dotted key path ("provider.local.max_processes"); "" for a
	// syntax error.
	Key string
	// Message is a full sentence that names the key where there is one. It
	// never contains a secret's value.
	Message string
}

func (p Problem) String() string {
	if p.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Message)
	}
	return fmt.Sprintf("%s: %s", p.File, p.Message)
}

// Error is every problem found in one configuration, so that a user fixes
// them in one pass instead of one per run.
type Error struct {
	Problems []Problem
}

// Error lists the problems one per line, in the order of the file.
func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// report collects problems while a file is decoded and checked.
type report struct {
	file     string
	lines    map[string]int // key path -> line, for keys present in the file
	problems []Problem
}

// line returns the line of key or, for a key absent from the file (a
// default), of the nearest table around it that is there; 0 when there is
// none. It does not look past an array element, whose line may be unknown,
// nor through quoted keys, which only come from the file and are present.
func (r *report) line(key string) int {
	for k := key; k != ""; {
		if l := r.lines[k]; l > 0 {
			return l
		}
		i := strings.LastIndexByte(k, '.')
		if i < 0 || strings.HasSuffix(k, "]") || strings.Contains(k, `"`) {
			return 0
		}
		k = k[:i]
	}
	return 0
}

// add records a problem on key at its line.
func (r *report) add(key, format string, args ...any) {
	r.addAt(r.line(key), key, format, args...)
}

// addAt records a problem on key at an explicit line, for keys that are
// absent from the file but belong to a table that is there.
func (r *report) addAt(line int, key, format string, args ...any) {
	r.problems = append(r.problems, Problem{File: r.file, Line: line, Key: key, Message: fmt.Sprintf(format, args...)})
}

// err returns nil or an *Error with the problems in file order; problems
// without a line come last.
func (r *report) err() error {
	if len(r.problems) == 0 {
		return nil
	}
	ps := slices.Clone(r.problems)
	slices.SortStableFunc(ps, func(a, b Problem) int {
		if (a.Line == 0) != (b.Line == 0) {
			if a.Line == 0 {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.Line, b.Line)
	})
	return &Error{Problems: ps}
}
