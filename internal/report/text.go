package report

import (
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// shorten collapses white space and cuts s to at most n bytes on a rune
// boundary, marking the cut with an ellipsis.
func shorten(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// trimText cuts s to at most n bytes, preferring the end of a sentence,
// then of a word, in the last fifth of the budget.
func trimText(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	cut := s[:n]
	floor := n * 4 / 5
	if i := strings.LastIndexAny(cut, ".!?\n"); i >= floor {
		return strings.TrimSpace(cut[:i+1]) + " …", true
	}
	if i := strings.LastIndexAny(cut, " \t"); i >= floor {
		return strings.TrimSpace(cut[:i]) + " …", true
	}
	return cut + "…", true
}

// footnoteMarker is a page's own reference marker: Wikipedia's [12],
// [a], [citation needed], [note 3]. Left in a source's text, it would read
// as one of our citations.
var footnoteMarker = regexp.MustCompile(`\[(?:\d{1,4}|[a-z]|[a-z]{1,10} \d{1,4}|citation needed|clarification needed|when\?|who\?|update)\]`)

// cleanText prepares a source's text: reference markers removed, blank
// runs collapsed, lines kept.
func cleanText(s string) string {
	s = footnoteMarker.ReplaceAllString(s, "")
	lines := strings.Split(s, "\n")
	out := lines[:0]
	blank := false
	for _, l := range lines {
		l = strings.Join(strings.Fields(l), " ")
		if l == "" {
			if !blank && len(out) > 0 {
				out = append(out, "")
			}
			blank = true
			continue
		}
		blank = false
		out = append(out, l)
	}
	return strings.TrimSpace(strings.Join(out, "\n"))
}

// abbreviations end with a period that does not end a sentence.
var abbreviations = map[string]bool{
	"e.g": true, "i.e": true, "etc": true, "vs": true, "cf": true, "al": true, "approx": true,
	"mr": true, "mrs": true, "ms": true, "dr": true, "prof": true, "sr": true, "jr": true, "st": true,
	"inc": true, "ltd": true, "co": true, "corp": true, "no": true, "fig": true, "vol": true, "p": true, "pp": true,
	"jan": true, "feb": true, "mar": true, "apr": true, "jun": true, "jul": true, "aug": true, "sep": true, "sept": true,
	"oct": true, "nov": true, "dec": true, "u.s": true, "u.k": true, "ph.d": true,
}

// sentences splits text into sentences: at line breaks, and after . ! ?
// (and closing quotes or brackets) followed by white space and a capital,
// a digit or an opening quote, unless the word before the period is an
// abbreviation or an initial.
func sentences(text string) []string {
	var out []string
	for line := range strings.SplitSeq(text, "\n") {
		rs := []rune(line)
		start := 0
		for i := 0; i < len(rs); i++ {
			if rs[i] != '.' && rs[i] != '!' && rs[i] != '?' {
				continue
			}
			j := i + 1
			for j < len(rs) && strings.ContainsRune(`"')]”’»`, rs[j]) {
				j++
			}
			if j >= len(rs) || !unicode.IsSpace(rs[j]) {
				continue
			}
			k := j
			for k < len(rs) && unicode.IsSpace(rs[k]) {
				k++
			}
			if k >= len(rs) || !(unicode.IsUpper(rs[k]) || unicode.IsDigit(rs[k]) || strings.ContainsRune(`"'(“‘«`, rs[k])) {
				continue
			}
			if rs[i] == '.' && isAbbreviation(rs[start:i]) {
				continue
			}
			out = appendSentence(out, string(rs[start:j]))
			start = k
			i = k - 1
		}
		out = appendSentence(out, string(rs[start:]))
	}
	return out
}

func appendSentence(out []string, s string) []string {
	if s = strings.TrimSpace(s); s != "" {
		out = append(out, s)
	}
	return out
}

// isAbbreviation reports whether the text before a period ends with an
// abbreviation or a single-letter initial.
func isAbbreviation(before []rune) bool {
	i := len(before)
	for i > 0 && !unicode.IsSpace(before[i-1]) && before[i-1] != '(' {
		i--
	}
	word := strings.ToLower(string(before[i:]))
	if utf8.RuneCountInString(word) == 1 && unicode.IsLetter([]rune(word)[0]) {
		return true
	}
	return abbreviations[word]
}

var stopwords = map[string]bool{}

func init() {
	for w := range strings.FieldsSeq(`a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further had has have having he her
here hers herself him himself his how i if in into is it its itself just me more most my myself no nor not now of off on
once only or other our ours ourselves out over own same she should so some such than that the their theirs them themselves
then there these they this those through to too under until up very was we were what when where which while who whom why
will with would you your yours yourself yourselves vs versus`) {
		stopwords[w] = true
	}
}

// words returns the lower-case words of s (letters and digits).
func words(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
}

// stem is a crude, language-blind stemmer: the first six letters, so that
// battery and batteries, compile and compiler meet.
func stem(w string) string {
	rs := []rune(w)
	if len(rs) > 6 {
		return string(rs[:6])
	}
	return w
}

// queryTerms returns the stems of the query's content words.
func queryTerms(query string) []string {
	var out []string
	seen := map[string]bool{}
	for _, w := range words(query) {
		if stopwords[w] || utf8.RuneCountInString(w) < 2 {
			continue
		}
		if s := stem(w); !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
