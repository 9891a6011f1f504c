package crawler

import "github.com/sandstep/sandstep/internal/service/crawler/spec"

// The wire format lives in package spec so that the supervisor can read it
// without linking the crawler; these names keep the crawler's own code short.
type (
	Source   = spec.Source
	Limits   = spec.Limits
	Input    = spec.Input
	Page     = spec.Page
	Skipped  = spec.Skipped
	Stats    = spec.Stats
	Output   = spec.Output
	Progress = spec.Progress
)

var (
	DefaultLimits = spec.DefaultLimits
	ErrInput      = spec.ErrInput
	ReadInput     = spec.ReadInput
	ParseProgress = spec.ParseProgress
)

const (
	RenderAuto       = spec.RenderAuto
	RenderAlways     = spec.RenderAlways
	RenderNever      = spec.RenderNever
	DefaultUserAgent = spec.DefaultUserAgent
	ProgressPrefix   = spec.ProgressPrefix
	StageBrowser     = spec.StageBrowser
	StageCrawl       = spec.StageCrawl
	StatusRunning    = spec.StatusRunning
	StatusComplete   = spec.StatusComplete
	StatusError      = spec.StatusError
	StoppedDone      = spec.StoppedDone
	StoppedDuration  = spec.StoppedDuration
	StoppedPages     = spec.StoppedPages
	StoppedSignal    = spec.StoppedSignal
	ReasonPolicy     = spec.ReasonPolicy
	ReasonFetchError = spec.ReasonFetchError
)
