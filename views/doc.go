// Package views renders what cmd/migrate has to show: diagnostics, plans,
// the live progress of a run or rollback (as a terminal view, plain lines or
// a JSON event stream), the status of a migration, the graph of a runbook,
// the report's timeline of the runs (timeline.go) and the raw state. Only views write to stdout; the commands in cmd/migrate
// parse flags, call the engine and hand the results here.
//
// Views never see a sensitive value in clear: the engine redacts events and
// plans before they arrive, and views print nothing else of a runbook.
//
// The lab's program, migrate-lab, speaks through views too (demo.go): the
// demo's narration, and what its serve and env commands print.
package views
