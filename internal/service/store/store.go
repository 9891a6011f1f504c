// Package store keeps sandstep's state in DynamoDB: jobs with their progress
// events, sources and report; the sandbox ledger; and session records.
//
// Every state change is a conditional write, so races between Lambdas, the
// API and the reaper are decided by DynamoDB and not by check-then-act. A
// failed condition surfaces as ErrConflict, a missing item as ErrNotFound.
//
// Storage conventions: times are Number attributes in Unix milliseconds,
// except expires_at, which is DynamoDB's TTL attribute in Unix seconds. Items
// stay well under DynamoDB's 400 KB limit: long values are split into parts
// (the report) or truncated with a flag (event data, source content).
//
// The tables themselves are declared once, in template.yaml; CloudFormation
// creates them on AWS, and ddblocal.CreateTables (internal/emulation/ddblocal)
// builds them from there for DynamoDB Local.
package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

var (
	// ErrNotFound: the job, session or ledger entry does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: a conditional write was refused because the item is not
	// in the expected state (status, version, owner...). Re-read and decide.
	ErrConflict = errors.New("conflict: condition failed")
	// ErrIllegalTransition: the requested status change is never allowed
	// (for example succeeded -> running); no write was attempted.
	ErrIllegalTransition = errors.New("illegal status transition")
	// ErrTooLarge: a value exceeds what the store accepts (see the Max*
	// constants); no write was attempted.
	ErrTooLarge = errors.New("value too large")
	// ErrInvalid: a required argument is missing or malformed.
	ErrInvalid = errors.New("invalid argument")
)

// Table name suffixes; the template names every table "${TablePrefix}<suffix>".
const (
	JobsTableSuffix      = "jobs"
	SessionsTableSuffix  = "sessions"
	SandboxesTableSuffix = "sandboxes"
)

// DefaultRetention is how long finished data (jobs and everything in their
// partition, closed ledger entries, deleted sessions) is kept before
// DynamoDB's TTL removes it.
const DefaultRetention = 30 * 24 * time.Hour

// LocalRegion is the region LocalClient signs for; DynamoDB Local accepts any.
const LocalRegion = "us-east-1"

// Store is safe for concurrent use.
type Store struct {
	db        *dynamodb.Client
	prefix    string
	jobs      string
	sessions  string
	sandboxes string
	retention time.Duration
	pageSize  int32
	stats     *counter
	seqs      seqHints
}

// Option adjusts a Store.
type Option func(*Store)

// WithRetention sets how long finished items live before DynamoDB's TTL
// deletes them (default DefaultRetention).
func WithRetention(d time.Duration) Option {
	return func(s *Store) { s.retention = d }
}

// WithPageSize caps how many items one page of an index query returns
// (default: DynamoDB's 1 MB page). Small pages make every query follow
// LastEvaluatedKey; tests use it to prove they do.
func WithPageSize(n int) Option {
	return func(s *Store) { s.pageSize = int32(n) }
}

// New returns a Store on the tables named prefix+"jobs", prefix+"sessions"
// and prefix+"sandboxes". It uses its own copy of client with a middleware
// that counts calls (see Stats); client itself is not modified.
func New(client *dynamodb.Client, prefix string, opts ...Option) *Store {
	s := &Store{
		prefix:    prefix,
		jobs:      prefix + JobsTableSuffix,
		sessions:  prefix + SessionsTableSuffix,
		sandboxes: prefix + SandboxesTableSuffix,
		retention: DefaultRetention,
		stats:     newCounter(),
	}
	for _, o := range opts {
		o(s)
	}
	s.db = dynamodb.New(client.Options(), func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, s.stats.register)
	})
	return s
}

// NewLocal returns a Store talking to DynamoDB Local (or any
// DynamoDB-compatible endpoint) at endpoint, e.g. "http://127.0.0.1:8000".
func NewLocal(endpoint, prefix string, opts ...Option) *Store {
	return New(LocalClient(endpoint), prefix, opts...)
}

// LocalClient returns a DynamoDB client for a local endpoint, with dummy
// static credentials and LocalRegion: DynamoDB Local checks that requests are
// signed, not by whom.
func LocalClient(endpoint string) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region:       LocalRegion,
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("local", "local", ""),
	})
}

// Prefix returns the table name prefix the Store was created with.
func (s *Store) Prefix() string { return s.prefix }

func (s *Store) now() time.Time { return time.Now() }

// expiry is the TTL value for an item that may go away after the retention.
func (s *Store) expiry(now time.Time) types.AttributeValue {
	return avN(now.Add(s.retention).Unix())
}

// isConditionFailed reports whether err is a refused conditional write; it
// returns the item's current attributes when DynamoDB sent them.
func isConditionFailed(err error) (map[string]types.AttributeValue, bool) {
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return ccf.Item, true
	}
	return nil, false
}

// txReasons returns the cancellation reasons of a cancelled transaction.
func txReasons(err error) ([]types.CancellationReason, bool) {
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		return tce.CancellationReasons, true
	}
	return nil, false
}

func reasonCode(r types.CancellationReason) string { return aws.ToString(r.Code) }

// txConflict reports whether a transaction lost a race with another one on
// the same items (TransactionConflict) and may simply be retried.
func txConflict(reasons []types.CancellationReason) bool {
	for _, r := range reasons {
		if reasonCode(r) == "TransactionConflict" {
			return true
		}
	}
	return false
}

// backoff sleeps before retry attempt n (0-based) of an optimistic loop:
// exponential with full jitter, capped, so contenders spread out.
func backoff(ctx context.Context, n int) error {
	d := 2 * time.Millisecond << min(n, 6)
	t := time.NewTimer(rand.N(d) + time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Attribute value helpers: the store builds items by hand rather than through
// reflection so the stored shape is visible in the code.

func avS(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

func avN(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

func avBool(v bool) types.AttributeValue { return &types.AttributeValueMemberBOOL{Value: v} }

func avTime(t time.Time) types.AttributeValue { return avN(t.UnixMilli()) }

func avStrMap(m map[string]string) types.AttributeValue {
	out := make(map[string]types.AttributeValue, len(m))
	for k, v := range m {
		out[k] = avS(v)
	}
	return &types.AttributeValueMemberM{Value: out}
}

func getS(item map[string]types.AttributeValue, k string) string {
	if v, ok := item[k].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func getN(item map[string]types.AttributeValue, k string) int64 {
	if v, ok := item[k].(*types.AttributeValueMemberN); ok {
		n, _ := strconv.ParseInt(v.Value, 10, 64)
		return n
	}
	return 0
}

func getBool(item map[string]types.AttributeValue, k string) bool {
	if v, ok := item[k].(*types.AttributeValueMemberBOOL); ok {
		return v.Value
	}
	return false
}

// getTime reads a Unix-millisecond attribute; absent means the zero time.
func getTime(item map[string]types.AttributeValue, k string) time.Time {
	if _, ok := item[k]; !ok {
		return time.Time{}
	}
	return time.UnixMilli(getN(item, k)).UTC()
}

// getUnix reads a Unix-second attribute (expires_at); absent means zero.
func getUnix(item map[string]types.AttributeValue, k string) time.Time {
	if _, ok := item[k]; !ok {
		return time.Time{}
	}
	return time.Unix(getN(item, k), 0).UTC()
}

func getStrMap(item map[string]types.AttributeValue, k string) map[string]string {
	m, ok := item[k].(*types.AttributeValueMemberM)
	if !ok {
		return nil
	}
	out := make(map[string]string, len(m.Value))
	for mk, mv := range m.Value {
		if sv, ok := mv.(*types.AttributeValueMemberS); ok {
			out[mk] = sv.Value
		}
	}
	return out
}

// checkID validates a caller-chosen identifier used in a key.
func checkID(what, id string) error {
	if id == "" {
		return fmt.Errorf("%s is empty: %w", what, ErrInvalid)
	}
	if len(id) > 256 {
		return fmt.Errorf("%s is %d bytes, more than 256: %w", what, len(id), ErrInvalid)
	}
	return nil
}
