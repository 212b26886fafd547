package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// execAttrs are an exec step's attributes.
type execAttrs struct {
	Command []string          `cty:"command" required:"true" doc:"The argv to run; the first element is looked up in PATH."`
	Env     map[string]string `cty:"env" doc:"Environment variables added to migrate's own (which lacks MIGRATE_VAR_* and MIGRATE_AGE_IDENTITY: pass what a command needs here)."`
	Dir     string            `cty:"dir" doc:"Working directory, relative to the runbook directory."`
	Revert  []string          `cty:"revert" doc:"The argv rollback runs to undo the command, with the same env and dir."`
	Creates string            `cty:"creates" doc:"A path, relative to dir; the command is skipped when it exists."`
	// RevertCreates is the revert's own observation: made last by the
	// revert, it says a resumed revert finished.
	RevertCreates string `cty:"revert_creates" doc:"A path, relative to dir, that the revert makes last: a revert resumed after an interruption is skipped when it exists."`
}

type execOutputs struct {
	ExitCode int `cty:"exit_code"`
}

var execStep = &sdk.StepType[*Provider, execAttrs, none, revertData]{
	Name:        Exec,
	Description: "Runs a command given as an argv list; no shell unless the argv asks for one (\"sh\", \"-c\", ...).",
	Rollback:    "Runs revert (an argv, which must be safe to run twice), skipped when revert_creates exists after an interrupted revert; without revert the step is listed as irreversible.",
	Outputs:     execOutputs{},
	CanCheck:    true,
	Unknowns:    true, // the plan shows what is known of the command
	Validate:    validateExec,
	Read:        readExec,
	Plan:        planExec,
	Apply:       applyExec,
	Revert:      revertExec,
	// A script it runs joins its input hash (script.go).
	Digest: digestExec,
}

func validateExec(c *call, a *execAttrs) phases.Diagnostics {
	d := checkArgv(c, "command", a.Command)
	if !c.Null("revert") {
		d = append(d, checkArgv(c, "revert", a.Revert)...)
	} else if !c.Null("revert_creates") {
		d = append(d, invalid("The \"revert_creates\" attribute of %s says what the revert command makes, but the step has no \"revert\": add one, or remove revert_creates.", c.Addr)...)
	}
	for _, k := range sortedKeys(a.Env) {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			d = append(d, invalid("The \"env\" attribute of %s has an invalid variable name %q: it must be non-empty and contain no \"=\".", c.Addr, k)...)
		}
		if strings.ContainsRune(a.Env[k], 0) {
			d = append(d, invalid("The \"env\" attribute of %s has a value with a NUL byte (variable %q).", c.Addr, k)...)
		}
	}
	return d
}

func checkArgv(c *call, name string, argv []string) phases.Diagnostics {
	if argv == nil && c.Unknown(name) {
		return nil
	}
	if len(argv) == 0 {
		return invalid("The %q attribute of %s must list at least the program to run, as in [\"./script.sh\", \"arg\"].", name, c.Addr)
	}
	if argv[0] == "" {
		return invalid("The %q attribute of %s starts with an empty program name.", name, c.Addr)
	}
	for i, a := range argv {
		if strings.ContainsRune(a, 0) {
			return invalid("Element %d of the %q attribute of %s contains a NUL byte.", i, name, c.Addr)
		}
	}
	return nil
}

// environ is the env attribute as KEY=VALUE strings.
func environ(env map[string]string) []string {
	var out []string
	for _, k := range sortedKeys(env) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// workdir resolves a step's dir against the runbook directory.
func (p *Provider) workdir(dir string) string {
	if dir == "" || filepath.IsAbs(dir) {
		if dir == "" {
			return p.dir
		}
		return dir
	}
	return filepath.Join(p.dir, dir)
}

func under(dir, path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(dir, path)
}

func planExec(_ context.Context, c *call, a execAttrs, _ *sdk.Prior[none, revertData]) sdk.Plan[none] {
	var b strings.Builder
	b.WriteString("run: " + showArgv(c, "command", a.Command))
	if !c.Null("dir") {
		b.WriteString("\ndir: " + c.Shown(a.Dir, "dir"))
	}
	if a.Env == nil && c.Unknown("env") {
		b.WriteString("\nenv: " + sdk.UnknownText)
	} else if len(a.Env) > 0 {
		b.WriteString("\nenv:")
		for _, k := range sortedKeys(a.Env) {
			b.WriteString(" " + k + "=" + c.Shown(a.Env[k], "env", k))
		}
	}
	if !c.Null("creates") {
		b.WriteString("\ncreates: " + c.Shown(a.Creates, "creates"))
	}
	if !c.Null("revert") {
		b.WriteString("\nrevert: " + showArgv(c, "revert", a.Revert))
	}
	if !c.Null("revert_creates") {
		b.WriteString("\nrevert creates: " + c.Shown(a.RevertCreates, "revert_creates"))
	}
	// Warned at plan only: Validate runs at every read and apply too.
	r := sdk.Plan[none]{Diff: b.String(), Diagnostics: append(c.ArgvWarning("command", len(a.Command)), c.ArgvWarning("revert", len(a.Revert))...)}
	if c.Null("revert") {
		r.Irreversible = "no revert command"
	}
	return r
}

func readExec(_ context.Context, c *call, a execAttrs, _ *sdk.Prior[none, revertData]) sdk.Read[revertData] {
	if c.Null("creates") || c.Unknown("creates") || c.Unknown("dir") {
		return sdk.Read[revertData]{Observation: providers.Unknown}
	}
	_, err := os.Stat(under(c.Settings.workdir(a.Dir), a.Creates))
	switch {
	case err == nil:
		// Found after an interruption, the step is adopted without
		// running again; it must still know how to be undone.
		return sdk.Read[revertData]{Observation: providers.Present, Revert: revertOf(c, a), Outputs: execOutputs{}}
	case errors.Is(err, fs.ErrNotExist):
		return sdk.Read[revertData]{Observation: providers.Absent, Detail: c.Shown(a.Creates, "creates") + " does not exist"}
	}
	return sdk.Read[revertData]{Observation: providers.Unknown, Detail: err.Error()}
}

func applyExec(ctx context.Context, c *call, a execAttrs, _ none, _ *sdk.Prior[none, revertData]) sdk.Apply[none, revertData] {
	inv := revertOf(c, a)
	dir := c.Settings.workdir(a.Dir)
	if !c.Null("creates") {
		if _, err := os.Stat(under(dir, a.Creates)); err == nil {
			c.Log.Printf("%s: skipped, %s exists", c.Addr, c.Shown(a.Creates, "creates"))
			return sdk.Apply[none, revertData]{Outputs: execOutputs{}, Revert: inv}
		}
	}
	out := newOutput(c.Log, c.Scrub)
	code, err := c.Settings.run(ctx, a.Command, environ(a.Env), dir, out)
	if err != nil {
		return sdk.Apply[none, revertData]{Outputs: execOutputs{code}, Diagnostics: runFailed(ctx, c.Addr, "Command", showArgv(c, "command", a.Command), err, out)}
	}
	return sdk.Apply[none, revertData]{Outputs: execOutputs{code}, Revert: inv}
}

// exitError is returned by run when the command ran but failed.
type exitError struct {
	code   int
	signal syscall.Signal // non-zero when killed by a signal
}

func (e *exitError) Error() string {
	if e.signal != 0 {
		return "was killed by signal " + e.signal.String()
	}
	return fmt.Sprintf("exited with code %d", e.code)
}

// runFailed explains why a command did not succeed.
func runFailed(ctx context.Context, addr phases.Address, what, argv string, err error, out *output) phases.Diagnostics {
	var detail string
	var ee *exitError
	switch {
	case ctx.Err() != nil:
		detail = fmt.Sprintf("%s was stopped before %s finished (%v); it and every process it started were killed.", addr, argv, context.Cause(ctx))
		return phases.Errorf("Step Interrupted", "%s", detail)
	case errors.As(err, &ee):
		detail = fmt.Sprintf("%s: %s %v.", addr, argv, ee)
	default:
		detail = fmt.Sprintf("%s: %s could not be started: %v.", addr, argv, err)
	}
	if t := out.tail(); t != "" {
		detail += "\nLast lines of output:" + t
	}
	return phases.Errorf(what+" Failed", "%s", detail)
}

// revertData is an exec step's Revert.Data. Sensitive values are not
// kept: their places are listed and Revert takes them from the step's
// configuration again.
type revertData struct {
	Argv       []string          `json:"argv"`
	Env        map[string]string `json:"env,omitempty"`
	Dir        string            `json:"dir,omitempty"`
	SecretArgv []int             `json:"secret_argv,omitempty"`
	SecretEnv  []string          `json:"secret_env,omitempty"`
	SecretDir  bool              `json:"secret_dir,omitempty"`
	// Creates is revert_creates; a sensitive one is taken from the
	// configuration again, like the other secrets.
	Creates       string `json:"creates,omitempty"`
	SecretCreates bool   `json:"secret_creates,omitempty"`
}

func revertOf(c *call, a execAttrs) *sdk.RevertData[revertData] {
	if c.Null("revert") {
		return nil
	}
	r := revertData{Dir: a.Dir, Creates: a.RevertCreates}
	r.Argv, r.SecretArgv = sdk.RedactArgv(c, "revert", a.Revert)
	if len(a.Env) > 0 {
		r.Env = make(map[string]string, len(a.Env))
		for _, k := range sortedKeys(a.Env) {
			r.Env[k] = a.Env[k]
			if c.Sensitive("env", k) {
				r.Env[k] = phases.Redacted
				r.SecretEnv = append(r.SecretEnv, k)
			}
		}
	}
	if c.Sensitive("dir") {
		r.Dir, r.SecretDir = phases.Redacted, true
	}
	if c.Sensitive("revert_creates") {
		r.Creates, r.SecretCreates = phases.Redacted, true
	}
	return &sdk.RevertData[revertData]{Description: "run: " + showArgv(c, "revert", a.Revert), Data: r}
}

func revertExec(ctx context.Context, c *call, a execAttrs, u sdk.Applied[revertData]) phases.Diagnostics {
	r := u.Data
	if len(r.Argv) == 0 {
		return nil
	}
	// Fill in the sensitive values from the configuration.
	lack := func(what string) phases.Diagnostics {
		return phases.Errorf("Revert Needs A Sensitive Value",
			"The revert command of %s uses sensitive values, which are not kept in the state; they are taken from the runbook, which no longer provides %s.", c.Addr, what)
	}
	if i := sdk.RestoreArgv(r.Argv, r.SecretArgv, a.Revert, func(i int) bool { return !c.Unknown("revert", i) }); i >= 0 {
		return lack(fmt.Sprintf("element %d of revert", i))
	}
	for _, k := range r.SecretEnv {
		v, ok := a.Env[k]
		if !ok || c.Unknown("env", k) {
			return lack(fmt.Sprintf("env %q", k))
		}
		r.Env[k] = v
	}
	if r.SecretDir {
		if c.Null("dir") || c.Unknown("dir") {
			return lack("dir")
		}
		r.Dir = a.Dir
	}
	if r.SecretCreates {
		if c.Null("revert_creates") || c.Unknown("revert_creates") {
			return lack("revert_creates")
		}
		r.Creates = a.RevertCreates
	}
	dir := c.Settings.workdir(r.Dir)
	if u.Resumed && r.Creates != "" {
		// The revert was interrupted: it finished if it made its path.
		if _, err := os.Stat(under(dir, r.Creates)); err == nil {
			c.Log.Printf("revert skipped, %s exists", c.Shown(r.Creates, "revert_creates"))
			return nil
		}
	}
	out := newOutput(c.Log, c.Scrub)
	if _, err := c.Settings.run(ctx, r.Argv, environ(r.Env), dir, out); err != nil {
		return runFailed(ctx, c.Addr, "Revert Command", showArgv(c, "revert", r.Argv), err, out)
	}
	return nil
}

// run starts argv and waits for it, with output to out. It returns the
// exit code; the error is an *exitError when the command ran and failed.
func (p *Provider) run(ctx context.Context, argv, env []string, dir string, out *output) (int, error) {
	cmd, err := p.start(ctx, argv, env, dir, out)
	if err != nil {
		return -1, err
	}
	// The command leads its own process group: what it left behind in
	// the group is killed once it exits.
	reapGroup(cmd.Process.Pid)
	err = cmd.Wait()
	if err == nil {
		return 0, nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		x := &exitError{code: ee.ExitCode()}
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			x.signal = ws.Signal()
		}
		return x.code, x
	}
	return -1, err
}

// start starts argv fail-stop: inside the provider's PID namespace when it
// may make one (see runNamespace), else with the parent-death signal alone.
func (p *Provider) start(ctx context.Context, argv, env []string, dir string, out *output) (*exec.Cmd, error) {
	for attempt := 0; ; attempt++ {
		cmd := p.command(ctx, argv, env, dir, out)
		ns := p.namespace()
		if ns == nil {
			setDeathSignal(cmd.SysProcAttr)
			return cmd, cmd.Start()
		}
		err := ns.start(cmd)
		if err != nil && ns.dead.Load() && attempt == 0 {
			// The namespace's holder is gone (killed from outside):
			// one new namespace, once.
			p.forgetNamespace(ns)
			continue
		}
		return cmd, err
	}
}

func (p *Provider) command(ctx context.Context, argv, env []string, dir string, out *output) *exec.Cmd {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	// migrate's environment without its secrets (MIGRATE_VAR_*...): a
	// command gets those only through its own env.
	cmd.Env = append(providers.Environ(), env...)
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd.Process) }
	cmd.WaitDelay = waitDelay
	return cmd
}

// namespace returns the provider's PID namespace, making it at first use;
// nil when this process may not make one (no privilege), which is then
// remembered.
func (p *Provider) namespace() *runNamespace {
	if p.noPIDNS.Load() {
		return nil
	}
	p.nsMu.Lock()
	defer p.nsMu.Unlock()
	if p.ns != nil && !p.ns.dead.Load() {
		return p.ns
	}
	ns, err := newRunNamespace()
	if err != nil {
		p.noPIDNS.Store(true)
		return nil
	}
	p.ns = ns
	return ns
}

func (p *Provider) forgetNamespace(ns *runNamespace) {
	p.nsMu.Lock()
	defer p.nsMu.Unlock()
	if p.ns == ns {
		p.ns = nil
	}
	ns.close()
}

// gateScript holds a command at the door until migrate says go. As PID 1
// of its namespace a command cannot be killed by its own parent-death
// check, so one started just as migrate was killed — after the clone,
// before the parent-death signal was armed — would run unsupervised. The
// word comes only after Start returned, so after the signal was armed;
// end of file without it means migrate died first, and nothing runs.
const gateScript = `read -r _ <&3 || exit 137; exec 3<&-; exec "$@"`

// gate is the pipe a gated command waits on.
type gate struct{ r, w *os.File }

// gated rewrites cmd to run through the gate.
func gated(cmd *exec.Cmd) *gate {
	path := cmd.Path
	if !filepath.IsAbs(path) && cmd.Dir != "" {
		path = filepath.Join(cmd.Dir, path)
	}
	if fi, err := os.Stat(path); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		// It cannot start: leave it ungated, so that Start fails with
		// the system's own words and nothing runs at all.
		return nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil // run ungated rather than not at all
	}
	cmd.Args = append([]string{"sh", "-c", gateScript, "migrate-step", cmd.Path}, cmd.Args[1:]...)
	cmd.Path = "/bin/sh"
	cmd.ExtraFiles = []*os.File{r} // fd 3
	return &gate{r: r, w: w}
}

// open lets the started command through.
func (g *gate) open() {
	if g == nil {
		return
	}
	g.r.Close()
	g.w.Write([]byte("go\n"))
	g.w.Close()
}

// abort closes the gate of a command that did not start.
func (g *gate) abort() {
	if g == nil {
		return
	}
	g.r.Close()
	g.w.Close()
}
