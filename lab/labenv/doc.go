// Package labenv is the file through which a running lab home server
// (lab/home, `migrate-lab serve`) tells `migrate-lab env` and the demo
// what to export: DIR/lab.env, one KEY=VALUE a line, 0600, there while the
// lab runs.
package labenv
