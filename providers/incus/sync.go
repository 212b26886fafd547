package incus

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// syncSpec is an incus_sync step: a directory tree copied to another
// inside one instance (the old VM) with its own tools, in a warm pass
// while the service runs and a final pass once it is stopped, the final
// one verified (sync_pass.go, sync.sh).
type syncSpec struct {
	Instance    string   `cty:"instance" required:"true" doc:"The instance both trees are in (the old VM; it must be running)."`
	Source      string   `cty:"source" required:"true" doc:"An absolute directory in the instance: the application's data, such as /var/lib/jellyfin."`
	Destination string   `cty:"destination" required:"true" doc:"An absolute directory in the instance, neither inside the source nor containing it, such as /mnt/migrate-data/apps/jellyfin.partial on the attached data volume; made if missing. Its manifest is kept on the instance's root disk, in /var/lib/migrate-sync/ (named after the destination, escaped): never inside it, and readable by Incus' files API even when the destination is on a disk attached to a running container. Neither source nor destination may be in /var/lib/migrate-sync."`
	Final       bool     `cty:"final" doc:"false (default): the warm pass, while the service runs: copies every file whose size, mtime, mode or owner differs from the destination's (new ones too), but the critical ones, and records the manifest; deletes nothing. true: the final pass, once the service is stopped: copies what differs, and every critical file whose SHA-256 differs; deletes what the source no longer has; then verifies that both trees have the same paths, types, sizes, SHA-256 and link targets, failing with the files that differ before the new service starts. It fails too if the destination was changed since the warm pass. The manifest trusts size and mtime: a file whose size and mtime are those the last pass recorded is taken to have the content it hashed then (a critical file is always hashed again)."`
	Critical    []string `cty:"critical" doc:"Shell-style globs of the files copied only in the final pass and always compared by SHA-256 there (databases: never copied from a live file), such as [\"*.db\", \"data/*.db-wal\"]. A glob without \"/\" matches a file's name at any depth; one with \"/\" its whole path relative to the source."`
	Timeout     string   `cty:"timeout" doc:"How long each command of the pass may run in the instance, \"2h\" by default."`
	AfterWarm   bool     `cty:"after_warm" doc:"Final pass only: a warm pass of the same source and destination runs before this one (true), so a plan made before it ran expects this pass to copy the critical files and 1% of the rest (the plan says so), not the whole tree, in the service's window of downtime. Once a warm pass's manifest is there, the plan expects that whatever this says."`

	timeout time.Duration
}

type syncOut struct {
	Files       int64   `cty:"files"`
	Bytes       int64   `cty:"bytes"`
	CopiedFiles int64   `cty:"copied_files"`
	CopiedBytes int64   `cty:"copied_bytes"`
	Seconds     float64 `cty:"seconds"`
	Manifest    string  `cty:"manifest"`
}

// syncRevert is how to undo a pass: remove the manifest of the
// destination (a warm pass; a final one that made it), and the
// destination itself when the step made it.
type syncRevert struct {
	Instance    string `json:"instance,omitempty"`
	Destination string `json:"destination,omitempty"`
	Final       bool   `json:"final,omitempty"`
	// Created: the destination was not there when the step first ran.
	Created bool `json:"created,omitempty"`
	// Remove: rollback removes the manifest, and the destination if
	// Created. Always for a warm pass; for a final pass, only a cold one
	// (no warm pass's manifest before it).
	Remove bool `json:"remove,omitempty"`
	// Operation is the helper command an apply started and did not see
	// end: the next apply, or rollback, waits for it and removes its
	// output files (as incus_exec does).
	Operation string `json:"operation,omitempty"`
}

type syncApply = sdk.Apply[struct{}, syncRevert]

// Sync is the name of the incus_sync step type.
const Sync = "incus_sync"

var syncStep = &sdk.StepType[*conn, syncSpec, struct{}, syncRevert]{
	Name:        Sync,
	Description: "Copies a directory tree to another inside one instance with its own tools (sh, find, stat, sha256sum, cp, mv): a warm pass while the service runs, then a final pass once it is stopped that copies only what changed, the critical files (databases) by SHA-256, and verifies both trees' manifests (paths, types, sizes, SHA-256, link targets), naming the files that differ.",
	Rollback:    "The warm pass removes the destination (when it made it) and its manifest; the final pass does nothing (the warm pass's rollback removes the copy), unless it ran without a warm pass before it: then it removes what it made.",
	Outputs:     syncOut{},
	Validate:    validateSync,
	Read:        readSync,
	Plan:        planSync,
	Apply:       applySync,
	Revert:      revertSync,
}

// checkDir is what is wrong with an absolute directory of the instance
// ("" if nothing).
func checkDir(p string) string {
	switch {
	case !strings.HasPrefix(p, "/"):
		return "must be absolute"
	case strings.ContainsRune(p, 0):
		return "contains a NUL byte"
	case path.Clean(p) == "/":
		return "is the root of the instance"
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." || el == "." {
			return "must not contain \".\" or \"..\""
		}
	}
	return ""
}

func within(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

func validateSync(c *call, s *syncSpec) phases.Diagnostics {
	var d phases.Diagnostics
	bad := func(format string, args ...any) {
		d = append(d, errorf("Invalid Attribute Value", format, args...)...)
	}
	for _, a := range []struct{ name, v string }{{"source", s.Source}, {"destination", s.Destination}} {
		if why := checkDir(a.v); why != "" {
			bad("The %q attribute of %s is a directory in the instance and %s: %q.", a.name, c.Addr, why, a.v)
		}
	}
	if d.HasErrors() {
		return d
	}
	s.Source, s.Destination = path.Clean(s.Source), path.Clean(s.Destination)
	switch src, dst := s.Source, s.Destination; {
	case within(dst, src):
		bad("The destination %s of %s is inside its source %s (or is it): the copy would copy itself.", dst, c.Addr, src)
	case within(src, dst):
		bad("The source %s of %s is inside its destination %s: the final pass would delete it.", src, c.Addr, dst)
	case within(src, syncStateDir), within(syncStateDir, src), within(dst, syncStateDir), within(syncStateDir, dst):
		bad("The source %s and the destination %s of %s must stay clear of %s, where the copies' manifests are kept.", src, dst, c.Addr, syncStateDir)
	}
	if s.AfterWarm && !s.Final {
		bad("The \"after_warm\" attribute of %s is for a final pass (final = true): a warm pass is the one it comes after.", c.Addr)
	}
	for i, g := range s.Critical {
		if _, err := path.Match(g, ""); err != nil || g == "" || strings.HasPrefix(g, "/") {
			bad("Element %d of the \"critical\" attribute of %s, %q, is not a glob of paths relative to the source (such as \"*.db\" or \"data/*.db\").", i, c.Addr, g)
		}
	}
	s.timeout = 2 * time.Hour
	if s.Timeout != "" {
		t, err := time.ParseDuration(s.Timeout)
		if err != nil || t <= 0 {
			bad("The \"timeout\" attribute of %s must be a positive duration such as \"90m\", not %q.", c.Addr, s.Timeout)
		}
		s.timeout = t
	}
	return d
}

// incusGuest runs the helper through the exec API (record-output mode,
// as incus_exec: the command finishes even if migrate is killed) and
// reads and writes its manifest and work files (manifestPath,
// workPath) through the files API.
type incusGuest struct {
	c       *call
	inst    string
	timeout time.Duration
	// started, when not nil, is told of each command once it started.
	started func(op string) error
	// ended is told that the last command started was seen to its end.
	ended func()
}

func (g *incusGuest) run(ctx context.Context, argv []string, out io.Writer) error {
	api := g.c.Settings.c
	token := rand.Text()
	e, err := api.StartExec(ctx, g.inst, incusapi.ExecPost{Command: argv, Environment: map[string]string{markerEnv: token}})
	if err != nil {
		return err
	}
	if g.started != nil {
		if err := g.started(e.Operation); err != nil {
			logf(g.c, "could not record the command's operation %s in the state (%v): if this run is killed, its output files stay in the instance", e.Operation, err)
		}
	}
	tctx, cancel := context.WithTimeoutCause(ctx, g.timeout, errTimeout)
	defer cancel()
	stderr := &lines{w: g.c.Log}
	code, err := api.FollowExec(tctx, e, out, stderr.stream("stderr"), pollEvery)
	stderr.flush()
	cmd := argv[4] // after sh -c SCRIPT SCRIPT
	switch {
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("stopped while the helper's %s ran in the instance (it runs to its end there; the next run waits for it): %w", cmd, ctx.Err())
	case err != nil && errors.Is(context.Cause(tctx), errTimeout):
		return fmt.Errorf("the helper's %s did not finish within the timeout of %s: %s.%s", cmd, g.timeout, stop(ctx, api, e, token), stderr.tail())
	case err != nil:
		return err
	}
	if g.ended != nil {
		g.ended()
	}
	if code != 0 {
		return fmt.Errorf("the helper's %s exited with code %d.%s", cmd, code, stderr.tail())
	}
	return nil
}

func (g *incusGuest) read(ctx context.Context, p string, max int64) ([]byte, bool, error) {
	fi, r, _, err := g.c.Settings.c.GetFile(ctx, g.inst, p)
	if incusapi.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if r == nil || fi.Type != "file" {
		if r != nil {
			r.Close()
		}
		return nil, false, fmt.Errorf("%s is a %s, not a file", p, fi.Type)
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err == nil && int64(len(b)) > max {
		err = fmt.Errorf("%s is larger than %d MiB: refused", p, max>>20)
	}
	return b, err == nil, err
}

func (g *incusGuest) write(ctx context.Context, p string, b []byte) error {
	return g.c.Settings.c.PushFile(ctx, g.inst, p, incusapi.FilePut{Mode: 0o600, Content: strings.NewReader(string(b))})
}

func readSync(_ context.Context, c *call, s syncSpec, _ *sdk.Prior[struct{}, syncRevert]) sdk.Read[syncRevert] {
	if c.InFlight {
		// A pass is incremental and a final one verifies again: a pass a
		// run was stopped in is run again, going on from what it copied.
		return sdk.Read[syncRevert]{Observation: providers.Absent, Detail: "a pass that was stopped is run again: it copies only what is not there yet"}
	}
	return sdk.Read[syncRevert]{Observation: providers.Unknown}
}

// planSize is how long the plan may take to size the source.
const planSize = 5 * time.Minute

func planSync(ctx context.Context, c *call, s syncSpec, _ *sdk.Prior[struct{}, syncRevert]) sdk.Plan[struct{}] {
	var b strings.Builder
	where := fmt.Sprintf("in instance %q: %s -> %s", s.Instance, s.Source, s.Destination)
	if s.Final {
		fmt.Fprintf(&b, "+ final pass %s (the service must be stopped): copy what changed since the warm pass, delete what the source no longer has, verify both manifests", where)
	} else {
		fmt.Fprintf(&b, "+ warm pass %s (the service may run): copy what differs, critical files aside", where)
	}
	g := &incusGuest{c: c, inst: s.Instance, timeout: min(s.timeout, planSize)}
	var copyBytes int64
	all, crit, ok, err := sizeOf(ctx, g, s.Source, s.Critical)
	switch {
	case err != nil:
		fmt.Fprintf(&b, "\n  source: unknown (cannot read it in instance %q now: %v); sized when it runs", s.Instance, err)
	case !ok && !c.AfterChanges:
		return sdk.Plan[struct{}]{Diagnostics: errorf("Source Not Found", "%s: the source %s is not a directory in instance %q.", c.Addr, s.Source, s.Instance)}
	case !ok:
		fmt.Fprintf(&b, "\n  source: %s is not there yet (a step this one depends on runs first); sized when it runs", s.Source)
	default:
		fmt.Fprintf(&b, "\n  source: %s in %s files", humanBytes(all.bytes), humanCount(all.files))
		if len(s.Critical) > 0 {
			fmt.Fprintf(&b, "; critical: %s files, %s", humanCount(crit.files), humanBytes(crit.bytes))
			if !s.Final {
				b.WriteString(" (left for the final pass)")
			}
		}
		var why string
		copyBytes, why = expectedCopy(ctx, c, s, all.bytes, crit.bytes)
		fmt.Fprintf(&b, "\n  expected to copy: %s (%s)", humanBytes(copyBytes), why)
	}
	fmt.Fprintf(&b, "\n  manifest: %s", manifestPath(s.Destination))
	if s.Final {
		b.WriteString("\n  rollback: nothing (the warm pass's rollback removes the copy), unless no warm pass ran before it: then remove what it made")
	} else {
		fmt.Fprintf(&b, "\n  rollback: remove %s (if this step made it) and its manifest", s.Destination)
	}
	return sdk.Plan[struct{}]{Diff: b.String(), CopyBytes: copyBytes}
}

// assumedChange is the share of a tree a final pass expects to find
// changed since its warm pass, when planned before the warm pass ran.
const assumedChange = 0.01

// expectedCopy is what a pass expects to copy, for the plan's estimate of
// the service's window, and why: a warm pass, all but the critical files;
// a final pass after a warm one (its manifest is there, or after_warm),
// the critical files and assumedChange of the rest; a cold final pass,
// the whole tree.
func expectedCopy(ctx context.Context, c *call, s syncSpec, all, crit int64) (int64, string) {
	if !s.Final {
		return all - crit, "all but the critical files, at most"
	}
	_, err := c.Settings.c.StatFile(ctx, s.Instance, manifestPath(s.Destination))
	warm := err == nil
	if !warm && !s.AfterWarm {
		return all, "a cold copy: no warm pass before it"
	}
	return crit + int64(assumedChange*float64(all-crit)), fmt.Sprintf("the critical files and, assumed, %g%% of the rest changed since the warm pass", assumedChange*100)
}

// humanBytes is a size in decimal units: "312.4 MB".
func humanBytes(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), 0
	for v >= unit && i < 5 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %cB", v, " kMGTP"[i])
}

// humanCount is a count with thousands separators: "1,204".
func humanCount(n int64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func syncUndo(inv syncRevert) *sdk.RevertData[syncRevert] {
	m := manifestPath(inv.Destination)
	var desc string
	switch {
	case inv.Final && !inv.Remove:
		desc = "nothing (the warm pass's rollback removes the copy)"
	case inv.Created:
		desc = fmt.Sprintf("remove the copy %s and its manifest %s in instance %q", inv.Destination, m, inv.Instance)
	default:
		desc = fmt.Sprintf("remove the manifest %s in instance %q (%s was there before the copy and is left)", m, inv.Instance, inv.Destination)
	}
	return &sdk.RevertData[syncRevert]{Description: desc, Data: inv}
}

func applySync(ctx context.Context, c *call, s syncSpec, _ struct{}, prior *sdk.Prior[struct{}, syncRevert]) syncApply {
	start := time.Now()
	api := c.Settings.c
	inv := syncRevert{Instance: s.Instance, Destination: s.Destination, Final: s.Final}
	if prior != nil && prior.Revert != nil {
		was := prior.Revert.Data
		dropLeft(ctx, c, execRevert{Instance: was.Instance, Operation: was.Operation}, s.timeout)
		inv.Created, inv.Remove = was.Created, was.Remove
	} else {
		_, err := api.StatFile(ctx, s.Instance, s.Destination)
		switch {
		case incusapi.IsNotFound(err):
			inv.Created = true
		case err != nil:
			return syncApply{Diagnostics: apiErr(c, "Cannot Read Instance File", err)}
		}
	}
	intend := func() error { return sdk.Intend(c, syncUndo(inv)) }
	// A destination the step makes is the step's to remove; a final
	// pass that finds none is a cold copy.
	inv.Remove = inv.Remove || !s.Final || inv.Created
	if err := intend(); err != nil {
		return syncApply{Diagnostics: errorf("Cannot Record The Copy", "%s: what the copy is about to do could not be recorded in the state before it is done (%v); nothing was changed.", c.Addr, err)}
	}
	g := &incusGuest{c: c, inst: s.Instance, timeout: s.timeout,
		started: func(op string) error { inv.Operation = op; return intend() },
		ended:   func() { inv.Operation = "" },
	}
	p := syncParams{src: s.Source, dst: s.Destination, final: s.Final, critical: s.Critical,
		logf: func(format string, args ...any) { logf(c, format, args...) },
		intend: func(cold bool) error {
			inv.Remove = inv.Remove || cold
			return intend()
		}}
	res, err := syncPass(ctx, g, p)
	undo := syncUndo(inv)
	if err != nil {
		return syncApply{Revert: undo, Diagnostics: syncErr(c, s, err)}
	}
	out := syncOut{Files: res.files, Bytes: res.bytes, CopiedFiles: res.copiedFiles, CopiedBytes: res.copiedBytes, Seconds: since(start), Manifest: res.manifest}
	logf(c, "%s pass: %d of %d files copied (%d of %d bytes) in %.1fs", passName(s.Final), out.CopiedFiles, out.Files, out.CopiedBytes, out.Bytes, out.Seconds)
	return syncApply{Outputs: out, Revert: undo}
}

// syncErr is the diagnostic of a failed pass.
func syncErr(c *call, s syncSpec, err error) phases.Diagnostics {
	var de *diffError
	if errors.As(err, &de) {
		summary := "Copy Not Verified"
		if strings.HasPrefix(de.what, "the destination changed") {
			summary = "Destination Changed"
		}
		return errorf(summary, "%s: %s in instance %q, %d files: %s. %s", c.Addr, de.what, s.Instance, de.total, strings.Join(de.lines, "; "), syncFix(summary))
	}
	var se *incusapi.StatusError
	var ue *incusapi.UnreachableError
	if errors.As(err, &se) || errors.As(err, &ue) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return apiErr(c, "Sync Failed", fmt.Errorf("%s -> %s in instance %q: %w", s.Source, s.Destination, s.Instance, err))
	}
	return errorf("Sync Failed", "%s: %s -> %s in instance %q: %v", c.Addr, s.Source, s.Destination, s.Instance, err)
}

func syncFix(summary string) string {
	if summary == "Destination Changed" {
		return "The final pass copies nothing onto a destination something else changed: find what writes to it, then run the warm pass again (or roll it back) before the final one."
	}
	return "The new service must not start on this copy: is the old service really stopped? Run the final pass again: it copies what differs and verifies again."
}

func revertSync(ctx context.Context, c *call, a syncSpec, u sdk.Applied[syncRevert]) phases.Diagnostics {
	inv := u.Data
	inst, dst := pick(inv.Instance, a.Instance), pick(inv.Destination, path.Clean(a.Destination))
	timeout := 2 * time.Hour
	if t, err := time.ParseDuration(a.Timeout); err == nil && t > 0 {
		timeout = t
	}
	dropLeft(ctx, c, execRevert{Instance: inst, Operation: inv.Operation}, timeout)
	if inv.Final && !inv.Remove {
		logf(c, "nothing to undo: the warm pass's rollback removes the copy")
		return nil
	}
	if dst == "" || checkDir(dst) != "" {
		return errorf("Cannot Remove Copy", "%s: the destination %q recorded in the state is not an absolute directory: nothing removed.", c.Addr, dst)
	}
	all := "0"
	if inv.Created {
		all = "1"
	}
	g := &incusGuest{c: c, inst: inst, timeout: timeout}
	if err := g.run(ctx, helper("remove", dst, all, manifestPath(dst), workPath(dst)), io.Discard); err != nil {
		return syncErr(c, syncSpec{Instance: inst, Source: a.Source, Destination: dst}, err)
	}
	if inv.Created {
		logf(c, "removed %s and %s in %s", dst, manifestPath(dst), inst)
	} else {
		logf(c, "removed %s in %s (%s was there before the copy: left)", manifestPath(dst), inst, dst)
	}
	return nil
}
