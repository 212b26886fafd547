// Command migrate-lab is the lab: the stand-in for a home server that the
// tests and the demo migrate (package lab/home), as a program of its own,
// so that migrate itself links none of the lab's Talos and Kubernetes
// libraries and carries no test fixture.
//
//	migrate-lab serve [--dir D] [--address-block B]   # serves until SIGINT/SIGTERM
//	migrate-lab env [--dir D]                         # export lines for eval
//	migrate-lab demo [--dir D] [--keep] [--address-block B] [--no-color]
//
// The demo drives the migrate program beside migrate-lab (or in PATH), as
// a person would, against a lab it serves itself.
//
// SIGUSR1 to a serving lab makes the Matrix federation endpoint fail
// (503), as a homeserver unreachable from the internet; SIGUSR2 heals it.
// `migrate-lab demo` injects its failure so; a person can too (kill -USR1
// PID).
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/homelab-migrate/migrate/views"
)

// Exit codes, as migrate's.
const (
	exitError       = 1
	exitInterrupted = 130
)

func main() {
	a := &app{}
	root := a.rootCommand()
	root.SetArgs(os.Args[1:])
	if err := root.Execute(); err != nil {
		a.view().Error(err)
		code := exitError
		var ce *codeError
		if errors.As(err, &ce) {
			code = ce.code
		}
		os.Exit(code)
	}
}

// codeError carries an exit code other than 1.
type codeError struct {
	code int
	err  error
}

func (e *codeError) Error() string { return e.err.Error() }
func (e *codeError) Unwrap() error { return e.err }

// app holds the global flags and the view.
type app struct {
	noColor bool
	v       *views.View
}

const rootHelp = `migrate-lab is the lab home server that migrate's tests and its demo
migrate: an Incus host holding the old VMs (services, matrix, k3s), whose
VMs booted from the Talos ISO become Talos nodes (a real Kubernetes after
their bootstrap), the host's data directory, an Image Factory and a Matrix
federation endpoint, in one process. It is a test fixture, not a part of
migrate.`

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "migrate-lab",
		Short:         "The lab home server of migrate's tests and demo",
		Long:          rootHelp,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return errors.New("usage: migrate-lab serve|env|reserve|demo [flags] (migrate-lab --help says more)")
		},
	}
	root.PersistentFlags().BoolVar(&a.noColor, "no-color", false, "do not color the output")
	root.AddCommand(a.serveCommand(), a.envCommand(), a.reserveCommand(), a.demoCommand())
	return root
}

func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

func (a *app) colorOn(f *os.File) bool {
	return !a.noColor && os.Getenv("NO_COLOR") == "" && os.Getenv("TERM") != "dumb" && isTerminal(f)
}

// view is where everything but the lab's log goes.
func (a *app) view() *views.View {
	if a.v == nil {
		a.v = views.New(views.Options{
			Stdout:   os.Stdout,
			Stderr:   os.Stderr,
			Color:    a.colorOn(os.Stdout),
			ErrColor: a.colorOn(os.Stderr),
		})
	}
	return a.v
}

// logf writes a line of the lab's log on stderr.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "lab: "+format+"\n", args...)
}
