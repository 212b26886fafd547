// Package edit changes age-sealed files beside a runbook without leaving
// their clear text behind: Edit runs $EDITOR on a private clear copy (a
// 0600 file in a 0700 directory in memory where there is one), seals the
// result again and shreds the copy whatever happens; the next edit sweeps
// away the copy of an edit whose migrate was killed. WriteFile and
// WriteNew write sealed files 0600, never seen half written, WriteNew
// all or none. migrate secrets (cmd/migrate) is its front end.
package edit
