package fixturesite

import (
	"bytes"
	"fmt"
	"strings"
)

// PDF writes a PDF document with one page per element of pages, each line
// of text set in Helvetica, and title in its document information. It is a
// real PDF (cross-reference table, fonts, content streams) that any reader,
// pdftotext included, opens. Text must be Latin-1.
func PDF(title string, pages [][]string) []byte {
	var objs []string
	// 1: catalog, 2: page tree, 3: font, 4: info; then a page and its
	// content stream per page.
	kids := make([]string, len(pages))
	for i := range pages {
		kids[i] = fmt.Sprintf("%d 0 R", 5+2*i)
	}
	objs = append(objs,
		"<< /Type /Catalog /Pages 2 0 R >>",
		fmt.Sprintf("<< /Type /Pages /Kids [%s] /Count %d >>", strings.Join(kids, " "), len(pages)),
		"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
		fmt.Sprintf("<< /Title (%s) /Producer (sandstep fixturesite) >>", pdfString(title)),
	)
	for i, lines := range pages {
		var c strings.Builder
		c.WriteString("BT /F1 11 Tf 14 TL 72 740 Td\n")
		for _, l := range lines {
			fmt.Fprintf(&c, "(%s) Tj T*\n", pdfString(l))
		}
		c.WriteString("ET\n")
		objs = append(objs,
			fmt.Sprintf("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>", 6+2*i),
			fmt.Sprintf("<< /Length %d >>\nstream\n%sendstream", c.Len(), c.String()),
		)
	}
	var b bytes.Buffer
	b.WriteString("%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
	offsets := make([]int, len(objs))
	for i, o := range objs {
		offsets[i] = b.Len()
		fmt.Fprintf(&b, "%d 0 obj\n%s\nendobj\n", i+1, o)
	}
	xref := b.Len()
	fmt.Fprintf(&b, "xref\n0 %d\n0000000000 65535 f \n", len(objs)+1)
	for _, off := range offsets {
		fmt.Fprintf(&b, "%010d 00000 n \n", off)
	}
	fmt.Fprintf(&b, "trailer\n<< /Size %d /Root 1 0 R /Info 4 0 R >>\nstartxref\n%d\n%%%%EOF\n", len(objs)+1, xref)
	return b.Bytes()
}

// pdfString escapes text for a PDF literal string and encodes it in
// Latin-1 (WinAnsiEncoding agrees with it on letters).
func pdfString(s string) string {
	return string(toLatin1(strings.NewReplacer(`\`, `\\`, "(", `\(`, ")", `\)`).Replace(s)))
}
