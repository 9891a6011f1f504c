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

// sentences splits plain text into sentences: at line breaks, and where
// sentenceSpans says.
func sentences(text string) []string {
	var out []string
	for line := range strings.SplitSeq(text, "\n") {
		for _, sp := range sentenceSpans(line) {
			out = append(out, line[sp.start:sp.end])
		}
	}
	return out
}

// span is a byte range [start, end) of a text.
type span struct{ start, end int }

const (
	closers = `"')]”’»*_` // may follow a sentence's final punctuation
	openers = `"'(“‘«[*_` // may start a sentence
)

// sentenceSpans splits one block of text (a paragraph, which may run over
// several lines) into sentences, returned trimmed of white space. A
// sentence ends after . ! ? or … (and closing quotes, brackets or emphasis)
// followed by white space and a capital, a digit or an opening quote or
// bracket, unless the word before the period is an abbreviation ("e.g.",
// "Dr.") or an initial. A decimal point ("3.5") is followed by no white
// space, so it never ends one. Citations right after the punctuation
// ("... rose. [3] Next") belong to the sentence they follow.
func sentenceSpans(text string) []span {
	var out []span
	emit := func(a, b int) {
		for a < b && isSpaceByte(text[a]) {
			a++
		}
		for b > a && isSpaceByte(text[b-1]) {
			b--
		}
		if a < b {
			out = append(out, span{a, b})
		}
	}
	start := 0
	for i := 0; i < len(text); {
		r, size := utf8.DecodeRuneInString(text[i:])
		if r != '.' && r != '!' && r != '?' && r != '…' {
			i += size
			continue
		}
		j := i + size
		for j < len(text) && strings.ContainsRune(".!?…", rune(text[j])) {
			j++
		}
		j = skipRunes(text, j, closers)
		cited := false
		for {
			k := j
			for k < len(text) && isSpaceByte(text[k]) {
				k++
			}
			m := citeAtStart.FindStringIndex(text[k:])
			if m == nil {
				break
			}
			j, cited = k+m[1], true
		}
		if j >= len(text) {
			break
		}
		k := j
		for k < len(text) && isSpaceByte(text[k]) {
			k++
		}
		next, _ := utf8.DecodeRuneInString(text[k:])
		if k == j || k >= len(text) || !(unicode.IsUpper(next) || unicode.IsDigit(next) || strings.ContainsRune(openers, next)) ||
			(r == '.' && !cited && isAbbreviation(text[start:i])) {
			i = j
			continue
		}
		emit(start, j)
		start, i = k, k
	}
	emit(start, len(text))
	return out
}

func isSpaceByte(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// skipRunes returns the index after the runes of set that start s[i:].
func skipRunes(s string, i int, set string) int {
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if !strings.ContainsRune(set, r) {
			break
		}
		i += size
	}
	return i
}

// isAbbreviation reports whether the text before a period ends with an
// abbreviation or a single-letter initial.
func isAbbreviation(before string) bool {
	i := strings.LastIndexFunc(before, func(r rune) bool { return unicode.IsSpace(r) || r == '(' })
	word := strings.ToLower(before[i+1:])
	if utf8.RuneCountInString(word) == 1 {
		r, _ := utf8.DecodeRuneInString(word)
		return unicode.IsLetter(r)
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

// stem is a crude stemmer for English: common inflections come off
// (nests, counted, nesting, cities), then the word is cut to its first six
// letters, so that battery and batteries, migrate and migration meet.
func stem(w string) string {
	n := utf8.RuneCountInString(w)
	switch {
	case n > 4 && strings.HasSuffix(w, "ies"):
		w = w[:len(w)-3] + "y"
	case n > 4 && strings.HasSuffix(w, "sses"):
		w = w[:len(w)-2]
	case n > 4 && (strings.HasSuffix(w, "ches") || strings.HasSuffix(w, "shes") || strings.HasSuffix(w, "xes")):
		w = w[:len(w)-2]
	case n > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") && !strings.HasSuffix(w, "us") && !strings.HasSuffix(w, "is"):
		w = w[:len(w)-1]
	case n > 5 && strings.HasSuffix(w, "ing"):
		w = w[:len(w)-3]
	case n > 4 && strings.HasSuffix(w, "ed"):
		w = w[:len(w)-2]
	}
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
