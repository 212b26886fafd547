package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/charmbracelet/log"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/helm/helmschema"
	"github.com/homelab-migrate/migrate/providers/incus"
	"github.com/homelab-migrate/migrate/providers/local"
	"github.com/homelab-migrate/migrate/providers/plugin"
	"github.com/homelab-migrate/migrate/providers/talos/talosschema"
	"github.com/homelab-migrate/migrate/runbooks"
	"github.com/homelab-migrate/migrate/secret"
	"github.com/homelab-migrate/migrate/state"
	"github.com/homelab-migrate/migrate/views"
)

// registry lists the providers: the one place to add one. local and incus
// are built in (small); talos and helm run as plugin programs beside
// migrate, because their libraries would otherwise weigh on every migrate
// process (see providers/plugin). Their schemas are compiled in, so
// validate, plan of other providers' steps, graph and status start none.
func registry() map[string]providers.Factory {
	r := map[string]providers.Factory{
		"local": func() providers.Interface { return local.New() },
		"incus": incus.Factory,
	}
	for _, p := range pluginPrograms {
		r[p.Name] = plugin.Factory(p)
	}
	return r
}

// pluginPrograms are the providers that run as programs of their own.
var pluginPrograms = []plugin.Program{
	{Name: talosschema.TypeName, Command: "migrate-provider-talos", Schema: talosschema.Schema, Env: []string{providers.AgeIdentityEnv}},
	{Name: helmschema.TypeName, Command: "migrate-provider-helm", Schema: helmschema.Schema, Env: []string{providers.AgeIdentityEnv}},
}

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

// varFlags are the variable options of the commands that load a runbook.
type varFlags struct {
	vars, files []string
	// optional: a command that only reads the runbook's shape or the state
	// (validate, graph, status) needs its phases and steps, not the values
	// of its variables: those without one stay unknown.
	optional bool
}

func (f *varFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringArrayVar(&f.vars, "var", nil, "set a variable: `NAME=VALUE` (repeatable); MIGRATE_VAR_NAME in the environment works too")
	cmd.Flags().StringArrayVar(&f.files, "var-file", nil, "read variables from an HCL `FILE` of NAME = VALUE lines (repeatable)")
}

func (a *app) dir() (string, error) {
	d, err := filepath.Abs(a.runbookDir)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(d)
	if err != nil {
		return "", fmt.Errorf("runbook directory: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("runbook directory %s is not a directory", d)
	}
	return d, nil
}

func (a *app) stateDir() (string, error) {
	if a.statePath != "" {
		return filepath.Abs(a.statePath)
	}
	d, err := a.dir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, ".migrate"), nil
}

// load reads the runbook and prints its diagnostics; an error means the
// runbook cannot be used (and was reported).
func (a *app) load(vf varFlags) (*phases.Runbook, error) {
	dir, err := a.dir()
	if err != nil {
		return nil, err
	}
	limitMemory(dir)
	schemas := map[string]phases.Schema{}
	for name, f := range registry() {
		schemas[name] = f().Schema()
	}
	ld := runbooks.NewLoader(os.DirFS(dir), runbooks.Options{
		Dir:      dir,
		Schemas:  schemas,
		Vars:     vf.vars,
		VarFiles: vf.files,
		Environ:  os.Environ(),

		UnsetVarsUnknown: vf.optional,
	})
	rb, diags := ld.Load()
	if a.etcdPassword != "" {
		rb.Secrets = append(rb.Secrets, a.etcdPassword)
	}
	// Diagnostics pass the scrubber the engine uses for everything else.
	scrub := &secret.Scrubber{}
	scrub.Add(rb.Secrets...)
	a.view().SetScrubber(scrub.Text)
	a.view().SetFiles(ld.Files())
	a.view().Diagnostics(diags)
	if diags.HasErrors() {
		return nil, reported(exitError)
	}
	a.logger().Debug("runbook loaded", "dir", dir, "phases", len(rb.Phases))
	return rb, nil
}

// openState opens the state of the runbook (its backend block, unless
// --backend or MIGRATE_BACKEND say otherwise) read-only, or with the lock
// for a command that writes.
func (a *app) openState(ctx context.Context, rb *phases.Runbook, writable bool) (stateStore, *phases.BackendConfig, error) {
	b, err := a.backendFor(rb)
	if err != nil {
		return nil, nil, err
	}
	st, err := a.openBackend(ctx, b, writable)
	return st, b, err
}

// closeState persists and unlocks; a failure is shown at once and turns
// success into exit code 1.
func (a *app) closeState(st io.Closer, err *error) {
	if cerr := st.Close(); cerr != nil {
		a.view().Error(fmt.Errorf("saving the state: %w", cerr))
		if *err == nil {
			*err = reported(exitError)
		}
	}
}

// engine makes the engine and prints its diagnostics.
func (a *app) engine(ctx context.Context, rb *phases.Runbook, st state.Manager, parallelism int, lg *state.Log, hooks ...engine.Hook) (*engine.Engine, error) {
	e, diags := engine.New(ctx, engine.Options{
		Runbook:     rb,
		Factories:   registry(),
		State:       st,
		Hooks:       hooks,
		Parallelism: parallelism,
		Log:         lg,
	})
	a.view().Diagnostics(diags)
	if diags.HasErrors() {
		return nil, reported(exitError)
	}
	return e, nil
}

// commandLine is the command recorded in the lock: the values of --var
// are left out, as they may be secrets.
func commandLine(args []string) string {
	out := make([]string, 0, len(args))
	hide := false
	for i, s := range args {
		switch {
		case i == 0:
			s = filepath.Base(s)
		case hide:
			name, _, _ := strings.Cut(s, "=")
			s = name + "=…"
			hide = false
		case s == "--var" || s == "-var":
			hide = true
		case strings.HasPrefix(s, "--var=") || strings.HasPrefix(s, "-var="):
			flag, val, _ := strings.Cut(s, "=")
			name, _, _ := strings.Cut(val, "=")
			s = flag + "=" + name + "=…"
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

// approver is user@host, recorded with approvals.
func approver() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + host
}

// stopSignals are the signals that stop migrate gently: Ctrl-C, SIGTERM,
// and SIGHUP (the terminal is gone: an SSH session dropped) unless it was
// ignored when migrate started (nohup), which Notify would undo.
func stopSignals() []os.Signal {
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	return sigs
}

// interrupts turns SIGINT, SIGTERM and SIGHUP into the engine's two
// contexts: the first stops gently, the second cancels the running steps.
// A hangup never aborts: one comes from the kernel and another from the
// shell. release undoes it.
func interrupts(notify func(abort bool)) (stop, cancel context.Context, release func()) {
	cancel, cancelFn := context.WithCancel(context.Background())
	stop, stopFn := context.WithCancel(cancel)
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, stopSignals()...)
	// With the terminal gone, writing to it fails: with EPIPE on a pipe
	// (ssh without a terminal), which would kill migrate with SIGPIPE
	// before it saves. Caught, it is only a failed write, which the views
	// ignore. (Caught, not ignored: an ignored signal stays ignored in
	// the commands that steps run.)
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	done := make(chan struct{})
	go func() {
		n := 0
		for {
			select {
			case <-done:
				return
			case sig := <-ch:
				if sig == syscall.SIGHUP && n > 0 {
					continue
				}
				n++
				switch n {
				case 1:
					notify(false)
					stopFn()
				case 2:
					notify(true)
					cancelFn()
				}
			}
		}
	}()
	var once sync.Once
	return stop, cancel, func() {
		once.Do(func() {
			// The signals stay caught (and dropped) until migrate exits:
			// a late hangup or broken pipe must not kill it while it
			// saves the state.
			close(done)
			stopFn()
			cancelFn()
		})
	}
}

// readLine reads one line from stdin, giving up when ctx ends.
func (a *app) readLine(ctx context.Context) (string, error) {
	type result struct {
		s   string
		err error
	}
	ch := make(chan result, 1)
	go func() {
		s, err := a.stdin.ReadString('\n')
		if err == io.EOF && s != "" {
			err = nil
		}
		ch <- result{strings.TrimSpace(s), err}
	}()
	select {
	case r := <-ch:
		return r.s, r.err
	case <-ctx.Done():
		return "", engine.ErrInterrupted
	}
}

// confirm asks the person at the terminal to type yes. Without a
// terminal it fails, naming the flag that skips the question.
func (a *app) confirm(ctx context.Context, w io.Writer, question, what string) error {
	if !isTerminal(os.Stdin) {
		return fmt.Errorf("cannot ask whether to %s: stdin is not a terminal; rerun with --auto-approve to %s without asking", what, what)
	}
	a.inMu.Lock()
	defer a.inMu.Unlock()
	views.Confirm(w, question)
	answer, err := a.readLine(ctx)
	fmt.Fprintln(w)
	if err != nil {
		return err
	}
	if !isYes(answer) {
		return fmt.Errorf("cancelled: nothing was changed")
	}
	return nil
}

// isYes: one convention for every question that lets migrate go on (run
// and rollback confirmations, approval steps), terraform's: only "yes".
func isYes(answer string) bool { return answer == "yes" }

// prompter returns the engine's question for approval steps when stdin is
// a terminal, and nil otherwise.
func (a *app) prompter(ctx context.Context, w io.Writer, rv views.RunView) func(string) (bool, error) {
	if !isTerminal(os.Stdin) {
		return nil
	}
	return func(q string) (bool, error) {
		a.inMu.Lock()
		defer a.inMu.Unlock()
		resume := rv.Pause()
		defer resume()
		views.Confirm(w, q)
		answer, err := a.readLine(ctx)
		fmt.Fprintln(w)
		if err != nil {
			return false, err
		}
		return isYes(answer), nil
	}
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

// interrupted turns the error of a run stopped by a signal into exit code
// 130, whatever the steps cancelled under it reported.
func interrupted(stop context.Context, err error) error {
	if err != nil && stop.Err() != nil && !errors.Is(err, engine.ErrInterrupted) {
		return &codeError{code: exitInterrupted, err: fmt.Errorf("%w (%v)", engine.ErrInterrupted, err)}
	}
	return err
}
