// Package state keeps what a migration has done: a versioned JSON snapshot
// of every step's record plus an append-only, fsynced journal of changes to
// those records, folded into the snapshot when the state is opened and when
// a command ends. A checkpoint is one journal append, so its cost does not
// grow with the number of steps.
//
// The engine talks to a Manager; Local is the default backend, a directory
// beside the runbook (.migrate/). A Lock guards every writing command.
package state
