package report

import (
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// citeGroup matches a citation: [3], [3, 5], [3-5], [3–5; 7], with an
// optional link destination, as in [3](https://...), balanced parentheses
// included (Wikipedia addresses have them).
var citeGroup = regexp.MustCompile(`\[\s*\d{1,9}(?:\s*[-–—]\s*\d{1,9})?(?:\s*[,;]\s*\d{1,9}(?:\s*[-–—]\s*\d{1,9})?)*\s*\](?:\((?:[^()\s]|\([^()\s]*\))*\))?`)

// citeAtStart is citeGroup at the start of a text.
var citeAtStart = regexp.MustCompile(`^(?:` + citeGroup.String() + `)`)

var (
	citeItem = regexp.MustCompile(`(\d+)(?:\s*[-–—]\s*(\d+))?`)
	// refDefinition is a Markdown link reference definition named by a
	// number ("[3]: https://..."). It would turn every [3] into a link to
	// whatever the model wrote, so it goes, valid or not: the sources list
	// is ours.
	refDefinition = regexp.MustCompile(`^ {0,3}\[\s*\d+\s*\]:`)
)

// maxRange bounds the expansion of [a-b]: a longer range is no citation.
const maxRange = 50

// FixCitations removes from md every citation that refers to no source in
// valid: in [1, 9] or [1-3] only the invalid numbers go ([1-3] with 2
// missing becomes [1, 3]); a group with no valid number goes whole, with
// the space before it. A citation written as a link, [3](url), becomes [3]:
// addresses are the sources list's business. Numbered reference
// definitions ("[3]: url") are dropped. Code blocks and code spans are left
// alone.
func FixCitations(md string, valid map[int]bool) string {
	out := &buffer{b: make([]byte, 0, len(md))}
	walk(md, out, refDefinition.MatchString, func(s string) { fixProse(out, s, valid) })
	return string(out.b)
}

// Cited returns the source numbers md cites (outside code and reference
// definitions), in order of first appearance.
func Cited(md string) []int {
	var (
		out  []int
		seen = map[int]bool{}
		sink buffer
	)
	walk(md, &sink, refDefinition.MatchString, func(s string) {
		for _, m := range citeGroup.FindAllStringIndex(s, -1) {
			if m[0] > 0 && s[m[0]-1] == '\\' {
				continue
			}
			for _, n := range groupNumbers(s[m[0]:m[1]]) {
				if n >= 0 && !seen[n] {
					seen[n] = true
					out = append(out, n)
				}
			}
		}
	})
	return out
}

// walk copies md to out line by line, leaving fenced code blocks and code
// spans as they are, skipping the prose lines drop selects, and handing
// the prose between code spans to prose, which writes it to out.
func walk(md string, out *buffer, drop func(string) bool, prose func(string)) {
	fence := ""
	for line := range strings.SplitAfterSeq(md, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		indent := len(line) - len(trimmed)
		if fence != "" {
			out.WriteString(line)
			if indent < 4 && strings.HasPrefix(trimmed, fence) && strings.TrimSpace(strings.TrimLeft(trimmed, fence[:1])) == "" {
				fence = ""
			}
			continue
		}
		if f := fenceOpener(trimmed); f != "" && indent < 4 {
			fence = f
			out.WriteString(line)
			continue
		}
		if drop(line) {
			continue
		}
		for line != "" {
			i := strings.IndexByte(line, '`')
			if i < 0 {
				prose(line)
				break
			}
			prose(line[:i])
			n := 1
			for i+n < len(line) && line[i+n] == '`' {
				n++
			}
			ticks := line[i : i+n]
			end := strings.Index(line[i+n:], ticks)
			if end < 0 {
				// No closing run on the line: the backticks are text.
				out.WriteString(ticks)
				line = line[i+n:]
				continue
			}
			stop := i + n + end + n
			out.WriteString(line[i:stop])
			line = line[stop:]
		}
	}
}

// fenceOpener returns the fence (``` or ~~~, or longer) a line opens, or "".
func fenceOpener(s string) string {
	for _, c := range []byte{'`', '~'} {
		n := 0
		for n < len(s) && s[n] == c {
			n++
		}
		if n >= 3 && (c == '~' || !strings.Contains(s[n:], "`")) {
			return s[:n]
		}
	}
	return ""
}

func fixProse(out *buffer, s string, valid map[int]bool) {
	last := 0
	for _, m := range citeGroup.FindAllStringIndex(s, -1) {
		start, end := m[0], m[1]
		if start > 0 && s[start-1] == '\\' {
			continue // an escaped bracket is text
		}
		out.WriteString(s[last:start])
		last = end
		group := s[start:end]
		var kept []int
		all := true
		seen := map[int]bool{}
		for _, n := range groupNumbers(group) {
			if n < 0 || !valid[n] {
				all = false
				continue
			}
			if !seen[n] {
				seen[n] = true
				kept = append(kept, n)
			}
		}
		isLink := strings.HasSuffix(group, ")")
		switch {
		case all && !isLink:
			out.WriteString(group)
		case len(kept) > 0:
			out.WriteString("[" + joinInts(kept) + "]")
		default:
			next, _ := utf8.DecodeRuneInString(s[end:])
			if end == len(s) || next == '\n' || (next != '[' && !unicode.IsLetter(next) && !unicode.IsDigit(next)) {
				out.trimBlanks()
			}
			if n := len(out.b); n == 0 || out.b[n-1] == '\n' {
				// Nothing before it on the line: drop the blank after it.
				for last < len(s) && (s[last] == ' ' || s[last] == '\t') {
					last++
				}
			}
		}
	}
	out.WriteString(s[last:])
}

// groupNumbers returns the numbers a citation group cites, ranges
// expanded; -1 stands for a range too long to be a citation.
func groupNumbers(group string) []int {
	bracket := group[:strings.IndexByte(group, ']')+1]
	var out []int
	for _, m := range citeItem.FindAllStringSubmatch(bracket, -1) {
		lo, err := strconv.Atoi(m[1])
		if err != nil {
			out = append(out, -1)
			continue
		}
		hi := lo
		if m[2] != "" {
			if hi, err = strconv.Atoi(m[2]); err != nil {
				out = append(out, -1)
				continue
			}
		}
		if lo > hi {
			lo, hi = hi, lo
		}
		if hi-lo > maxRange {
			out = append(out, -1)
			continue
		}
		for n := lo; n <= hi; n++ {
			out = append(out, n)
		}
	}
	return out
}

func joinInts(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ", ")
}

// buffer is the output of FixCitations: removing a citation trims the
// blanks written before it, which a strings.Builder cannot do in place.
type buffer struct{ b []byte }

func (o *buffer) WriteString(s string) { o.b = append(o.b, s...) }

// trimBlanks removes spaces and tabs at the end.
func (o *buffer) trimBlanks() {
	for n := len(o.b); n > 0 && (o.b[n-1] == ' ' || o.b[n-1] == '\t'); n-- {
		o.b = o.b[:n-1]
	}
}
