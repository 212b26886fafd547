package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
)

// execConfig is an exec step's configuration.
type execConfig struct {
	command list
	env     smap
	dir     val
	revert  list
	creates val
	// revertCreates is the revert's own observation: made last by the
	// revert, it says a resumed revert finished.
	revertCreates val
}

func decodeExec(addr phases.Address, cfg cty.Value) (execConfig, *decoder) {
	d := newDecoder(addr, cfg)
	c := execConfig{
		command: d.strList("command"),
		env:     d.strMap("env"),
		dir:     d.str("dir"),
		revert:  d.strList("revert"),
		creates: d.str("creates"),
	}
	c.revertCreates = d.str("revert_creates")
	if c.command.null {
		d.missing("command")
	}
	checkArgv(d, "command", c.command)
	if !c.revert.null {
		checkArgv(d, "revert", c.revert)
	}
	if c.revert.null && !c.revertCreates.null {
		d.errorf("Invalid Attribute Value", "The \"revert_creates\" attribute of %s says what the revert command makes, but the step has no \"revert\": add one, or remove revert_creates.", addr)
	}
	for _, e := range c.env.entries {
		if e.key == "" || strings.ContainsAny(e.key, "=\x00") {
			d.errorf("Invalid Attribute Value", "The \"env\" attribute of %s has an invalid variable name %q: it must be non-empty and contain no \"=\".", addr, e.key)
		}
		if strings.ContainsRune(e.val.s, 0) {
			d.errorf("Invalid Attribute Value", "The \"env\" attribute of %s has a value with a NUL byte (variable %q).", addr, e.key)
		}
	}
	return c, d
}

func checkArgv(d *decoder, name string, l list) {
	if l.null || l.unknown {
		return
	}
	if len(l.items) == 0 {
		d.errorf("Invalid Attribute Value", "The %q attribute of %s must list at least the program to run, as in [\"./script.sh\", \"arg\"].", name, d.addr)
		return
	}
	if first := l.items[0]; first.known() && first.s == "" {
		d.errorf("Invalid Attribute Value", "The %q attribute of %s starts with an empty program name.", name, d.addr)
	}
	for i, it := range l.items {
		if strings.ContainsRune(it.s, 0) {
			d.errorf("Invalid Attribute Value", "Element %d of the %q attribute of %s contains a NUL byte.", i, name, d.addr)
		}
	}
}

// secrets lists the sensitive values a command could print.
func (c *execConfig) secrets() secrets {
	var s secrets
	for _, l := range []list{c.command, c.revert} {
		for _, it := range l.items {
			s.add(it)
		}
	}
	for _, e := range c.env.entries {
		s.add(e.val)
	}
	s.add(c.dir)
	s.add(c.creates)
	s.add(c.revertCreates)
	return s
}

// environ is the env attribute as KEY=VALUE strings.
func (c *execConfig) environ() []string {
	if len(c.env.entries) == 0 {
		return nil
	}
	out := make([]string, len(c.env.entries))
	for i, e := range c.env.entries {
		out[i] = e.key + "=" + e.val.s
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

func (p *Provider) planExec(req providers.PlanRequest) providers.PlanResponse {
	c, d := decodeExec(req.Addr, req.Config)
	if d.diags.HasErrors() {
		return providers.PlanResponse{Diagnostics: d.diags}
	}
	var b strings.Builder
	b.WriteString("run: ")
	b.WriteString(showArgv(c.command))
	if !c.dir.null {
		b.WriteString("\ndir: " + c.dir.show())
	}
	if c.env.unknown || c.env.sensitive {
		b.WriteString("\nenv: " + val{unknown: c.env.unknown, sensitive: c.env.sensitive}.show())
	} else if len(c.env.entries) > 0 {
		b.WriteString("\nenv:")
		for _, e := range c.env.entries {
			b.WriteString(" " + e.key + "=" + e.val.show())
		}
	}
	if !c.creates.null {
		b.WriteString("\ncreates: " + c.creates.show())
	}
	if !c.revert.null {
		b.WriteString("\nrevert: " + showArgv(c.revert))
	}
	if !c.revertCreates.null {
		b.WriteString("\nrevert creates: " + c.revertCreates.show())
	}
	r := providers.PlanResponse{Diff: b.String(), Diagnostics: d.diags}
	if c.revert.null {
		r.Irreversible = "no revert command"
	}
	return r
}

func (p *Provider) readExec(req providers.ReadRequest) providers.ReadResponse {
	c, d := decodeExec(req.Addr, req.Config)
	if d.diags.HasErrors() || !c.creates.known() || !c.dir.known() && !c.dir.null {
		return providers.ReadResponse{Observation: providers.Unknown, Diagnostics: d.diags}
	}
	path := under(p.workdir(c.dir.s), c.creates.s)
	_, err := os.Stat(path)
	switch {
	case err == nil:
		// Found after an interruption, the step is adopted without
		// running again; it must still know how to be undone.
		inv, _ := c.inverse()
		return providers.ReadResponse{Observation: providers.Present, Inverse: inv, Outputs: exitCode(0)}
	case errors.Is(err, fs.ErrNotExist):
		return providers.ReadResponse{Observation: providers.Absent, Detail: c.creates.show() + " does not exist"}
	}
	return providers.ReadResponse{Observation: providers.Unknown, Detail: c.secrets().redact(err.Error())}
}

// notKnown reports attributes that are still unknown at apply time.
func notKnown(d *decoder, c *execConfig) {
	for _, x := range []struct {
		name string
		ok   bool
	}{
		{"command", c.command.known()},
		{"revert", c.revert.null || c.revert.known()},
		{"env", c.env.null || !c.env.unknown && allKnown(c.env.entries)},
		{"dir", !c.dir.unknown},
		{"creates", !c.creates.unknown},
		{"revert_creates", !c.revertCreates.unknown},
	} {
		if !x.ok {
			d.errorf("Unknown Attribute Value", "The %q attribute of %s is not known; it depends on a step that has not run.", x.name, d.addr)
		}
	}
}

func allKnown(es []kv) bool {
	for _, e := range es {
		if e.val.unknown {
			return false
		}
	}
	return true
}

func (p *Provider) applyExec(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
	c, d := decodeExec(req.Addr, req.Config)
	if !d.diags.HasErrors() {
		notKnown(d, &c)
	}
	if d.diags.HasErrors() {
		return providers.ApplyResponse{Diagnostics: d.diags}
	}
	sec := c.secrets()
	inv, err := c.inverse()
	if err != nil {
		return providers.ApplyResponse{Diagnostics: phases.FromError("Cannot Record Revert Command", err)}
	}
	dir := p.workdir(c.dir.s)
	if !c.creates.null {
		if _, err := os.Stat(under(dir, c.creates.s)); err == nil {
			logf(req.Log, "%s: skipped, %s exists\n", req.Addr, c.creates.show())
			return providers.ApplyResponse{Outputs: exitCode(0), Inverse: inv}
		}
	}
	out := newOutput(req.Log, sec)
	code, err := p.run(ctx, c.command.strs(), c.environ(), dir, out)
	if err != nil {
		return providers.ApplyResponse{Outputs: exitCode(code), Diagnostics: runFailed(ctx, req.Addr, "Command", showArgv(c.command), err, out, sec)}
	}
	return providers.ApplyResponse{Outputs: exitCode(code), Inverse: inv}
}

func exitCode(n int) cty.Value {
	return cty.ObjectVal(map[string]cty.Value{"exit_code": cty.NumberIntVal(int64(n))})
}

func logf(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format, args...)
	}
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
func runFailed(ctx context.Context, addr phases.Address, what, argv string, err error, out *output, sec secrets) phases.Diagnostics {
	var detail string
	var ee *exitError
	switch {
	case ctx.Err() != nil:
		detail = fmt.Sprintf("%s was stopped before %s finished (%v); it and every process it started were killed.", addr, argv, context.Cause(ctx))
		return phases.Errorf("Step Interrupted", "%s", sec.redact(detail))
	case errors.As(err, &ee):
		detail = fmt.Sprintf("%s: %s %v.", addr, argv, ee)
	default:
		detail = fmt.Sprintf("%s: %s could not be started: %v.", addr, argv, err)
	}
	if t := out.tail(); t != "" {
		detail += "\nLast lines of output:" + t
	}
	return phases.Errorf(what+" Failed", "%s", sec.redact(detail))
}

// revertData is an exec step's Inverse.Data. Sensitive values are not
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

func (c *execConfig) inverse() (*providers.Inverse, error) {
	if c.revert.null {
		return nil, nil
	}
	r := revertData{Argv: make([]string, len(c.revert.items)), Dir: c.dir.s}
	for i, it := range c.revert.items {
		r.Argv[i] = it.s
		if it.sensitive {
			r.Argv[i] = phases.Redacted
			r.SecretArgv = append(r.SecretArgv, i)
		}
	}
	if len(c.env.entries) > 0 {
		r.Env = make(map[string]string, len(c.env.entries))
		for _, e := range c.env.entries {
			r.Env[e.key] = e.val.s
			if e.val.sensitive {
				r.Env[e.key] = phases.Redacted
				r.SecretEnv = append(r.SecretEnv, e.key)
			}
		}
	}
	if c.dir.sensitive {
		r.Dir, r.SecretDir = phases.Redacted, true
	}
	r.Creates = c.revertCreates.s
	if c.revertCreates.sensitive {
		r.Creates, r.SecretCreates = phases.Redacted, true
	}
	data, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	return &providers.Inverse{Description: "run: " + showArgv(c.revert), Data: data}, nil
}

func (p *Provider) revertExec(ctx context.Context, req providers.RevertRequest) providers.RevertResponse {
	if len(req.Inverse.Data) == 0 {
		return providers.RevertResponse{}
	}
	var r revertData
	if err := json.Unmarshal(req.Inverse.Data, &r); err != nil {
		return providers.RevertResponse{Diagnostics: phases.Errorf("Invalid Revert Record", "The revert command recorded for %s cannot be read: %v.", req.Addr, err)}
	}
	if len(r.Argv) == 0 {
		return providers.RevertResponse{}
	}
	// Fill in the sensitive values from the configuration.
	var sec secrets
	if len(r.SecretArgv) > 0 || len(r.SecretEnv) > 0 || r.SecretDir || r.SecretCreates {
		c, _ := decodeExec(req.Addr, req.Config)
		lack := func(what string) providers.RevertResponse {
			return providers.RevertResponse{Diagnostics: phases.Errorf("Revert Needs A Sensitive Value",
				"The revert command of %s uses sensitive values, which are not kept in the state; they are taken from the runbook, which no longer provides %s.", req.Addr, what)}
		}
		for _, i := range r.SecretArgv {
			if i >= len(c.revert.items) || !c.revert.items[i].known() || i >= len(r.Argv) {
				return lack(fmt.Sprintf("element %d of revert", i))
			}
			r.Argv[i] = c.revert.items[i].s
			sec.add(val{s: r.Argv[i], sensitive: true})
		}
		env := make(map[string]val, len(c.env.entries))
		for _, e := range c.env.entries {
			env[e.key] = e.val
		}
		for _, k := range r.SecretEnv {
			v, ok := env[k]
			if !ok || !v.known() {
				return lack(fmt.Sprintf("env %q", k))
			}
			r.Env[k] = v.s
			sec.add(val{s: v.s, sensitive: true})
		}
		if r.SecretDir {
			if !c.dir.known() {
				return lack("dir")
			}
			r.Dir = c.dir.s
			sec.add(val{s: r.Dir, sensitive: true})
		}
		if r.SecretCreates {
			if !c.revertCreates.known() {
				return lack("revert_creates")
			}
			r.Creates = c.revertCreates.s
			sec.add(val{s: r.Creates, sensitive: true})
		}
	}
	dir := p.workdir(r.Dir)
	if req.Resumed && r.Creates != "" {
		// The revert was interrupted: it finished if it made its path.
		if _, err := os.Stat(under(dir, r.Creates)); err == nil {
			shown := r.Creates
			if r.SecretCreates {
				shown = phases.Redacted
			}
			logf(req.Log, "%s: revert skipped, %s exists\n", req.Addr, shown)
			return providers.RevertResponse{}
		}
	}
	argv := list{items: make([]val, len(r.Argv))}
	for i, a := range r.Argv {
		argv.items[i] = val{s: a}
	}
	for _, i := range r.SecretArgv {
		argv.items[i].sensitive = true
	}
	var env []string
	for k, v := range r.Env {
		env = append(env, k+"="+v)
	}
	out := newOutput(req.Log, sec)
	_, err := p.run(ctx, r.Argv, env, dir, out)
	if err != nil {
		return providers.RevertResponse{Diagnostics: runFailed(ctx, req.Addr, "Revert Command", showArgv(argv), err, out, sec)}
	}
	return providers.RevertResponse{}
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
	out.flush()
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
