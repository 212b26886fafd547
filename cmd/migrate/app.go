package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/charmbracelet/log"
	"golang.org/x/term"

	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/secret"
	"github.com/homelab-migrate/migrate/views"
)

// app holds the global flags and what every command shares: the view, the
// logger and the terminal.
type app struct {
	runbookDir string
	statePath  string
	noColor    bool
	logLevel   string
	// ageIdentity is --age-identity: a path, put in MIGRATE_AGE_IDENTITY
	// for the whole command, provider programs included.
	ageIdentity string
	// backendURL is --backend: where the state lives, overriding
	// MIGRATE_BACKEND and the runbook's backend block.
	backendURL string
	// etcdPassword is MIGRATE_ETCD_PASSWORD, taken out of the
	// environment at start (see readPasswordEnv).
	etcdPassword string

	v     *views.View
	log   *log.Logger
	stdin *bufio.Reader
	inMu  sync.Mutex // one question at a time
}

func newApp() *app {
	return &app{stdin: bufio.NewReader(os.Stdin)}
}

func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// setup makes the view and the logger once the global flags are known.
func (a *app) setup() error {
	lvl, err := log.ParseLevel(a.logLevel)
	if err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", a.logLevel)
	}
	if a.ageIdentity != "" {
		p, err := filepath.Abs(a.ageIdentity)
		if err == nil {
			_, err = os.Stat(p)
		}
		if err != nil {
			return fmt.Errorf("--age-identity: %w", err)
		}
		// Steps' commands do not inherit it (providers.Environ).
		os.Setenv(providers.AgeIdentityEnv, p)
	}
	a.readPasswordEnv()
	a.v = nil // made again now that --no-color is known
	// The logger gets stderr behind a plain io.Writer: given the terminal
	// itself, it would query the terminal's colors and wait seconds for an
	// answer that may never come. Its lines are therefore never colored.
	a.log = log.NewWithOptions(struct{ io.Writer }{os.Stderr}, log.Options{Level: lvl, Prefix: "migrate"})
	return nil
}

func (a *app) colorOn(f *os.File) bool {
	return !a.noColor && os.Getenv("NO_COLOR") == "" && os.Getenv("TERM") != "dumb" && isTerminal(f)
}

// view returns the view, making a default one when flags could not be
// parsed.
func (a *app) view() *views.View {
	if a.v == nil {
		width := 0
		if isTerminal(os.Stdout) {
			if w, _, err := term.GetSize(int(os.Stdout.Fd())); err == nil {
				width = w
			}
		}
		a.v = views.New(views.Options{
			Stdout:      os.Stdout,
			Stderr:      os.Stderr,
			Color:       a.colorOn(os.Stdout),
			ErrColor:    a.colorOn(os.Stderr),
			Width:       width,
			Interactive: isTerminal(os.Stdout) && os.Getenv("TERM") != "dumb",
		})
		if a.etcdPassword != "" {
			scrub := &secret.Scrubber{}
			scrub.Add(a.etcdPassword)
			a.v.SetScrubber(scrub.Text)
		}
	}
	return a.v
}

func (a *app) logger() *log.Logger {
	if a.log == nil {
		a.log = log.NewWithOptions(io.Discard, log.Options{})
	}
	return a.log
}

// runMode chooses how progress is shown.
func (a *app) runMode(asJSON bool) views.RunMode {
	switch {
	case asJSON:
		return views.RunJSON
	case isTerminal(os.Stdout) && os.Getenv("TERM") != "dumb":
		return views.RunLive
	}
	return views.RunPlain
}
