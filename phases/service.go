package phases

import "time"

// Service is a service block: service "NAME" { stop = STEP | [STEP...]
// serving = CHECK  max_downtime = "30m" }. It names a service's window of
// downtime: from the start of the first of its old instance's stop steps
// to the first pass of the check that says its new instance serves. The
// engine records both ends in the steps' facts (FactDownSince,
// FactServingSince), across kills and resumes; status and report show it.
type Service struct {
	Name string
	// Stop are the steps that stop the old instance, in the order written.
	Stop []Address
	// Serving is the check that passes once the new instance serves.
	Serving Address
	// MaxDowntime is the longest window the runbook accepts (0: no limit).
	MaxDowntime time.Duration
	Range       Range
}

// The facts the engine keeps on a service's steps (StepRecord.Facts):
// RFC 3339 times with nanoseconds, UTC.
const (
	// FactDownSince, on a stop step: when its first attempt began since
	// it was last new or reverted (the old instance has been going down
	// since).
	FactDownSince = "down_since"
	// FactServingSince, on a serving check: when it first passed since it
	// last failed or was reverted.
	FactServingSince = "serving_since"
)
