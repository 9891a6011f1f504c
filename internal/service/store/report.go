package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Report is a job's report as stored.
type Report struct {
	Markdown string
	// Complete is set once the writer says the report is finished; until
	// then it may still grow (AppendReport while a model streams).
	Complete bool
	// Details is what the writer says about the report beside its text
	// (for deep research: the sources it was written from, those not
	// used, the citation check), as JSON the store does not read. It is
	// written with the head, so it always belongs to this Markdown.
	Details   []byte
	Bytes     int
	Parts     int
	UpdatedAt time.Time
}

// Report storage: a head item (sk REPORT) names the current revision and how
// many parts it has; the text is in part items REPORT#<rev>#<part>, each at
// most ReportPartBytes. A reader follows the head, so a replacement
// (PutReport) becomes visible at once, when its head is written.
const (
	ReportPartBytes = 350 << 10
	MaxReportBytes  = 16 << 20
	// MaxReportAppendBytes bounds one AppendReport chunk: its parts and the
	// head travel in one transaction (4 MB at most).
	MaxReportAppendBytes = 3 << 20
	// MaxReportDetailsBytes bounds Details: it lives in the head item,
	// which DynamoDB caps at 400 KB.
	MaxReportDetailsBytes = 300 << 10
	skReport              = "REPORT"
	maxReportTries        = 20
)

func reportKey(jobID string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": avS(jobID), "sk": avS(skReport)}
}

func reportPartSK(rev string, part int) string {
	p := strconv.Itoa(part)
	if len(p) < 6 {
		p = strings.Repeat("0", 6-len(p)) + p
	}
	return skReport + "#" + rev + "#" + p
}

// newRev returns a revision id unique to this writer, so two concurrent
// replacements never write into each other's parts.
func newRev(now time.Time) string {
	return strconv.FormatInt(now.UnixNano(), 36) + strconv.FormatUint(rand.Uint64()&0xffffff, 36)
}

type reportHead struct {
	exists   bool
	rev      string
	parts    int
	bytes    int
	complete bool
	details  []byte
	updated  time.Time
}

func (s *Store) reportHead(ctx context.Context, jobID string) (reportHead, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &s.jobs, Key: reportKey(jobID), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return reportHead{}, fmt.Errorf("read report head of job %s: %w", jobID, err)
	}
	if len(out.Item) == 0 {
		return reportHead{}, nil
	}
	return reportHead{
		exists:   true,
		rev:      getS(out.Item, "rev"),
		parts:    int(getN(out.Item, "parts")),
		bytes:    int(getN(out.Item, "bytes")),
		complete: getBool(out.Item, "complete"),
		details:  bytesOrNil(getS(out.Item, "details")),
		updated:  getTime(out.Item, "updated_at"),
	}, nil
}

// splitText cuts text into pieces of at most size bytes on rune boundaries.
func splitText(text string, size int) []string {
	var parts []string
	for len(text) > size {
		cut := size
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		parts = append(parts, text[:cut])
		text = text[cut:]
	}
	if text != "" {
		parts = append(parts, text)
	}
	return parts
}

func (s *Store) partItem(jobID, rev string, part int, text string, now time.Time) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk":         avS(jobID),
		"sk":         avS(reportPartSK(rev, part)),
		"text":       avS(text),
		"expires_at": s.expiry(now),
	}
}

// headCondition holds when the head is still what h says it was.
func headCondition(h reportHead) (string, map[string]types.AttributeValue) {
	if !h.exists {
		return "attribute_not_exists(pk)", nil
	}
	return "rev = :oldrev AND parts = :oldparts", map[string]types.AttributeValue{
		":oldrev": avS(h.rev), ":oldparts": avN(int64(h.parts)),
	}
}

// PutReport stores markdown as the job's whole report, replacing any earlier
// one, and marks it complete or not. Readers see the old report until the
// new one is entirely written.
func (s *Store) PutReport(ctx context.Context, jobID, markdown string, complete bool) error {
	return s.WriteReport(ctx, jobID, Report{Markdown: markdown, Complete: complete})
}

// WriteReport is PutReport with the report's details (rep.Details); the
// other fields of rep beside Markdown and Complete are ignored.
func (s *Store) WriteReport(ctx context.Context, jobID string, rep Report) error {
	if err := checkID("job id", jobID); err != nil {
		return err
	}
	markdown, complete := rep.Markdown, rep.Complete
	if len(markdown) > MaxReportBytes {
		return fmt.Errorf("job %s: report is %d bytes, limit %d: %w", jobID, len(markdown), MaxReportBytes, ErrTooLarge)
	}
	if len(rep.Details) > MaxReportDetailsBytes {
		return fmt.Errorf("job %s: report details are %d bytes, limit %d: %w", jobID, len(rep.Details), MaxReportDetailsBytes, ErrTooLarge)
	}
	now := s.now()
	rev := newRev(now)
	pieces := splitText(markdown, ReportPartBytes)
	reqs := make([]types.WriteRequest, len(pieces))
	for i, p := range pieces {
		reqs[i] = types.WriteRequest{PutRequest: &types.PutRequest{Item: s.partItem(jobID, rev, i+1, p, now)}}
	}
	// The parts are invisible until the head points at rev.
	if err := s.batchWrite(ctx, s.jobs, reqs); err != nil {
		return fmt.Errorf("write report of job %s: %w", jobID, err)
	}
	for attempt := 0; ; attempt++ {
		if attempt >= maxReportTries {
			return fmt.Errorf("write report of job %s: gave up after %d attempts: %w", jobID, attempt, ErrConflict)
		}
		if attempt > 0 {
			if err := backoff(ctx, attempt); err != nil {
				return err
			}
		}
		old, err := s.reportHead(ctx, jobID)
		if err != nil {
			return err
		}
		cond, vals := headCondition(old)
		head := reportKey(jobID)
		head["rev"] = avS(rev)
		head["parts"] = avN(int64(len(pieces)))
		head["bytes"] = avN(int64(len(markdown)))
		head["complete"] = avBool(complete)
		head["updated_at"] = avTime(now)
		head["expires_at"] = s.expiry(now)
		if len(rep.Details) > 0 {
			head["details"] = avS(string(rep.Details))
		}
		_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: &s.jobs, Item: head,
			ConditionExpression: aws.String(cond), ExpressionAttributeValues: vals,
		})
		if _, failed := isConditionFailed(err); failed {
			continue // another writer moved the head; take its state and retry
		}
		if err != nil {
			return fmt.Errorf("write report head of job %s: %w", jobID, err)
		}
		if old.exists && old.rev != rev {
			s.deleteParts(ctx, jobID, old.rev, old.parts)
		}
		return nil
	}
}

// deleteParts removes a replaced revision's parts. Failure only leaves
// unreachable items that the TTL removes later, so it is not reported.
func (s *Store) deleteParts(ctx context.Context, jobID, rev string, parts int) {
	reqs := make([]types.WriteRequest, parts)
	for i := range parts {
		reqs[i] = types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: map[string]types.AttributeValue{
			"pk": avS(jobID), "sk": avS(reportPartSK(rev, i+1)),
		}}}
	}
	_ = s.batchWrite(ctx, s.jobs, reqs)
}

// AppendReport adds chunk to the end of the job's report (starting one if
// there is none), atomically with the head, and marks the report complete
// when complete is set. Appending to a complete report is ErrConflict.
// Writers that stream should buffer: every call adds at least one item.
func (s *Store) AppendReport(ctx context.Context, jobID, chunk string, complete bool) error {
	if err := checkID("job id", jobID); err != nil {
		return err
	}
	if len(chunk) > MaxReportAppendBytes {
		return fmt.Errorf("job %s: report chunk is %d bytes, limit %d: %w", jobID, len(chunk), MaxReportAppendBytes, ErrTooLarge)
	}
	pieces := splitText(chunk, ReportPartBytes)
	for attempt := 0; ; attempt++ {
		if attempt >= maxReportTries {
			return fmt.Errorf("append to report of job %s: gave up after %d attempts: %w", jobID, attempt, ErrConflict)
		}
		if attempt > 0 {
			if err := backoff(ctx, attempt); err != nil {
				return err
			}
		}
		h, err := s.reportHead(ctx, jobID)
		if err != nil {
			return err
		}
		if h.complete {
			return fmt.Errorf("append to report of job %s: the report is complete: %w", jobID, ErrConflict)
		}
		if h.bytes+len(chunk) > MaxReportBytes {
			return fmt.Errorf("job %s: report would be %d bytes, limit %d: %w", jobID, h.bytes+len(chunk), MaxReportBytes, ErrTooLarge)
		}
		now := s.now()
		if !h.exists {
			h.rev = newRev(now)
		}
		cond, vals := headCondition(h)
		head := reportKey(jobID)
		head["rev"] = avS(h.rev)
		head["parts"] = avN(int64(h.parts + len(pieces)))
		head["bytes"] = avN(int64(h.bytes + len(chunk)))
		head["complete"] = avBool(complete)
		head["updated_at"] = avTime(now)
		head["expires_at"] = s.expiry(now)
		tx := []types.TransactWriteItem{{Put: &types.Put{
			TableName: &s.jobs, Item: head,
			ConditionExpression: aws.String(cond), ExpressionAttributeValues: vals,
		}}}
		for i, p := range pieces {
			tx = append(tx, types.TransactWriteItem{Put: &types.Put{
				TableName: &s.jobs, Item: s.partItem(jobID, h.rev, h.parts+i+1, p, now),
			}})
		}
		_, err = s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: tx})
		if err == nil {
			return nil
		}
		if reasons, ok := txReasons(err); ok && (reasonCode(reasons[0]) == "ConditionalCheckFailed" || txConflict(reasons)) {
			continue
		}
		return fmt.Errorf("append to report of job %s: %w", jobID, err)
	}
}

// GetReport returns the job's report, reassembled from its parts; no report
// yet is ErrNotFound.
func (s *Store) GetReport(ctx context.Context, jobID string) (Report, error) {
	// A replacement may delete the revision just read between the two
	// reads; then the head has moved on and reading again finds the new one.
	for attempt := 0; attempt < 3; attempt++ {
		h, err := s.reportHead(ctx, jobID)
		if err != nil {
			return Report{}, err
		}
		if !h.exists {
			return Report{}, fmt.Errorf("report of job %s: %w", jobID, ErrNotFound)
		}
		items, err := s.queryPrefix(ctx, jobID, skReport+"#"+h.rev+"#")
		if err != nil {
			return Report{}, fmt.Errorf("read report of job %s: %w", jobID, err)
		}
		if len(items) < h.parts {
			continue
		}
		var b strings.Builder
		b.Grow(h.bytes)
		for _, it := range items[:h.parts] {
			b.WriteString(getS(it, "text"))
		}
		return Report{
			Markdown: b.String(), Complete: h.complete, Details: h.details, Bytes: h.bytes, Parts: h.parts, UpdatedAt: h.updated,
		}, nil
	}
	return Report{}, fmt.Errorf("read report of job %s: it kept changing while being read: %w", jobID, ErrConflict)
}

func bytesOrNil(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}
