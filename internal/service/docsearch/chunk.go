package docsearch

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode/utf8"
)

// Section is one chunk of a markdown page before it is stored.
type Section struct {
	// Title is the header path: the page's "# " title and the "## "
	// header the chunk falls under, joined by " > ".
	Title string
	Text  string
}

// Hash identifies a section's content: the same title and text give the
// same hash, so an unchanged chunk is recognised on re-indexing.
func (s Section) Hash() string {
	h := sha256.New()
	h.Write([]byte(s.Title))
	h.Write([]byte{0})
	h.Write([]byte(s.Text))
	return hex.EncodeToString(h.Sum(nil))
}

// Split cuts a markdown page into sections at "# " and "## " headers
// (deeper headers stay inside their section, and headers inside fenced
// code blocks are code), keeping the header path as the title. A section
// longer than maxChars is cut at blank lines outside code fences, then, if
// a paragraph alone is too long, at line ends and finally anywhere, so
// every section's text is at most maxChars characters. Empty sections are
// dropped.
func Split(page string, maxChars int) []Section {
	page = strings.ReplaceAll(page, "\r\n", "\n")
	var (
		out        []Section
		h1, h2     string
		body       []string
		fence      string
		flushTitle = func() string {
			switch {
			case h1 != "" && h2 != "":
				return h1 + " > " + h2
			case h2 != "":
				return h2
			}
			return h1
		}
	)
	flush := func() {
		text := strings.TrimSpace(strings.Join(body, "\n"))
		body = body[:0]
		if text == "" {
			return
		}
		title := flushTitle()
		for _, part := range bound(text, maxChars) {
			out = append(out, Section{Title: title, Text: part})
		}
	}
	for _, line := range strings.Split(page, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			body = append(body, line)
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			body = append(body, line)
			continue
		}
		switch {
		case strings.HasPrefix(line, "# "):
			flush()
			h1, h2 = headerText(line[2:]), ""
		case strings.HasPrefix(line, "## "):
			flush()
			h2 = headerText(line[3:])
		default:
			body = append(body, line)
		}
	}
	flush()
	return out
}

func headerText(s string) string {
	return strings.TrimSpace(strings.TrimRight(strings.TrimSpace(s), "#"))
}

// bound cuts text into parts of at most maxChars characters, preferring
// paragraph boundaries outside code fences, then line ends.
func bound(text string, maxChars int) []string {
	if utf8.RuneCountInString(text) <= maxChars {
		return []string{text}
	}
	var parts []string
	var cur strings.Builder
	curLen := 0
	emit := func() {
		if s := strings.TrimSpace(cur.String()); s != "" {
			parts = append(parts, s)
		}
		cur.Reset()
		curLen = 0
	}
	add := func(piece, sep string) {
		n := utf8.RuneCountInString(piece)
		if curLen > 0 && curLen+len(sep)+n > maxChars {
			emit()
		}
		if curLen > 0 {
			cur.WriteString(sep)
			curLen += len(sep)
		}
		cur.WriteString(piece)
		curLen += n
	}
	for _, para := range paragraphs(text) {
		if utf8.RuneCountInString(para) <= maxChars {
			add(para, "\n\n")
			continue
		}
		emit()
		for _, line := range strings.Split(para, "\n") {
			for utf8.RuneCountInString(line) > maxChars {
				cut := runeOffset(line, maxChars)
				add(line[:cut], "\n")
				emit()
				line = line[cut:]
			}
			add(line, "\n")
		}
		emit()
	}
	emit()
	return parts
}

// paragraphs splits at blank lines that are not inside a code fence.
func paragraphs(text string) []string {
	var out []string
	var cur []string
	fence := ""
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case fence != "":
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
		case strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~"):
			fence = trimmed[:3]
		case strings.TrimSpace(line) == "":
			if len(cur) > 0 {
				out = append(out, strings.Join(cur, "\n"))
				cur = cur[:0]
			}
			continue
		}
		cur = append(cur, line)
	}
	if len(cur) > 0 {
		out = append(out, strings.Join(cur, "\n"))
	}
	return out
}

func runeOffset(s string, n int) int {
	i := 0
	for off := range s {
		if i == n {
			return off
		}
		i++
	}
	return len(s)
}
