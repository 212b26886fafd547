// Command migrate plans, runs and rolls back home-lab migrations written as
// HCL runbooks. Each command lives in its own file: it parses its flags,
// calls the engine and hands the result to a view (package views). What
// the commands share is apart, one concern a file: app.go (the global
// flags, the view, the logger), registry.go (the providers), runbook.go
// (loading the runbook, making the engine), backend.go (where the state
// lives), session.go (what run and rollback share), signals.go (Ctrl-C,
// SIGTERM, SIGHUP) and prompt.go (the questions asked at the terminal).
//
// It carries no lab: the lab home server and the demo are the program
// migrate-lab (cmd/migrate-lab), and tests/deps keeps this package from
// importing lab/ or examples.
package main

import (
	"errors"
	"os"
	"strconv"

	"github.com/homelab-migrate/migrate/engine"
)

// version is set at build time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

// Exit codes, documented in the root command's help.
const (
	exitOK          = 0
	exitError       = 1
	exitChanges     = 2
	exitInterrupted = 130
)

func main() {
	os.Exit(realMain(os.Args[1:]))
}

func realMain(args []string) int {
	app := newApp()
	root := app.rootCommand()
	root.SetArgs(args)
	err := root.Execute()
	if err != nil && !isReported(err) {
		app.view().Error(err)
	}
	return exitCode(err)
}

// codeError carries an exit code; with a nil err, whatever went wrong was
// already shown (diagnostics, a plan with changes).
type codeError struct {
	code int
	err  error
}

func (e *codeError) Error() string {
	if e.err == nil {
		return "exit status " + strconv.Itoa(e.code)
	}
	return e.err.Error()
}

func (e *codeError) Unwrap() error { return e.err }

// reported is an error that has been shown already; only its code is left.
func reported(code int) error { return &codeError{code: code} }

func isReported(err error) bool {
	var ce *codeError
	return errors.As(err, &ce) && ce.err == nil
}

// exitCode maps a command's error to the process exit code.
func exitCode(err error) int {
	var ce *codeError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ce):
		return ce.code
	case errors.Is(err, engine.ErrInterrupted):
		return exitInterrupted
	}
	return exitError
}
