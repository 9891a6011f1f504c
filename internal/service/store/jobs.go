package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Status is a job's lifecycle state.
type Status string

const (
	StatusQueued    Status = "queued"
	StatusRunning   Status = "running"
	StatusSucceeded Status = "succeeded"
	StatusFailed    Status = "failed"
	StatusCancelled Status = "cancelled"
)

// Terminal reports whether no further status change is allowed.
func (s Status) Terminal() bool {
	return s == StatusSucceeded || s == StatusFailed || s == StatusCancelled
}

// transitions lists, per status, the statuses it may change to.
var transitions = map[Status][]Status{
	StatusQueued:  {StatusRunning, StatusFailed, StatusCancelled},
	StatusRunning: {StatusSucceeded, StatusFailed, StatusCancelled},
}

// CanTransition reports whether a job may go from one status to another.
func CanTransition(from, to Status) bool { return slices.Contains(transitions[from], to) }

// StepID names one of the fixed progress steps of a deep-research job.
type StepID string

const (
	StepSearch   StepID = "search"
	StepSandbox  StepID = "sandbox"
	StepSetup    StepID = "setup"
	StepBrowser  StepID = "browser"
	StepCrawl    StepID = "crawl"
	StepAnalysis StepID = "analysis"
	StepFinalize StepID = "finalize"
	StepCleanup  StepID = "cleanup"
)

// Steps is every step, in the order they run and are shown.
var Steps = []StepID{StepSearch, StepSandbox, StepSetup, StepBrowser, StepCrawl, StepAnalysis, StepFinalize, StepCleanup}

// StepState is the state of one progress step.
type StepState string

const (
	StepPending  StepState = "pending"
	StepRunning  StepState = "running"
	StepComplete StepState = "complete"
	StepError    StepState = "error"
)

// Step is one progress step; Current and Total count work items (crawled
// pages) where that means something, else they are zero.
type Step struct {
	ID        StepID
	State     StepState
	Current   int
	Total     int
	UpdatedAt time.Time
}

// Limits on what a job record holds, so that it stays far below DynamoDB's
// 400 KB item limit.
const (
	MaxRequestBytes = 64 << 10 // a larger request is refused (ErrTooLarge)
	MaxErrorBytes   = 4 << 10  // a longer error message is truncated
	MaxFallbacks    = 32       // distinct fallback names per job
)

// Job is the job record.
type Job struct {
	// ID is the job's internal key (ids.JobKey of Tenant and ClientID):
	// store key, execution name, sandbox name.
	ID     string
	Tenant string
	// ClientID is the id the client knows the job by, unique within its
	// tenant only; "" in records written before keys were per tenant.
	ClientID string
	// Type is the job's kind: "" (deep research, and every record written
	// before there were others) or JobTypeAgent.
	Type string
	// Request is the submitted request, as JSON.
	Request json.RawMessage
	// RequestHash identifies the request for idempotent resubmission.
	RequestHash string
	Status      Status
	Phase       string
	Steps       []Step // always all of Steps, in that order
	Error       string
	// Fallbacks are the degradations taken ("snippets", "raw_extracts"...),
	// sorted.
	Fallbacks         []string
	CancelRequested   bool
	CancelRequestedAt time.Time
	SandboxID         string
	ExecutionID       string
	CreatedAt         time.Time
	UpdatedAt         time.Time
	FinishedAt        time.Time // set when the status becomes terminal
	ExpiresAt         time.Time // when DynamoDB's TTL may delete the job
	// Version grows by one with every change to the record's fields other
	// than steps and the event counter; use it for optimistic concurrency.
	Version int64
	// LastEventSeq is the seq of the newest event (0: none yet).
	LastEventSeq int64
	// Usage is the job's total usage, kept on the record once the job is
	// done (SetJobUsage); nil before. JobUsage reads it at any time.
	Usage *Usage
}

// Step returns the job's step id.
func (j Job) Step(id StepID) Step {
	for _, s := range j.Steps {
		if s.ID == id {
			return s
		}
	}
	return Step{ID: id, State: StepPending}
}

// JobRequest is a deep-research request as kept in Job.Request: normalized,
// defaults applied. The API writes it and the phases read it; it lives with
// the record so that the phase Lambdas need not link the API to read it.
type JobRequest struct {
	Query        string   `json:"query"`
	Mode         string   `json:"mode"`
	Optimization string   `json:"optimization"`
	SeedURLs     []string `json:"seed_urls"`
	// Budget, when set, bounds what the job may spend.
	Budget *JobBudget `json:"budget,omitempty"`
}

// JobBudget is what a job may spend; a zero field is no limit. Once one is
// reached the job stops spending: the crawl stops with what it has, the
// report is written without a model, and the job records the fallback
// "budget_exhausted".
type JobBudget struct {
	// MaxCost is in the [pricing] currency; usage without a price does not
	// count against it.
	MaxCost           float64 `json:"max_cost,omitempty"`
	MaxTokens         int64   `json:"max_tokens,omitempty"`
	MaxSandboxSeconds int64   `json:"max_sandbox_seconds,omitempty"`
}

// NewJob is what CreateJob needs.
type NewJob struct {
	ID          string
	Tenant      string
	ClientID    string
	Type        string
	Request     json.RawMessage
	RequestHash string
}

const skJob = "JOB"

// Job types besides deep research ("").
const JobTypeAgent = "agent"

func jobKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": avS(id), "sk": avS(skJob)}
}

// CreateJob writes a new queued job with every step pending, unless a job
// with that id exists. For an existing job it returns that job and
// created=false; if the existing job has another tenant, client id or
// request hash, the error is ErrConflict (an id reused for a different
// request).
func (s *Store) CreateJob(ctx context.Context, nj NewJob) (job Job, created bool, err error) {
	if err := checkID("job id", nj.ID); err != nil {
		return Job{}, false, err
	}
	if nj.Tenant == "" {
		return Job{}, false, fmt.Errorf("job %s: tenant is empty: %w", nj.ID, ErrInvalid)
	}
	if len(nj.Request) > MaxRequestBytes {
		return Job{}, false, fmt.Errorf("job %s: request is %d bytes, limit %d: %w", nj.ID, len(nj.Request), MaxRequestBytes, ErrTooLarge)
	}
	if !json.Valid(nj.Request) {
		return Job{}, false, fmt.Errorf("job %s: request is not valid JSON: %w", nj.ID, ErrInvalid)
	}
	now := s.now()
	steps := make(map[string]types.AttributeValue, len(Steps))
	for _, id := range Steps {
		steps[string(id)] = stepValue(Step{ID: id, State: StepPending, UpdatedAt: now})
	}
	item := jobKey(nj.ID)
	item["tenant"] = avS(nj.Tenant)
	item[tenantIndexAttr] = avS(nj.Tenant) // lists it (lists.go)
	if nj.ClientID != "" {
		item["client_id"] = avS(nj.ClientID)
	}
	if nj.Type != "" {
		item["type"] = avS(nj.Type)
	}
	item["request"] = avS(string(nj.Request))
	item["request_hash"] = avS(nj.RequestHash)
	item["status"] = avS(string(StatusQueued))
	item["steps"] = &types.AttributeValueMemberM{Value: steps}
	item["created_at"] = avTime(now)
	item["updated_at"] = avTime(now)
	item["version"] = avN(1)
	item["event_seq"] = avN(0)
	item["expires_at"] = s.expiry(now)
	_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                           &s.jobs,
		Item:                                item,
		ConditionExpression:                 aws.String("attribute_not_exists(pk)"),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		return jobFromItem(item), true, nil
	}
	old, ok := isConditionFailed(err)
	if !ok {
		return Job{}, false, fmt.Errorf("create job %s: %w", nj.ID, err)
	}
	if len(old) == 0 {
		if job, err = s.GetJob(ctx, nj.ID); err != nil {
			return Job{}, false, fmt.Errorf("create job %s: exists but: %w", nj.ID, err)
		}
	} else {
		job = jobFromItem(old)
	}
	if job.Tenant != nj.Tenant || job.ClientID != nj.ClientID || job.Type != nj.Type || job.RequestHash != nj.RequestHash {
		return job, false, fmt.Errorf("job %s exists with a different request: %w", nj.ID, ErrConflict)
	}
	return job, false, nil
}

// GetJob reads the job record (strongly consistent). The tenant is in the
// result; checking it is the caller's business.
func (s *Store) GetJob(ctx context.Context, id string) (Job, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      &s.jobs,
		Key:            jobKey(id),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return Job{}, fmt.Errorf("get job %s: %w", id, err)
	}
	if len(out.Item) == 0 {
		return Job{}, fmt.Errorf("job %s: %w", id, ErrNotFound)
	}
	return jobFromItem(out.Item), nil
}

// JobUpdate is a conditional change to a job record. Nil pointers leave a
// field alone; a pointer to "" removes it.
type JobUpdate struct {
	// IfVersion, when non-zero, applies the update only at that version.
	IfVersion int64
	// IfStatus, when set, applies the update only in one of these statuses.
	// With Status set and IfStatus empty, it defaults to every status from
	// which Status is a legal transition.
	IfStatus []Status
	// Status, when set, is the new status; every (IfStatus -> Status) pair
	// must be a legal transition (CanTransition) or nothing is written.
	Status      Status
	Phase       *string
	Error       *string // truncated to MaxErrorBytes
	SandboxID   *string
	ExecutionID *string
	// AddFallbacks records degradations taken; adding one twice is a no-op.
	AddFallbacks []string
}

// UpdateJob applies u atomically and returns the updated job, with Version
// incremented. If the condition does not hold it returns ErrConflict
// together with the job as it is now, so the caller can decide without
// another read; a missing job is ErrNotFound.
func (s *Store) UpdateJob(ctx context.Context, id string, u JobUpdate) (Job, error) {
	from := u.IfStatus
	if u.Status != "" {
		if len(from) == 0 {
			for f := range transitions {
				if CanTransition(f, u.Status) {
					from = append(from, f)
				}
			}
			slices.Sort(from)
		}
		if len(from) == 0 {
			return Job{}, fmt.Errorf("job %s: nothing may become %s: %w", id, u.Status, ErrIllegalTransition)
		}
		for _, f := range from {
			if !CanTransition(f, u.Status) {
				return Job{}, fmt.Errorf("job %s: %s -> %s: %w", id, f, u.Status, ErrIllegalTransition)
			}
		}
	}
	if len(u.AddFallbacks) > MaxFallbacks {
		return Job{}, fmt.Errorf("job %s: %d fallbacks: %w", id, len(u.AddFallbacks), ErrTooLarge)
	}
	now := s.now()
	e := newExpr()
	e.set("updated_at", avTime(now))
	e.add("version", avN(1))
	if u.Status != "" {
		e.set("status", avS(string(u.Status)))
		if u.Status.Terminal() {
			e.set("finished_at", avTime(now))
		}
	}
	e.setOrRemove("phase", u.Phase)
	if u.Error != nil {
		msg := truncate(*u.Error, MaxErrorBytes)
		e.setOrRemove("error", &msg)
	}
	e.setOrRemove("sandbox_id", u.SandboxID)
	e.setOrRemove("execution_id", u.ExecutionID)
	if fb := nonEmpty(u.AddFallbacks); len(fb) > 0 {
		e.add("fallbacks", &types.AttributeValueMemberSS{Value: fb})
	}
	e.cond("attribute_exists(pk)")
	if u.IfVersion != 0 {
		e.cond(e.name("version") + " = " + e.value(avN(u.IfVersion)))
	}
	if len(from) > 0 {
		e.condIn("status", statusValues(from))
	}
	out, err := s.db.UpdateItem(ctx, e.update(s.jobs, jobKey(id)))
	if err != nil {
		return s.jobConflict(ctx, id, "update", err)
	}
	job := jobFromItem(out.Attributes)
	if u.Status.Terminal() {
		// Every way a job ends comes through here, once (the transition's
		// condition lets one writer through): its concurrent_jobs slot
		// goes back. A release lost to a crash is the reaper's
		// (quota.Reconcile), so it does not fail the update that ended
		// the job.
		_ = s.ReleaseSlot(context.WithoutCancel(ctx), job.Tenant, QuotaConcurrentJobs, job.ID)
	}
	return job, nil
}

// SetStatus moves the job from one of the from statuses to to (see
// UpdateJob for the errors).
func (s *Store) SetStatus(ctx context.Context, id string, from []Status, to Status) (Job, error) {
	return s.UpdateJob(ctx, id, JobUpdate{IfStatus: from, Status: to})
}

// RequestCancel marks a queued or running job for cancellation; phases see
// CancelRequested and stop. Asking again is harmless. A finished job cannot
// be cancelled: ErrConflict, with the job.
func (s *Store) RequestCancel(ctx context.Context, id string) (Job, error) {
	now := s.now()
	e := newExpr()
	e.set("cancel_requested", avBool(true))
	e.set("cancel_requested_at", avTime(now))
	e.set("updated_at", avTime(now))
	e.add("version", avN(1))
	e.cond("attribute_exists(pk)")
	e.condIn("status", statusValues([]Status{StatusQueued, StatusRunning}))
	e.cond("(attribute_not_exists(" + e.name("cancel_requested") + ") OR " + e.name("cancel_requested") + " = " + e.value(avBool(false)) + ")")
	out, err := s.db.UpdateItem(ctx, e.update(s.jobs, jobKey(id)))
	if err == nil {
		return jobFromItem(out.Attributes), nil
	}
	job, err := s.jobConflict(ctx, id, "cancel", err)
	if job.CancelRequested && !job.Status.Terminal() {
		return job, nil
	}
	return job, err
}

// SetStep records a step's state and progress and returns the job, so a
// phase learns about a cancel request from the same call. A step that is
// complete stays complete: a late progress update cannot move it back
// (ErrConflict). Steps do not change the job's Version.
func (s *Store) SetStep(ctx context.Context, id string, step Step) (Job, error) {
	if !slices.Contains(Steps, step.ID) {
		return Job{}, fmt.Errorf("job %s: unknown step %q: %w", id, step.ID, ErrInvalid)
	}
	switch step.State {
	case StepPending, StepRunning, StepComplete, StepError:
	default:
		return Job{}, fmt.Errorf("job %s: step %s: unknown state %q: %w", id, step.ID, step.State, ErrInvalid)
	}
	now := s.now()
	step.UpdatedAt = now
	e := newExpr()
	path := e.name("steps") + "." + e.name(string(step.ID))
	e.setPath(path, stepValue(step))
	e.set("updated_at", avTime(now))
	e.cond("attribute_exists(pk)")
	if step.State != StepComplete {
		e.cond(path + "." + e.name("state") + " <> " + e.value(avS(string(StepComplete))))
	}
	out, err := s.db.UpdateItem(ctx, e.update(s.jobs, jobKey(id)))
	if err != nil {
		return s.jobConflict(ctx, id, "set step "+string(step.ID), err)
	}
	return jobFromItem(out.Attributes), nil
}

// jobConflict turns a failed conditional update into ErrNotFound or
// ErrConflict plus the current job.
func (s *Store) jobConflict(ctx context.Context, id, op string, err error) (Job, error) {
	old, ok := isConditionFailed(err)
	if !ok {
		return Job{}, fmt.Errorf("%s job %s: %w", op, id, err)
	}
	if len(old) == 0 {
		// DynamoDB returns no item when there is none (or when the
		// implementation does not honour ALL_OLD): tell which.
		job, gerr := s.GetJob(ctx, id)
		if gerr != nil {
			return Job{}, gerr
		}
		return job, fmt.Errorf("%s job %s (status %s, version %d): %w", op, id, job.Status, job.Version, ErrConflict)
	}
	job := jobFromItem(old)
	return job, fmt.Errorf("%s job %s (status %s, version %d): %w", op, id, job.Status, job.Version, ErrConflict)
}

func statusValues(ss []Status) []types.AttributeValue {
	out := make([]types.AttributeValue, len(ss))
	for i, st := range ss {
		out[i] = avS(string(st))
	}
	return out
}

func stepValue(st Step) types.AttributeValue {
	return &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
		"state":      avS(string(st.State)),
		"current":    avN(int64(st.Current)),
		"total":      avN(int64(st.Total)),
		"updated_at": avTime(st.UpdatedAt),
	}}
}

func jobFromItem(item map[string]types.AttributeValue) Job {
	j := Job{
		ID:                getS(item, "pk"),
		Tenant:            getS(item, "tenant"),
		ClientID:          getS(item, "client_id"),
		Type:              getS(item, "type"),
		RequestHash:       getS(item, "request_hash"),
		Status:            Status(getS(item, "status")),
		Phase:             getS(item, "phase"),
		Error:             getS(item, "error"),
		CancelRequested:   getBool(item, "cancel_requested"),
		CancelRequestedAt: getTime(item, "cancel_requested_at"),
		SandboxID:         getS(item, "sandbox_id"),
		ExecutionID:       getS(item, "execution_id"),
		CreatedAt:         getTime(item, "created_at"),
		UpdatedAt:         getTime(item, "updated_at"),
		FinishedAt:        getTime(item, "finished_at"),
		ExpiresAt:         getUnix(item, "expires_at"),
		Version:           getN(item, "version"),
		LastEventSeq:      getN(item, "event_seq"),
		Usage:             usageOf(item),
	}
	if r := getS(item, "request"); r != "" {
		j.Request = json.RawMessage(r)
	}
	if fb, ok := item["fallbacks"].(*types.AttributeValueMemberSS); ok {
		j.Fallbacks = slices.Sorted(slices.Values(fb.Value))
	}
	steps, _ := item["steps"].(*types.AttributeValueMemberM)
	for _, id := range Steps {
		st := Step{ID: id, State: StepPending}
		if steps != nil {
			if m, ok := steps.Value[string(id)].(*types.AttributeValueMemberM); ok {
				st.State = StepState(getS(m.Value, "state"))
				st.Current = int(getN(m.Value, "current"))
				st.Total = int(getN(m.Value, "total"))
				st.UpdatedAt = getTime(m.Value, "updated_at")
			}
		}
		j.Steps = append(j.Steps, st)
	}
	return j
}

// truncate cuts s to at most max bytes on a rune boundary, marking the cut.
func truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	const mark = "…[truncated]"
	cut := max - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

func nonEmpty(ss []string) []string {
	var out []string
	for _, s := range ss {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// expr builds an UpdateItem's expressions with generated placeholders, so
// attribute names never collide with DynamoDB's reserved words.
type expr struct {
	sets    []string
	removes []string
	adds    []string
	conds   []string
	names   map[string]string
	values  map[string]types.AttributeValue
}

func newExpr() *expr {
	return &expr{names: map[string]string{}, values: map[string]types.AttributeValue{}}
}

func (e *expr) name(attr string) string {
	for ph, a := range e.names {
		if a == attr {
			return ph
		}
	}
	ph := "#n" + strconv.Itoa(len(e.names))
	e.names[ph] = attr
	return ph
}

func (e *expr) value(v types.AttributeValue) string {
	ph := ":v" + strconv.Itoa(len(e.values))
	e.values[ph] = v
	return ph
}

func (e *expr) set(attr string, v types.AttributeValue) {
	e.setPath(e.name(attr), v)
}

func (e *expr) setPath(path string, v types.AttributeValue) {
	e.sets = append(e.sets, path+" = "+e.value(v))
}

// setExpr adds a SET clause with a raw right-hand side.
func (e *expr) setExpr(attr, rhs string) {
	e.sets = append(e.sets, e.name(attr)+" = "+rhs)
}

func (e *expr) setOrRemove(attr string, v *string) {
	switch {
	case v == nil:
	case *v == "":
		e.remove(attr)
	default:
		e.set(attr, avS(*v))
	}
}

func (e *expr) remove(attr string) { e.removes = append(e.removes, e.name(attr)) }

func (e *expr) add(attr string, v types.AttributeValue) {
	e.adds = append(e.adds, e.name(attr)+" "+e.value(v))
}

func (e *expr) cond(c string) { e.conds = append(e.conds, c) }

func (e *expr) condIn(attr string, vs []types.AttributeValue) {
	phs := make([]string, len(vs))
	for i, v := range vs {
		phs[i] = e.value(v)
	}
	e.cond(e.name(attr) + " IN (" + strings.Join(phs, ", ") + ")")
}

func (e *expr) updateExpression() string {
	var parts []string
	if len(e.sets) > 0 {
		parts = append(parts, "SET "+strings.Join(e.sets, ", "))
	}
	if len(e.removes) > 0 {
		parts = append(parts, "REMOVE "+strings.Join(e.removes, ", "))
	}
	if len(e.adds) > 0 {
		parts = append(parts, "ADD "+strings.Join(e.adds, ", "))
	}
	return strings.Join(parts, " ")
}

func (e *expr) condition() *string {
	if len(e.conds) == 0 {
		return nil
	}
	return aws.String(strings.Join(e.conds, " AND "))
}

func (e *expr) valuesOrNil() map[string]types.AttributeValue {
	if len(e.values) == 0 {
		return nil
	}
	return e.values
}

// update returns an UpdateItem input that returns the new item, or the old
// one when the condition fails.
func (e *expr) update(table string, key map[string]types.AttributeValue) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		TableName:                           aws.String(table),
		Key:                                 key,
		UpdateExpression:                    aws.String(e.updateExpression()),
		ConditionExpression:                 e.condition(),
		ExpressionAttributeNames:            e.names,
		ExpressionAttributeValues:           e.valuesOrNil(),
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}
