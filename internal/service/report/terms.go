package report

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// token is a word or number of a text, at its byte range. term is what
// the citation check compares: the stem of a content word, or a number
// written without grouping commas ("4,200" -> "4200"); "" for a stopword.
type token struct {
	term       string
	word       string // the word lower-cased (numbers as term): for quotes
	num        bool
	start, end int
}

// numberWords are spelled numbers the check reads as digits, so that "11
// days" finds "eleven days". "One" is left out: it is more often a pronoun.
var numberWords = map[string]string{
	"two": "2", "three": "3", "four": "4", "five": "5", "six": "6", "seven": "7", "eight": "8", "nine": "9",
	"ten": "10", "eleven": "11", "twelve": "12", "thirteen": "13", "fourteen": "14", "fifteen": "15",
	"sixteen": "16", "seventeen": "17", "eighteen": "18", "nineteen": "19", "twenty": "20", "thirty": "30",
	"forty": "40", "fifty": "50", "sixty": "60", "seventy": "70", "eighty": "80", "ninety": "90",
}

// citeWords are how a sentence points at its source ("see", "according
// to"): they say nothing the source must contain.
var citeWords = wordSet(`see also according cited cite cites says said stated noted per et al`)

// tokens calls fn for every word and number of s in order. A number keeps
// its decimal point and grouping commas ("4,200", "3.5"); every other
// character that is neither letter nor digit separates tokens.
func tokens(s string, fn func(token)) {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			i += size
			continue
		}
		start, digits, letters := i, true, false
	scan:
		for i < len(s) {
			r, size = utf8.DecodeRuneInString(s[i:])
			switch {
			case unicode.IsDigit(r):
			case unicode.IsLetter(r):
				digits, letters = false, true
			case (r == '.' || r == ',') && digits && !letters && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9' && i > start:
				// inside a number: 4,200 or 3.5
			default:
				break scan
			}
			i += size
		}
		raw := s[start:i]
		t := token{start: start, end: i}
		switch {
		case digits:
			t.term, t.num = normalizeNumber(raw), true
			t.word = t.term
		default:
			w := strings.ToLower(raw)
			t.word = w
			if d, ok := numberWords[w]; ok {
				t.term, t.num = d, true
			} else if !stopwords[w] && !citeWords[w] && utf8.RuneCountInString(w) > 1 {
				t.term = stem(w)
			}
		}
		fn(t)
	}
}

// normalizeNumber drops grouping commas ("4,200" -> "4200") and leading
// zeros; other commas stay, for the check to compare as written.
func normalizeNumber(n string) string {
	if strings.Contains(n, ",") {
		groups := strings.Split(n, ",")
		grouped := len(groups[0]) >= 1 && len(groups[0]) <= 3
		for _, g := range groups[1:] {
			head, _, _ := strings.Cut(g, ".")
			grouped = grouped && len(head) == 3
		}
		if grouped {
			n = strings.ReplaceAll(n, ",", "")
		}
	}
	if t := strings.TrimLeft(n, "0"); t != n {
		if t == "" || t[0] == '.' {
			t = "0" + t
		}
		n = t
	}
	return n
}

// quotedPhrases returns the phrases of s in double quotes ("...", “...”,
// «...»), as sequences of lower-case words; quotes without a word in them
// are left out.
func quotedPhrases(s string) [][]string {
	var out [][]string
	for _, pair := range [][2]string{{`"`, `"`}, {"“", "”"}, {"«", "»"}} {
		rest := s
		for {
			i := strings.Index(rest, pair[0])
			if i < 0 {
				break
			}
			rest = rest[i+len(pair[0]):]
			j := strings.Index(rest, pair[1])
			if j < 0 {
				break
			}
			var ws []string
			tokens(rest[:j], func(t token) { ws = append(ws, t.word) })
			if len(ws) > 0 {
				out = append(out, ws)
			}
			rest = rest[j+len(pair[1]):]
		}
	}
	return out
}
