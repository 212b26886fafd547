package incus

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// execSpec is an incus_exec step: a command run inside an instance.
type execSpec struct {
	Instance string            `cty:"instance" required:"true" doc:"The instance to run the command in (it must be running)."`
	Command  []string          `cty:"command" required:"true" doc:"The argv to run in the instance; no shell unless the argv asks for one (\"sh\", \"-c\", ...)."`
	Env      map[string]string `cty:"env" doc:"Environment variables of the command, besides the daemon's (PATH, HOME, ...)."`
	User     int64             `cty:"user" doc:"The uid the command runs as; 0 (root) by default."`
	Group    int64             `cty:"group" doc:"The gid the command runs as; 0 by default."`
	Cwd      string            `cty:"cwd" doc:"The working directory in the instance; it must exist."`
	Timeout  string            `cty:"timeout" doc:"How long the command may run, \"10m\" by default; past it the step fails."`
	Creates  string            `cty:"creates" doc:"A path in the instance that the command makes: when it exists the command is not run, so a step interrupted after the command finished is not run again."`
	Revert   []string          `cty:"revert" doc:"The argv rollback runs in the instance, with the same env, user, group and cwd; without it rollback has nothing to undo."`

	timeout time.Duration
}

type execOut struct {
	ExitCode int    `cty:"exit_code"`
	Instance string `cty:"instance"`
}

// execRevert is the revert command. Env is not kept (it may hold
// secrets): Revert takes it from the step's configuration, as it does a
// sensitive argument (its index is in SecretArgv).
type execRevert struct {
	Instance   string   `json:"instance,omitempty"`
	Argv       []string `json:"argv,omitempty"`
	SecretArgv []int    `json:"secret_argv,omitempty"`
	User       int64    `json:"user,omitempty"`
	Group      int64    `json:"group,omitempty"`
	Cwd        string   `json:"cwd,omitempty"`
	// Operation is the command an apply started and did not see end (it
	// was killed, or stopped): the daemon keeps its output files until a
	// client deletes them, so the next apply, an in-flight read that
	// finds the step done, or rollback deletes them once it has ended.
	Operation string `json:"operation,omitempty"`
	// Starting says an apply was about to start the command and had not
	// yet recorded its operation: killed in between, the command may run
	// unseen, so the next apply waits for the instance's commands before
	// it looks for creates again.
	Starting bool `json:"starting,omitempty"`
}

type execApply = sdk.Apply[struct{}, execRevert]

// Exec is the name of the incus_exec step type.
const Exec = "incus_exec"

var execStep = &sdk.StepType[*conn, execSpec, struct{}, execRevert]{
	Name:        Exec,
	Description: "Runs a command (an argv, no terminal) inside an instance, its output streamed to the log; exactly once across interruptions with creates; rollback runs the revert command.",
	Rollback:    "Runs revert in the instance with the same env, user, group and cwd; without revert, nothing (the plan says so).",
	Outputs:     execOut{},
	Validate:    validateExec,
	Read:        readExec,
	Plan:        planExec,
	Apply:       applyExec,
	Revert:      revertExec,
}

func validateExec(c *call, s *execSpec) phases.Diagnostics {
	var d phases.Diagnostics
	d = append(d, checkArgv(c, "command", s.Command)...)
	if !c.Null("revert") {
		d = append(d, checkArgv(c, "revert", s.Revert)...)
	}
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			d = append(d, errorf("Invalid Attribute Value", "The \"env\" attribute of %s has an invalid variable name %q: it must be non-empty and contain no \"=\".", c.Addr, k)...)
		}
	}
	if s.User < 0 || s.Group < 0 || s.User > 1<<32-1 || s.Group > 1<<32-1 {
		d = append(d, errorf("Invalid Attribute Value", "The user and group of %s must be numeric ids from 0 to 4294967295, not %d and %d.", c.Addr, s.User, s.Group)...)
	}
	s.timeout = 10 * time.Minute
	if s.Timeout != "" {
		t, err := time.ParseDuration(s.Timeout)
		if err != nil || t <= 0 {
			d = append(d, errorf("Invalid Attribute Value", "The \"timeout\" attribute of %s must be a positive duration such as \"90s\" or \"10m\", not %q.", c.Addr, s.Timeout)...)
		}
		s.timeout = t
	}
	if s.Creates != "" && !strings.HasPrefix(s.Creates, "/") {
		d = append(d, errorf("Invalid Attribute Value", "The \"creates\" attribute of %s is a path inside the instance and must be absolute, not %q.", c.Addr, s.Creates)...)
	}
	return d
}

func checkArgv(c *call, name string, argv []string) phases.Diagnostics {
	if len(argv) == 0 || argv[0] == "" {
		return errorf("Invalid Attribute Value", "The %q attribute of %s must list at least the program to run, as in [\"systemctl\", \"stop\", \"synapse\"].", name, c.Addr)
	}
	for i, a := range argv {
		if strings.ContainsRune(a, 0) {
			return errorf("Invalid Attribute Value", "Element %d of the %q attribute of %s contains a NUL byte.", i, name, c.Addr)
		}
	}
	return nil
}

// showArgv is an argv as a person would type it in a shell; sensitive
// elements are redacted.
func showArgv(c *call, attr string, argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if c.Sensitive(attr, i) {
			out[i] = phases.Redacted
			continue
		}
		out[i] = shellQuote(a)
	}
	return strings.Join(out, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./_-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// createsExists looks for creates in the instance; ok false when the step
// has none.
func createsExists(ctx context.Context, c *call, s execSpec) (exists, ok bool, err error) {
	if s.Creates == "" {
		return false, false, nil
	}
	_, err = c.Settings.c.StatFile(ctx, s.Instance, s.Creates)
	if incusapi.IsNotFound(err) {
		return false, true, nil
	}
	return err == nil, true, err
}

func readExec(ctx context.Context, c *call, s execSpec, prior *sdk.Prior[struct{}, execRevert]) sdk.Read[execRevert] {
	exists, ok, err := createsExists(ctx, c, s)
	switch {
	case !ok:
		return sdk.Read[execRevert]{Observation: providers.Unknown}
	case err != nil:
		return sdk.Read[execRevert]{Diagnostics: apiErr(c, "Cannot Read Instance File", err)}
	case !exists:
		return sdk.Read[execRevert]{Observation: providers.Absent, Detail: fmt.Sprintf("%s does not exist in instance %q", s.Creates, s.Instance)}
	}
	// Found after an interruption, the step is adopted without running
	// again; it still knows how to be undone. Its record is replaced:
	// what the killed run's command left goes first.
	if c.InFlight {
		dropOutputs(ctx, c, prior, s.timeout)
	}
	return sdk.Read[execRevert]{Observation: providers.Present, Outputs: execOut{0, s.Instance}, Revert: execUndo(c, s)}
}

func planExec(ctx context.Context, c *call, s execSpec, _ *sdk.Prior[struct{}, execRevert]) sdk.Plan[struct{}] {
	exists, _, err := createsExists(ctx, c, s)
	if err != nil {
		return sdk.Plan[struct{}]{Diagnostics: apiErr(c, "Cannot Read Instance File", err)}
	}
	if exists {
		return sdk.Plan[struct{}]{Diff: fmt.Sprintf("skip: %s exists in instance %q, so %s is not run again", c.Shown(s.Creates, "creates"), s.Instance, showArgv(c, "command", s.Command)),
			Diagnostics: argvWarnings(c, s)}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "+ run in instance %q: %s", s.Instance, showArgv(c, "command", s.Command))
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		fmt.Fprintf(&b, "\n  env %s=%s", k, showPlain(s.Env[k], c.Sensitive("env", k)))
	}
	if s.User != 0 || s.Group != 0 {
		fmt.Fprintf(&b, "\n  as %d:%d", s.User, s.Group)
	}
	if s.Cwd != "" {
		fmt.Fprintf(&b, "\n  in %s", showPlain(s.Cwd, c.Sensitive("cwd")))
	}
	fmt.Fprintf(&b, "\n  timeout %s", s.timeout)
	if s.Creates != "" {
		fmt.Fprintf(&b, "\n  creates %s (not run again once it exists)", c.Shown(s.Creates, "creates"))
	}
	if s.Revert == nil {
		b.WriteString("\n  rollback: nothing to undo (no revert command)")
	} else {
		fmt.Fprintf(&b, "\n  rollback: run %s", showArgv(c, "revert", s.Revert))
	}
	return sdk.Plan[struct{}]{Diff: b.String(), Diagnostics: argvWarnings(c, s)}
}

// argvWarnings point a sensitive argument to env; at plan only, as
// Validate runs at every read and apply too.
func argvWarnings(c *call, s execSpec) phases.Diagnostics {
	return append(c.ArgvWarning("command", len(s.Command)), c.ArgvWarning("revert", len(s.Revert))...)
}

func showPlain(v string, sensitive bool) string {
	if sensitive {
		return phases.Redacted
	}
	return v
}

func execUndo(c *call, s execSpec) *sdk.RevertData[execRevert] {
	if s.Revert == nil {
		return &sdk.RevertData[execRevert]{Description: "nothing to undo (no revert command)"}
	}
	inv := execRevert{Instance: s.Instance, User: s.User, Group: s.Group, Cwd: s.Cwd}
	inv.Argv, inv.SecretArgv = sdk.RedactArgv(c, "revert", s.Revert)
	return &sdk.RevertData[execRevert]{Description: fmt.Sprintf("run in instance %q: %s", s.Instance, showArgv(c, "revert", s.Revert)), Data: inv}
}

func applyExec(ctx context.Context, c *call, s execSpec, _ struct{}, prior *sdk.Prior[struct{}, execRevert]) execApply {
	dropOutputs(ctx, c, prior, s.timeout)
	exists, _, err := createsExists(ctx, c, s)
	if err != nil {
		return execApply{Diagnostics: apiErr(c, "Cannot Read Instance File", err)}
	}
	if !exists && s.Creates != "" && prior != nil && prior.Revert != nil && prior.Revert.Data.Starting {
		if exists, err = afterRunning(ctx, c, s); err != nil {
			return execApply{Diagnostics: apiErr(c, "Cannot Read Instance File", err)}
		}
	}
	if exists {
		logf(c, "skipped: %s exists in instance %s", s.Creates, s.Instance)
		return execApply{Outputs: execOut{0, s.Instance}, Revert: execUndo(c, s)}
	}
	undo := execUndo(c, s)
	// Once started, the command's output files are the daemon's until a
	// client deletes them: the record says which, should migrate die.
	left := *undo
	if s.Creates != "" {
		// Said before the command starts: a run killed before started
		// records its operation leaves this, and the next apply waits
		// for what runs in the instance rather than start it twice.
		starting := left
		starting.Data.Instance, starting.Data.Starting = s.Instance, true
		if err := sdk.Intend(c, &starting); err != nil {
			return execApply{Diagnostics: errorf("Cannot Record The Command", "%s: could not record in the state that the command is starting (%v): it was not started.", c.Addr, err)}
		}
	}
	started := func(e *incusapi.Exec) {
		left.Data.Instance, left.Data.Operation = s.Instance, e.Operation
		if err := sdk.Intend(c, &left); err != nil {
			logf(c, "could not record the command's operation %s in the state (%v): if this run is killed, its output files stay in the instance", e.Operation, err)
		}
	}
	code, d := runIn(ctx, c, "Command", s.Instance, showArgv(c, "command", s.Command), incusapi.ExecPost{
		Command: s.Command, Environment: s.Env, User: uint32(s.User), Group: uint32(s.Group), Cwd: s.Cwd}, s.timeout, started)
	if ctx.Err() != nil {
		undo = &left // not seen to its end: its files are still there
	}
	return execApply{Outputs: execOut{code, s.Instance}, Revert: undo, Diagnostics: d}
}

// dropOutputs deletes the output files of the command a killed run
// started (the operation its record kept, if any), once that command has
// ended (waited for up to timeout).
func dropOutputs(ctx context.Context, c *call, prior *sdk.Prior[struct{}, execRevert], timeout time.Duration) {
	if prior == nil || prior.Revert == nil || prior.Revert.Data.Operation == "" {
		return
	}
	dropLeft(ctx, c, prior.Revert.Data, timeout)
}

func dropLeft(ctx context.Context, c *call, inv execRevert, timeout time.Duration) {
	if inv.Operation == "" {
		return
	}
	api, e := c.Settings.c, incusapi.ExecOf(inv.Instance, inv.Operation)
	wctx, cancel := context.WithTimeout(ctx, timeout)
	_, _ = api.WaitExec(wctx, e) // ended long ago, its operation is gone: nothing to wait for
	cancel()
	if err := api.DeleteExecOutputs(ctx, e); err != nil {
		logf(c, "could not remove the output files %s and %s that the command of a killed run left in %s: %v", e.Stdout, e.Stderr, e.Instance, err)
		return
	}
	logf(c, "removed the output files of the command a killed run left in %s (operation %s)", e.Instance, e.Operation)
}

// afterRunning waits for the commands already running in the instance
// (up to the step's timeout), then looks for creates again: a run killed
// as it started its command (its record says Starting, with no
// operation) is resumed once that command has ended, so it does not
// start the command a second time beside the first. The daemon cannot
// say which step started a command: any record-output exec there is
// waited for. A step whose record names its operation waits for that
// one only (dropOutputs), and a step that never started its command
// waits for none: two apps' exports in one VM run side by side.
func afterRunning(ctx context.Context, c *call, s execSpec) (bool, error) {
	running, err := c.Settings.c.RunningExecs(ctx, s.Instance)
	if err != nil || len(running) == 0 {
		return false, err
	}
	tctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	for _, e := range running {
		logf(c, "waiting for a command already running in %s (operation %s; perhaps started by a run that was stopped) before looking for %s again", s.Instance, e.Operation, s.Creates)
		_, _ = c.Settings.c.WaitExec(tctx, &e) // its end is what matters, not its result
	}
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	exists, _, err := createsExists(ctx, c, s)
	return exists, err
}

func revertExec(ctx context.Context, c *call, a execSpec, u sdk.Applied[execRevert]) phases.Diagnostics {
	inv := u.Data
	timeout := 10 * time.Minute
	if t, err := time.ParseDuration(a.Timeout); err == nil && t > 0 {
		timeout = t
	}
	dropLeft(ctx, c, inv, timeout) // and the command ended before its revert runs
	if len(inv.Argv) == 0 {
		logf(c, "nothing to undo: the step has no revert command")
		return nil
	}
	if i := sdk.RestoreArgv(inv.Argv, inv.SecretArgv, a.Revert, nil); i >= 0 {
		return errorf("Revert Needs A Sensitive Value", "The revert command of %s has sensitive elements, which the state does not keep; the runbook no longer provides element %d of revert.", c.Addr, i)
	}
	name := pick(inv.Instance, a.Instance)
	shown := showArgv(c, "revert", inv.Argv)
	_, d := runIn(ctx, c, "Revert Command", name, shown, incusapi.ExecPost{
		Command: inv.Argv, Environment: a.Env, User: uint32(inv.User), Group: uint32(inv.Group), Cwd: pick(inv.Cwd, a.Cwd)}, timeout, nil)
	return d
}

// pollEvery is how often a running command's output files are read.
const pollEvery = 200 * time.Millisecond

// runIn runs a command in an instance, its output going to the step's
// log line by line as it comes, and fails unless it exits with 0;
// started, when not nil, is told of the command once it is started.
func runIn(ctx context.Context, c *call, what, name, shown string, post incusapi.ExecPost, timeout time.Duration, started func(*incusapi.Exec)) (int, phases.Diagnostics) {
	api := c.Settings.c
	if post.Cwd != "" {
		if fi, err := api.StatFile(ctx, name, post.Cwd); err != nil || fi.Type != "directory" {
			return -1, errorf(what+" Failed", "%s: the cwd %s of %s does not exist in instance %q as a directory (%v); Incus would run the command elsewhere.", c.Addr, post.Cwd, shown, name, err)
		}
	}
	token := rand.Text()
	post.Environment = maps.Clone(post.Environment)
	if post.Environment == nil {
		post.Environment = map[string]string{}
	}
	post.Environment[markerEnv] = token
	e, err := api.StartExec(ctx, name, post)
	if err != nil {
		return -1, apiErr(c, "Cannot Run "+what, fmt.Errorf("%s in instance %q: %w", shown, name, err))
	}
	logf(c, "running in %s: %s", name, shown)
	if started != nil {
		started(e)
	}
	tctx, cancel := context.WithTimeoutCause(ctx, timeout, errTimeout)
	defer cancel()
	out := &lines{w: c.Log}
	code, err := api.FollowExec(tctx, e, out.stream("stdout"), out.stream("stderr"), pollEvery)
	out.flush()
	switch {
	case err != nil && ctx.Err() != nil:
		return -1, phases.Errorf("Step Interrupted", "%s was stopped while %s ran in instance %q (%v). Incus runs it to its end; the next run looks for creates first, or runs it again.", c.Addr, shown, name, ctx.Err())
	case err != nil && errors.Is(context.Cause(tctx), errTimeout):
		detail := stop(ctx, api, e, token)
		return -1, phases.Errorf(what+" Timed Out", "%s: %s in instance %q did not finish within the timeout of %s: %s.%s", c.Addr, shown, name, timeout, detail, out.tail())
	case err != nil:
		return -1, apiErr(c, "Cannot Run "+what, fmt.Errorf("%s in instance %q: %w", shown, name, err))
	case code != 0:
		return code, phases.Errorf(what+" Failed", "%s: %s in instance %q exited with code %d.%s", c.Addr, shown, name, code, out.tail())
	}
	logf(c, "%s exited with 0", shown)
	return 0, nil
}

var errTimeout = errors.New("the step's timeout")

// markerEnv marks every process of a command run by incus_exec (its
// children inherit it), so that a command past its timeout can be found
// and killed: Incus cannot cancel a record-output exec.
const markerEnv = "MIGRATE_EXEC_ID"

// killScript kills the processes whose environment holds the marker $0
// (the files API cannot read /proc, which looks empty through it).
const killScript = `for f in /proc/[0-9]*/environ; do if grep -q "` + markerEnv + `=$0" "$f" 2>/dev/null; then p=${f#/proc/}; kill -9 "${p%/environ}" 2>/dev/null; fi; done`

// stop ends a command past its timeout: the operation is cancelled, or,
// as Incus refuses that for an exec, its processes are killed by a
// second command (sh, grep, kill: what nearly every image has). It says
// what happened, for the diagnostic.
func stop(ctx context.Context, api *incusapi.Client, e *incusapi.Exec, token string) string {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	cerr := api.CancelOperation(cctx, e.Operation)
	if cerr == nil {
		return "it was cancelled"
	}
	k, err := api.StartExec(cctx, e.Instance, incusapi.ExecPost{Command: []string{"sh", "-c", killScript, token}})
	if err == nil {
		_, err = api.FollowExec(cctx, k, io.Discard, io.Discard, pollEvery)
	}
	if err == nil {
		_, err = api.FollowExec(cctx, e, io.Discard, io.Discard, pollEvery)
	}
	if err != nil {
		return fmt.Sprintf("the daemon cannot cancel it (%v) and its processes could not be killed (%v), so it may still be running there (operation %s)", cerr, err, e.Operation)
	}
	return "the daemon cannot cancel it, so its processes were killed (found by " + markerEnv + " in their environment)"
}

// maxLine is the longest line the log gets in one piece.
const maxLine = 64 << 10

// tailLines is how many last lines of output a failure shows.
const tailLines = 8

// lines splits the command's two streams into lines for the log (a
// stdout fragment never glued to a stderr one) and keeps the last ones
// for a failure's diagnostic (scrubbed with it by the SDK).
type lines struct {
	mu   sync.Mutex
	w    io.Writer
	part map[string][]byte
	last []string
}

type streamWriter struct {
	l    *lines
	name string
}

func (l *lines) stream(name string) *streamWriter { return &streamWriter{l, name} }

func (s *streamWriter) Write(p []byte) (int, error) {
	l := s.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.part == nil {
		l.part = map[string][]byte{}
	}
	buf := append(l.part[s.name], p...)
	for {
		i, skip := bytes.IndexByte(buf, '\n'), 1
		if i < 0 && len(buf) >= maxLine {
			i, skip = maxLine, 0 // a line without end is cut, not held forever
		}
		if i < 0 {
			break
		}
		l.emit(string(buf[:i]))
		buf = buf[i+skip:]
	}
	l.part[s.name] = buf
	return len(p), nil
}

func (l *lines) emit(line string) {
	_, _ = l.w.Write([]byte(line + "\n"))
	l.last = append(l.last, line)
	if len(l.last) > tailLines {
		l.last = l.last[1:]
	}
}

// flush writes what is left of lines without a newline.
func (l *lines) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range []string{"stdout", "stderr"} {
		if len(l.part[k]) > 0 {
			l.emit(string(l.part[k]))
			l.part[k] = nil
		}
	}
}

func (l *lines) tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.last) == 0 {
		return ""
	}
	return "\nLast lines of output:\n  " + strings.Join(l.last, "\n  ")
}
