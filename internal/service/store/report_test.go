package store_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sandstep/sandstep/internal/service/store"
)

// bigMarkdown is n bytes of markdown with multi-byte runes, so that splits
// must respect rune boundaries.
func bigMarkdown(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "## Finding %d — naïve café ✓\n\nEvidence [%d] says 日本語 text.\n\n", i, i%10+1)
	}
	return b.String()
}

// reportItems counts the stored report items (head and parts) of a job.
func reportItems(t *testing.T, c *dynamodb.Client, table, jobID string) int {
	t.Helper()
	out, err := c.Query(testCtx(t), &dynamodb.QueryInput{
		TableName:              aws.String(table),
		KeyConditionExpression: aws.String("pk = :pk AND begins_with(sk, :p)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": &types.AttributeValueMemberS{Value: jobID}, ":p": &types.AttributeValueMemberS{Value: "REPORT"},
		},
		Select: types.SelectCount,
	})
	if err != nil {
		t.Fatal(err)
	}
	return int(out.Count)
}

func TestLargeReportSplitAndReassembled(t *testing.T) {
	s, env := newStore(t)
	ctx := testCtx(t)
	newJob(t, s, "j")
	md := bigMarkdown(1 << 20)
	if err := s.PutReport(ctx, "j", md, true); err != nil {
		t.Fatal(err)
	}
	rep, err := s.GetReport(ctx, "j")
	if err != nil {
		t.Fatal(err)
	}
	wantParts := (len(md) + store.ReportPartBytes - 1) / store.ReportPartBytes
	if rep.Markdown != md || !rep.Complete || rep.Bytes != len(md) || rep.Parts != wantParts {
		t.Fatalf("report: %d bytes (want %d), %d parts (want %d), complete %v, equal %v",
			rep.Bytes, len(md), rep.Parts, wantParts, rep.Complete, rep.Markdown == md)
	}
	// Replacing it leaves only the new revision behind.
	tbl := env.Prefix + store.JobsTableSuffix
	if n := reportItems(t, env.Client, tbl, "j"); n != wantParts+1 {
		t.Fatalf("%d report items, want %d", n, wantParts+1)
	}
	if err := s.PutReport(ctx, "j", "# short", true); err != nil {
		t.Fatal(err)
	}
	if rep, err := s.GetReport(ctx, "j"); err != nil || rep.Markdown != "# short" || rep.Parts != 1 {
		t.Fatalf("replaced report = %+v, %v", rep, err)
	}
	if n := reportItems(t, env.Client, tbl, "j"); n != 2 {
		t.Fatalf("%d report items after replacing, want 2 (head and one part)", n)
	}
	if err := s.PutReport(ctx, "j", strings.Repeat("x", store.MaxReportBytes+1), true); !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("oversized report: %v, want ErrTooLarge", err)
	}
}

func TestAppendReportWhileStreaming(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	newJob(t, s, "j")
	if _, err := s.GetReport(ctx, "j"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("no report yet: %v, want ErrNotFound", err)
	}
	big := bigMarkdown(store.ReportPartBytes + 1000)
	chunks := []string{"# Report\n\n", "Executive summary…\n", big, "Open questions.\n"}
	for i, c := range chunks {
		if err := s.AppendReport(ctx, "j", c, i == len(chunks)-1); err != nil {
			t.Fatal(err)
		}
		rep, err := s.GetReport(ctx, "j")
		if err != nil {
			t.Fatal(err)
		}
		if want := strings.Join(chunks[:i+1], ""); rep.Markdown != want || rep.Complete != (i == len(chunks)-1) {
			t.Fatalf("after chunk %d: %d bytes (want %d), complete %v", i, len(rep.Markdown), len(want), rep.Complete)
		}
	}
	if err := s.AppendReport(ctx, "j", "late", false); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("append to a complete report: %v, want ErrConflict", err)
	}
}

func TestSources(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	newJob(t, s, "j")
	var srcs []store.Source
	for n := 10; n >= 1; n-- {
		srcs = append(srcs, store.Source{
			N: n, URL: fmt.Sprintf("https://example.org/%d", n), Title: fmt.Sprintf("Page %d", n),
			Snippet: "snippet", Origin: store.OriginSearch,
		})
	}
	srcs[0].Content = strings.Repeat("ç", store.MaxSourceContentBytes) // 2 bytes each: over the cap
	srcs[0].Origin = store.OriginCrawl
	if err := s.PutSources(ctx, "j", srcs); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListSources(ctx, "j")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 10 {
		t.Fatalf("%d sources", len(got))
	}
	for i, src := range got {
		if src.N != i+1 || src.URL != fmt.Sprintf("https://example.org/%d", i+1) {
			t.Fatalf("source %d = %+v", i, src)
		}
	}
	if last := got[9]; !last.Truncated || len(last.Content) > store.MaxSourceContentBytes || last.Origin != store.OriginCrawl {
		t.Fatalf("capped source: truncated %v, %d bytes, origin %s", last.Truncated, len(last.Content), last.Origin)
	}
	// A crawl fills in a search result: same number, replaced.
	if err := s.PutSources(ctx, "j", []store.Source{{N: 3, URL: "https://example.org/3", Content: "page text", Origin: store.OriginCrawl}}); err != nil {
		t.Fatal(err)
	}
	got, err = s.ListSources(ctx, "j")
	if err != nil || len(got) != 10 || got[2].Content != "page text" || got[2].Origin != store.OriginCrawl || got[2].Truncated {
		t.Fatalf("after replacing source 3: %+v, %v", got[2], err)
	}
	if err := s.PutSources(ctx, "j", []store.Source{{N: 0}}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("source 0: %v, want ErrInvalid", err)
	}
}

func TestCrawledSourceDescription(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	newJob(t, s, "j")
	want := store.Source{N: 1, URL: "https://example.org/p.pdf", FinalURL: "https://cdn.example.org/p.pdf", Title: "Paper",
		Content: "text", Origin: store.OriginCrawl, Mode: "pdf", Pages: 12}
	if err := s.PutSources(ctx, "j", []store.Source{want}); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListSources(ctx, "j")
	if err != nil || len(got) != 1 || got[0] != want {
		t.Fatalf("sources = %+v, %v; want %+v", got, err, want)
	}
}

func TestSkips(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	newJob(t, s, "j")
	skips := []store.Skip{
		{URL: "https://example.org/c", Reason: "challenge", Message: "an anti-bot challenge page", N: 3},
		{URL: "https://example.org/loop", Reason: "redirect_loop", Message: "redirect loop: a -> b -> a"},
	}
	// Stored twice, as a retried phase would: the same items.
	for range 2 {
		if err := s.PutSkips(ctx, "j", skips); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.ListSkips(ctx, "j")
	if err != nil || len(got) != 2 || got[0] != skips[0] || got[1] != skips[1] {
		t.Fatalf("skips = %+v, %v", got, err)
	}
	// Skips are not sources.
	if srcs, err := s.ListSources(ctx, "j"); err != nil || len(srcs) != 0 {
		t.Fatalf("sources = %+v, %v", srcs, err)
	}
}

func TestReportDetails(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	newJob(t, s, "j")
	details := []byte(`{"citations":{"total":2}}`)
	if err := s.WriteReport(ctx, "j", store.Report{Markdown: "# R", Complete: true, Details: details}); err != nil {
		t.Fatal(err)
	}
	rep, err := s.GetReport(ctx, "j")
	if err != nil || string(rep.Details) != string(details) || rep.Markdown != "# R" || !rep.Complete {
		t.Fatalf("report = %+v, %v", rep, err)
	}
	// A replacement without details has none: they belong to the text.
	if err := s.PutReport(ctx, "j", "# R2", true); err != nil {
		t.Fatal(err)
	}
	if rep, err = s.GetReport(ctx, "j"); err != nil || rep.Details != nil || rep.Markdown != "# R2" {
		t.Fatalf("replaced report = %+v, %v", rep, err)
	}
	big := []byte(`"` + strings.Repeat("x", store.MaxReportDetailsBytes) + `"`)
	if err := s.WriteReport(ctx, "j", store.Report{Markdown: "# R3", Complete: true, Details: big}); !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("oversized details: %v, want ErrTooLarge", err)
	}
}
