package incus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
	"github.com/homelab-migrate/migrate/providers/sdk"
	"github.com/homelab-migrate/migrate/secret/agefile"
)

// fileSpec is an incus_file step: a file or a directory tree copied
// between the machine running migrate and an instance.
type fileSpec struct {
	Instance    string `cty:"instance" required:"true" doc:"The instance (running, or a stopped container)."`
	Direction   string `cty:"direction" doc:"\"push\" (default: from this machine into the instance) or \"pull\" (from the instance to this machine)."`
	Source      string `cty:"source" required:"true" doc:"Push: a local file or directory, relative to the runbook. Pull: an absolute path in the instance. A directory copies its whole tree."`
	Destination string `cty:"destination" required:"true" doc:"Push: an absolute path in the instance. Pull: a local path, relative to the runbook, written 0600; ending in .age (a file only), the content is written age-encrypted to the runbook's .age-recipients and never in clear."`
	Mode        string `cty:"mode" doc:"Push: the mode of the files in the instance, in octal such as \"0640\"; default each local file's own."`
	UID         int64  `cty:"uid" doc:"Push: the owner (uid) of what is pushed; 0 by default."`
	GID         int64  `cty:"gid" doc:"Push: the group (gid) of what is pushed; 0 by default."`
	MaxFiles    int64  `cty:"max_files" doc:"The most entries (files and directories) a tree in the instance may have: a larger one is refused before anything is copied, as is one deeper than 64 directories. Default 100000; raise it for a tree really that large."`

	push   bool
	mode   fs.FileMode // 0: each local file's own
	local  string      // the local side, absolute
	remote string      // the instance side, cleaned
	age    bool        // a pull into an age-encrypted file
}

type fileOut struct {
	SHA256 string `cty:"sha256"`
	Size   int64  `cty:"size"`
	Files  int64  `cty:"files"`
}

// fileRevert is how to undo an incus_file step: paths relative to Root
// (the destination; "" is Root itself) that the apply created, and those
// whose previous content it moved aside to PATH.migrate-orig. It is saved
// before the apply changes anything (intend), so it may name what a
// killed apply did not get to: undoing that finds nothing to undo.
type fileRevert struct {
	Push     bool     `json:"push,omitempty"`
	Instance string   `json:"instance,omitempty"`
	Root     string   `json:"root,omitempty"`
	Created  []string `json:"created,omitempty"`
	Replaced []string `json:"replaced,omitempty"`
	// Kept: a push's replaced files by path, the SHA-256 they had when
	// they were copied to PATH.migrate-orig. The instance's files API
	// cannot rename, so a kill can cut that copy short: a copy of another
	// content is one, and is never put back.
	Kept map[string]string `json:"kept,omitempty"`
}

// filePrivate is what an incus_file step keeps in its record besides
// its outputs (the source's SHA-256 when it was copied).
type filePrivate struct {
	// HandedOver: a step that depends on the copy ran since (a restore
	// that unpacks and chowns it, an application that writes to it).
	// The destination is theirs from then on: what they made of it is
	// not drift, and pulling the copy again over it would undo their
	// work. Only a change of the source, or a destination removed from
	// outside the runbook, makes the copy run again.
	HandedOver bool `json:"handed_over,omitempty"`
}

// origSuffix names the copy of a replaced file, kept beside it (in the
// instance for a push, locally for a pull) until rollback puts it back:
// the state never holds a file's content.
const origSuffix = ".migrate-orig"

type fileApply = sdk.Apply[filePrivate, fileRevert]

// File is the name of the incus_file step type.
const File = "incus_file"

var fileStep = &sdk.StepType[*conn, fileSpec, filePrivate, fileRevert]{
	Name:        File,
	Description: "Pushes a file or directory tree into an instance, or pulls one out (optionally into an age-encrypted file), with its SHA-256 as an output; rollback removes what it created and puts back what it replaced.",
	Rollback:    "Removes what it created; a file it replaced was kept beside it as NAME.migrate-orig (never in the state) and is put back.",
	Outputs:     fileOut{},
	Rebase:      true, // the steps after a copy may change its destination: see filePrivate
	Validate:    validateFile,
	Read:        readFile,
	Plan:        planFile,
	Apply:       applyFile,
	Revert:      revertFile,
	Digest:      digestFile,
}

func validateFile(c *call, s *fileSpec) phases.Diagnostics {
	var d phases.Diagnostics
	bad := func(format string, args ...any) {
		d = append(d, errorf("Invalid Attribute Value", format, args...)...)
	}
	switch orDefault(s.Direction, "push") {
	case "push":
		s.push = true
		s.local, s.remote = s.Source, s.Destination
	case "pull":
		s.local, s.remote = s.Destination, s.Source
		if !c.Null("mode") || !c.Null("uid") || !c.Null("gid") {
			bad("%s pulls a file: mode, uid and gid are for a push (pulled files are written 0600, owned by the user running migrate); remove them.", c.Addr)
		}
		s.age = strings.HasSuffix(s.local, agefile.Ext)
	default:
		bad("The \"direction\" attribute of %s must be \"push\" or \"pull\", not %q.", c.Addr, s.Direction)
	}
	if !strings.HasPrefix(s.remote, "/") {
		bad("The path in the instance of %s must be absolute, not %q.", c.Addr, s.remote)
	}
	s.remote = path.Clean(s.remote)
	if s.local == "" {
		bad("The local path of %s is empty.", c.Addr)
	}
	if !filepath.IsAbs(s.local) {
		s.local = filepath.Join(c.Settings.dir, s.local)
	}
	if s.Mode != "" {
		m, err := strconv.ParseUint(s.Mode, 8, 32)
		if err != nil || m == 0 || m > 0o7777 {
			bad("The \"mode\" attribute of %s must be an octal mode such as \"0640\", not %q.", c.Addr, s.Mode)
		}
		s.mode = fs.FileMode(m)
	}
	switch {
	case c.Null("max_files"):
		s.MaxFiles = defaultMaxFiles
	case s.MaxFiles < 1:
		bad("The \"max_files\" attribute of %s must be at least 1, not %d.", c.Addr, s.MaxFiles)
	}
	if s.UID < 0 || s.GID < 0 || s.UID > 1<<32-1 || s.GID > 1<<32-1 {
		bad("The uid and gid of %s must be numeric ids from 0 to 4294967295, not %d and %d.", c.Addr, s.UID, s.GID)
	}
	return d
}

// want is what a push makes of a local entry in the instance.
func (s fileSpec) want(e entry) entry {
	e.uid, e.gid = s.UID, s.GID
	if s.mode != 0 && !e.dir {
		e.mode = s.mode
	}
	return e
}

// differs lists the entries of the source whose counterpart at the
// destination is missing or not the same (content; for a push also mode
// and owner); the destination's extra files are left alone.
func (s fileSpec) differs(src, dst tree) []entry {
	var out []entry
	for _, e := range src {
		if s.push {
			e = s.want(e)
		}
		d := dst.find(e.rel)
		switch {
		case d == nil || d.dir != e.dir || d.sum != e.sum:
			out = append(out, e)
		case e.dir: // a directory that is there keeps its own mode and owner
		case s.push && (d.mode != e.mode || d.uid != e.uid || d.gid != e.gid):
			out = append(out, e)
		}
	}
	return out
}

// sides scans the source and the destination; src nil: no source.
func sides(ctx context.Context, c *call, s fileSpec, prior *sdk.Prior[filePrivate, fileRevert]) (src, dst tree, err error) {
	api := c.Settings.c
	if s.push {
		if src, err = scanLocal(s.local); err != nil {
			return nil, nil, err
		}
		dst, err = scanRemote(ctx, api, s.Instance, s.remote, int(s.MaxFiles))
		return src, dst, err
	}
	if src, err = scanRemote(ctx, api, s.Instance, s.remote, int(s.MaxFiles)); err != nil {
		return nil, nil, err
	}
	if !s.age {
		dst, err = scanLocal(s.local)
		return src, dst, err
	}
	// An encrypted copy cannot be read without the identity: it is the
	// source's content if the last apply said so and it is still there.
	if _, err := os.Stat(s.local); err == nil && prior != nil && src != nil && priorSHA(prior) == src.summary().SHA256 {
		dst = src
	}
	return src, dst, nil
}

// where names the two sides for messages: "./x" and "matrix:/etc/x".
func (s fileSpec) where() (from, to string) {
	local := s.Source
	if !s.push {
		local = s.Destination
	}
	if !filepath.IsAbs(local) && !strings.HasPrefix(local, ".") {
		local = "./" + local
	}
	remote := s.Instance + ":" + s.remote
	if s.push {
		return local, remote
	}
	return remote, local
}

func noSource(c *call, s fileSpec) phases.Diagnostics {
	from, _ := s.where()
	return errorf("File Not Found", "%s: the source %s does not exist (or is neither a file nor a directory).", c.Addr, from)
}

func scanErr(c *call, err error) phases.Diagnostics {
	var se *incusapi.StatusError
	var hostile *hostileTreeError
	if errors.As(err, &hostile) {
		return errorf("Listing Refused", "%s: %v. Nothing was copied.", c.Addr, err)
	}
	if errors.As(err, &se) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return apiErr(c, "Cannot Read Files", err)
	}
	return errorf("Cannot Read Files", "%s: %v.", c.Addr, err)
}

func readFile(ctx context.Context, c *call, s fileSpec, prior *sdk.Prior[filePrivate, fileRevert]) sdk.Read[fileRevert] {
	if c.Rebase {
		// A step that depends on the copy just ran: the destination is
		// theirs now, whatever they made of it (nothing to scan).
		return sdk.Read[fileRevert]{Observation: providers.Present, Private: filePrivate{HandedOver: true}}
	}
	src, dst, err := sides(ctx, c, s, prior)
	if err != nil {
		return sdk.Read[fileRevert]{Diagnostics: scanErr(c, err)}
	}
	from, to := s.where()
	switch {
	case src == nil:
		return sdk.Read[fileRevert]{Observation: providers.Unknown, Detail: "the source does not exist"}
	case prior != nil && prior.Private.HandedOver:
		return readHandedOver(s, prior, src, dst, from, to)
	case dst == nil:
		return sdk.Read[fileRevert]{Observation: providers.Absent, Detail: to + " does not exist"}
	case len(s.differs(src, dst)) > 0:
		return sdk.Read[fileRevert]{Observation: providers.Drifted, Detail: to + " differs from the source"}
	}
	r := sdk.Read[fileRevert]{Observation: providers.Present, Outputs: src.summary()}
	if prior == nil {
		r.Revert = adopted(ctx, c, s, src)
	}
	return r
}

// readHandedOver reads a copy whose destination the steps after it took
// over: it is done unless its source changed since the copy, or its
// destination was removed from outside the runbook; the plan says which.
func readHandedOver(s fileSpec, prior *sdk.Prior[filePrivate, fileRevert], src, dst tree, from, to string) sdk.Read[fileRevert] {
	was, now := priorSHA(prior), src.summary().SHA256
	switch {
	case was != "" && was != now:
		return sdk.Read[fileRevert]{Observation: providers.Drifted, Detail: fmt.Sprintf("its source %s changed since the copy (sha256 %s then, %s now): copying it again overwrites what the steps after it made of %s", from, short(was), short(now), to)}
	case dst == nil:
		return sdk.Read[fileRevert]{Observation: providers.Absent, Detail: fmt.Sprintf("%s was removed from outside the runbook since the steps after the copy took it over", to)}
	}
	return sdk.Read[fileRevert]{Observation: providers.Present}
}

// priorSHA is the sha256 output of the step's last apply; "" when it has
// none (a record saved before its apply ended has no outputs).
func priorSHA(prior *sdk.Prior[filePrivate, fileRevert]) string {
	o := prior.Outputs
	if o == cty.NilVal || o.IsNull() || !o.Type().IsObjectType() || !o.Type().HasAttribute("sha256") {
		return ""
	}
	if v := o.GetAttr("sha256"); v.IsKnown() && !v.IsNull() {
		return v.AsString()
	}
	return ""
}

// adopted is the revert data of a copy found done with no record of it (a run
// stopped before the end of the step was recorded): the files kept as
// .migrate-orig beside the destination's are put back; what the copy
// created cannot be told from what was there before, and stays.
func adopted(ctx context.Context, c *call, s fileSpec, src tree) *sdk.RevertData[fileRevert] {
	inv := fileRevert{Push: s.push, Instance: s.Instance, Root: s.remote}
	if !s.push {
		inv.Root = s.local
	}
	for _, e := range src {
		if e.dir {
			continue
		}
		p := join(inv.Root, e.rel) + origSuffix
		var err error
		if s.push {
			_, err = c.Settings.c.StatFile(ctx, s.Instance, p)
		} else {
			_, err = os.Lstat(p)
		}
		if err == nil {
			inv.Replaced = append(inv.Replaced, e.rel)
		}
	}
	_, to := s.where()
	return &sdk.RevertData[fileRevert]{Description: fmt.Sprintf("put back the files of %s kept as *%s (what the copy created is left: a run stopped before its record)", to, origSuffix), Data: inv}
}

func planFile(ctx context.Context, c *call, s fileSpec, prior *sdk.Prior[filePrivate, fileRevert]) sdk.Plan[filePrivate] {
	// A pull into a directory that is not there: refused, unless a step
	// this one depends on runs first and may make it.
	note := ""
	if dir, d := missingParent(c, s); d != nil {
		if !c.AfterChanges {
			return sdk.Plan[filePrivate]{Diagnostics: d}
		}
		note = fmt.Sprintf("\n  note: the directory %s is not there yet: a step this one depends on must create it, else the copy fails", dir)
	}
	src, dst, err := sides(ctx, c, s, prior)
	from, to := s.where()
	verb := "pull"
	if s.push {
		verb = "push"
	}
	// What an earlier step of the run creates (an export, the instance
	// itself) is not there yet: the copy is planned, and checked when it
	// runs.
	if c.AfterChanges && (src == nil && err == nil || incusapi.IsNotFound(err)) {
		return sdk.Plan[filePrivate]{Diff: fmt.Sprintf("+ %s %s -> %s\n  %s is not there yet: a step this one depends on runs first; the copy is sized when it runs%s\n  rollback: remove what the copy created, put back what it replaced", verb, from, to, from, note)}
	}
	if err != nil {
		return sdk.Plan[filePrivate]{Diagnostics: scanErr(c, err)}
	}
	if src == nil {
		return sdk.Plan[filePrivate]{Diagnostics: noSource(c, s)}
	}
	sum := src.summary()
	ch := s.differs(src, dst)
	if len(ch) == 0 {
		return sdk.Plan[filePrivate]{Diff: fmt.Sprintf("%s already has the content of %s (sha256 %s): nothing to copy", to, from, sum.SHA256)}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "+ %s %s -> %s (", verb, from, to)
	switch {
	case s.age:
		rs, err := agefile.RunbookRecipients(c.Settings.dir)
		if err != nil {
			return sdk.Plan[filePrivate]{Diagnostics: errorf("No Age Recipients", "%s pulls into %s, an age-encrypted file: %v.", c.Addr, to, err)}
		}
		fmt.Fprintf(&b, "age-encrypted to %d recipients", len(rs))
	case !s.push:
		b.WriteString("0600")
	case s.mode != 0:
		fmt.Fprintf(&b, "%04o, %d:%d", s.mode, s.UID, s.GID)
	case len(src) == 1:
		fmt.Fprintf(&b, "%04o, %d:%d", src[0].mode, s.UID, s.GID)
	default:
		fmt.Fprintf(&b, "%d:%d", s.UID, s.GID)
	}
	fmt.Fprintf(&b, "), %d bytes", sum.Size)
	if src[0].dir {
		fmt.Fprintf(&b, " in %d files", sum.Files)
	}
	for _, e := range ch {
		if d := dst.find(e.rel); d != nil && !d.dir && !e.dir {
			fmt.Fprintf(&b, "\n  ~ replaces %s (kept as %s%s until rollback)", join(s.side(to), e.rel), join(s.side(to), e.rel), origSuffix)
		}
	}
	b.WriteString(note)
	b.WriteString("\n  rollback: remove what the copy created, put back what it replaced")
	return sdk.Plan[filePrivate]{Diff: b.String()}
}

// missingParent is the diagnostic of a pull whose destination's directory
// is not there, and that directory. It is never made: a mistyped host
// path (or a variable pointing elsewhere) must fail, not grow a tree
// where nobody looks.
func missingParent(c *call, s fileSpec) (string, phases.Diagnostics) {
	if s.push {
		return "", nil
	}
	dir := filepath.Dir(s.local)
	near := dir
	fi, err := os.Stat(near)
	for err != nil && filepath.Dir(near) != near {
		near = filepath.Dir(near)
		fi, err = os.Stat(near)
	}
	from, to := s.where()
	switch {
	case err != nil:
		return dir, errorf("Cannot Pull File", "%s: the directory of %s cannot be read: %v.", c.Addr, to, err)
	case near == dir && fi.IsDir():
		return "", nil
	case !fi.IsDir():
		return dir, errorf("Destination Directory Missing", "%s pulls %s into %s, but %s is a file, not a directory. Fix the destination (or the variable that sets it), or move that file away.", c.Addr, from, to, near)
	}
	return dir, errorf("Destination Directory Missing",
		"%s pulls %s into %s, but the directory %s does not exist (the nearest that does is %s). "+
			"Create it (mkdir -p %s), or fix the destination or the variable that sets it: migrate does not create it, so that a mistyped path fails here instead of making a tree.",
		c.Addr, from, to, dir, near, dir)
}

// side is the destination's path without the instance name.
func (s fileSpec) side(to string) string {
	if s.push {
		return s.remote
	}
	return to
}

// digestFile adds the local source's SHA-256 to the inputs of a push, so
// that a changed file plans a new copy.
func digestFile(_ context.Context, c *call, s fileSpec) (string, phases.Diagnostics) {
	if !s.push {
		return "", nil
	}
	t, err := scanLocal(s.local)
	if err != nil || t == nil {
		return "", nil // Plan says what is wrong
	}
	return "source sha256 " + t.summary().SHA256, nil
}

func applyFile(ctx context.Context, c *call, s fileSpec, _ filePrivate, prior *sdk.Prior[filePrivate, fileRevert]) fileApply {
	if _, d := missingParent(c, s); d != nil {
		return fileApply{Diagnostics: d} // before anything is written
	}
	src, dst, err := sides(ctx, c, s, prior)
	if err != nil {
		return fileApply{Diagnostics: scanErr(c, err)}
	}
	if src == nil {
		return fileApply{Diagnostics: noSource(c, s)}
	}
	inv := fileRevert{Push: s.push, Instance: s.Instance, Root: s.remote}
	if !s.push {
		inv.Root = s.local
	}
	if prior != nil && prior.Revert != nil {
		inv.Created, inv.Replaced, inv.Kept = prior.Revert.Data.Created, prior.Revert.Data.Replaced, prior.Revert.Data.Kept
	}
	var d phases.Diagnostics
	if s.push {
		d = push(ctx, c, s, src, dst, &inv)
	} else {
		d = pull(ctx, c, s, src, dst, &inv)
	}
	from, to := s.where()
	undo := &sdk.RevertData[fileRevert]{Description: fmt.Sprintf("remove what was copied to %s, put back what it replaced", to), Data: inv}
	if d.HasErrors() {
		return fileApply{Revert: undo, Diagnostics: d}
	}
	sum := src.summary()
	logf(c, "%s -> %s: %d files, %d bytes, sha256 %s", from, to, sum.Files, sum.Size, sum.SHA256)
	return fileApply{Outputs: sum, Revert: undo}
}

func addOnce(list *[]string, rel string) {
	if !slices.Contains(*list, rel) {
		*list = append(*list, rel)
	}
}

func push(ctx context.Context, c *call, s fileSpec, src, dst tree, inv *fileRevert) phases.Diagnostics {
	api := c.Settings.c
	ch := s.differs(src, dst)
	// First what is there and what a killed run left, so that the revert
	// data says all the apply does before it does any of it.
	kept := map[string]bool{} // PATH.migrate-orig is there
	for _, e := range ch {
		p := join(s.remote, e.rel)
		old := dst.find(e.rel)
		if old != nil && old.dir != e.dir {
			return errorf("Cannot Push File", "%s: %s:%s is a %s in the instance, but the source's is not; remove it first.", c.Addr, s.Instance, p, kind(old.dir))
		}
		if !e.dir {
			switch _, err := api.StatFile(ctx, s.Instance, p+origSuffix); {
			case err == nil:
				kept[e.rel] = true
			case !incusapi.IsNotFound(err):
				return apiErr(c, "Cannot Push File", err)
			}
		}
		var sum string
		if old != nil && !kept[e.rel] {
			sum = old.sum
		}
		inv.intend(e, old != nil || kept[e.rel], sum)
	}
	if d := intend(c, s, inv); d != nil {
		return d
	}
	for _, e := range ch {
		p := join(s.remote, e.rel)
		old := dst.find(e.rel)
		put := incusapi.FilePut{Type: "file", UID: e.uid, GID: e.gid, Mode: e.mode}
		if e.dir {
			put.Type = "directory"
			if old == nil { // a directory that was there keeps its own mode and owner
				if err := api.PushFile(ctx, s.Instance, p, put); err != nil {
					return pushErr(c, s, p, err)
				}
			}
			logf(c, "pushed %s:%s", s.Instance, p)
			continue
		}
		if old != nil {
			if err := keepInInstance(ctx, api, s.Instance, p, *old, inv.Kept[e.rel], kept[e.rel]); err != nil {
				return apiErr(c, "Cannot Push File", err)
			}
			// An overwrite keeps the old mode and owner: replace.
			if err := api.DeleteFile(ctx, s.Instance, p); err != nil && !incusapi.IsNotFound(err) {
				return apiErr(c, "Cannot Push File", err)
			}
		}
		f, err := os.Open(filepath.Join(s.local, filepath.FromSlash(e.rel)))
		if err != nil {
			return errorf("Cannot Read Source File", "%s: %v.", c.Addr, err)
		}
		put.Content = f
		err = api.PushFile(ctx, s.Instance, p, put)
		f.Close()
		if err != nil {
			return pushErr(c, s, p, err)
		}
		logf(c, "pushed %s:%s", s.Instance, p)
	}
	return nil
}

// intend records on fileRevert what the apply is about to do to e: the
// destination's entry is created, or replaced (there, or moved aside by
// a killed run); sum is the SHA-256 of the file about to be kept as
// PATH.migrate-orig when it is copied (a push), "" otherwise. An entry
// an earlier try created stays created.
func (inv *fileRevert) intend(e entry, there bool, sum string) {
	switch {
	case !there:
		addOnce(&inv.Created, e.rel)
	case e.dir || slices.Contains(inv.Created, e.rel):
	default:
		addOnce(&inv.Replaced, e.rel)
		if _, known := inv.Kept[e.rel]; sum != "" && !known {
			if inv.Kept == nil {
				inv.Kept = map[string]string{}
			}
			inv.Kept[e.rel] = sum
		}
	}
}

// intend saves the revert data of what the apply is about to do in the
// step's record before it does it: a kill from here on leaves a record
// that says it, never a replaced file taken for a created one.
func intend(c *call, s fileSpec, inv *fileRevert) phases.Diagnostics {
	_, to := s.where()
	undo := &sdk.RevertData[fileRevert]{Description: fmt.Sprintf("remove what was copied to %s, put back what it replaced", to), Data: *inv}
	if err := sdk.Intend(c, undo); err != nil {
		return errorf("Cannot Record The Copy", "%s: what the copy is about to do could not be recorded in the state before it is done (%v); nothing was changed.", c.Addr, err)
	}
	return nil
}

// keepInInstance copies the file at p, about to be replaced, to
// PATH.migrate-orig and checks the copy, unless a complete one is there:
// want is the SHA-256 recorded before it was first copied ("" unknown:
// kept by an older run, taken as it is). The file at p is removed only
// after its copy is checked, so a copy a kill cut short is made again
// from the file itself.
func keepInInstance(ctx context.Context, api *incusapi.Client, inst, p string, old entry, want string, kept bool) error {
	if kept {
		if want == "" {
			return nil
		}
		got, err := sumInInstance(ctx, api, inst, p+origSuffix)
		if err != nil || got == want {
			return err
		}
		if old.sum != want {
			return fmt.Errorf("%s:%s: the copy kept as %s%s was cut short, and %s is no longer the file it was a copy of: put the file back by hand", inst, p, p, origSuffix, p)
		}
	}
	if err := copyInInstance(ctx, api, inst, p, p+origSuffix, old); err != nil {
		return err
	}
	got, err := sumInInstance(ctx, api, inst, p+origSuffix)
	if err == nil && got != old.sum {
		err = fmt.Errorf("%s:%s: its copy %s%s differs from it (sha256 %s, not %s): the file changed while it was copied; run again", inst, p, p, origSuffix, short(got), short(old.sum))
	}
	return err
}

// sumInInstance is the SHA-256 of a file in the instance.
func sumInInstance(ctx context.Context, api *incusapi.Client, inst, p string) (string, error) {
	_, r, _, err := api.GetFile(ctx, inst, p)
	if err != nil {
		return "", err
	}
	defer r.Close()
	sum, _, err := hashOf(r)
	return sum, err
}

// pushErr explains a failed push; a missing parent directory is the
// usual reason.
func pushErr(c *call, s fileSpec, p string, err error) phases.Diagnostics {
	if incusapi.IsNotFound(err) {
		return errorf("Cannot Push File", "%s: %s:%s cannot be created: its parent directory %s does not exist in the instance (or the instance does not). Create it first (an incus_exec step with mkdir -p), or push into a directory that exists.", c.Addr, s.Instance, p, path.Dir(p))
	}
	return apiErr(c, "Cannot Push File", err)
}

func kind(dir bool) string {
	if dir {
		return "directory"
	}
	return "file"
}

// copyInInstance copies a file of the instance to another path, with its
// mode and owner.
func copyInInstance(ctx context.Context, api *incusapi.Client, inst, from, to string, e entry) error {
	_, r, _, err := api.GetFile(ctx, inst, from)
	if err != nil {
		return err
	}
	defer r.Close()
	return api.PushFile(ctx, inst, to, incusapi.FilePut{UID: e.uid, GID: e.gid, Mode: e.mode, Content: r})
}

func pull(ctx context.Context, c *call, s fileSpec, src, dst tree, inv *fileRevert) phases.Diagnostics {
	api := c.Settings.c
	failed := func(err error) phases.Diagnostics {
		var se *incusapi.StatusError
		if errors.As(err, &se) || ctx.Err() != nil {
			return apiErr(c, "Cannot Pull File", err)
		}
		return errorf("Cannot Pull File", "%s: %v.", c.Addr, err)
	}
	if s.age && src[0].dir {
		return errorf("Cannot Pull File", "%s: %s:%s is a directory; an age-encrypted destination (%s) takes a single file. Pull the files one by one, or into a directory.", c.Addr, s.Instance, s.remote, s.Destination)
	}
	root, err := os.OpenRoot(filepath.Dir(s.local))
	if err != nil {
		return failed(err)
	}
	defer root.Close()
	base := filepath.Base(s.local)
	ch := s.differs(src, dst)
	// First what is there and what a killed run left (see push).
	for _, e := range ch {
		name := localName(base, e.rel)
		info, err := root.Lstat(name)
		exists := err == nil
		if exists && info.IsDir() != e.dir {
			return errorf("Cannot Pull File", "%s: the local %s is a %s, but the source's is not; remove it first.", c.Addr, filepath.Join(root.Name(), name), kind(info.IsDir()))
		}
		kept := false
		if !e.dir {
			if kept, err = isThere(root, name+origSuffix); err != nil {
				return failed(err)
			}
		}
		inv.intend(e, exists || kept, "")
	}
	if d := intend(c, s, inv); d != nil {
		return d
	}
	for _, e := range ch {
		name := localName(base, e.rel)
		if e.dir {
			if err := root.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return failed(err)
			}
			continue
		}
		if err := keepLocal(root, name); err != nil {
			return failed(err)
		}
		if err := pullOne(ctx, c, s, api, join(s.remote, e.rel), root, name); err != nil {
			return failed(err)
		}
		logf(c, "pulled %s:%s", s.Instance, join(s.remote, e.rel))
	}
	return nil
}

// isThere reports whether name is there in root (as itself: a link is
// not followed).
func isThere(root *os.Root, name string) (bool, error) {
	_, err := root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// localName is the name under the destination's directory (the pull's
// os.Root) of the entry rel of a tree copied to base. rel was checked
// name by name when the instance listed it (guestName).
func localName(base, rel string) string {
	return filepath.Join(base, filepath.FromSlash(rel))
}

// keepLocal moves a file about to be replaced aside to NAME.migrate-orig,
// once: a copy run again must not move its own over it. One rename, so a
// kill leaves the file or its kept copy, never neither.
func keepLocal(root *os.Root, name string) error {
	kept, err := isThere(root, name+origSuffix)
	if err != nil || kept {
		return err
	}
	if err := root.Rename(name, name+origSuffix); !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil // nothing to keep: a file created
}

// tmpName is where a pulled file is written before it is renamed to
// name: always the same name, so that what a killed run left is written
// over by the next (or removed by rollback), never piled up.
func tmpName(name string) string {
	return filepath.Join(filepath.Dir(name), "."+filepath.Base(name)+".migrate-tmp")
}

// pullOne writes a file of the instance to name in root, 0600, through a
// temporary file renamed over it; for an age destination the clear bytes
// stay in memory and only the encrypted ones are written.
func pullOne(ctx context.Context, c *call, s fileSpec, api *incusapi.Client, from string, root *os.Root, name string) error {
	_, r, _, err := api.GetFile(ctx, s.Instance, from)
	if err != nil {
		return err
	}
	defer r.Close()
	var body io.Reader = r
	if s.age {
		clear, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		rs, err := agefile.RunbookRecipients(c.Settings.dir)
		if err != nil {
			return err
		}
		sealed, err := agefile.Encrypt(clear, false, rs...)
		if err != nil {
			return err
		}
		body = bytes.NewReader(sealed)
	}
	tmp := tmpName(name)
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, body)
	if err == nil {
		err = f.Chmod(0o600) // a temporary file a killed run left keeps its own mode
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, name)
	}
	if err != nil {
		_ = root.Remove(tmp)
	}
	return err
}

func revertFile(ctx context.Context, c *call, a fileSpec, u sdk.Applied[fileRevert]) phases.Diagnostics {
	_ = validateFile(c, &a) // the derived paths; rollback may lack some attributes
	inv := u.Data
	root := pick(inv.Root, a.remote)
	if !inv.Push {
		root = pick(inv.Root, a.local)
	}
	inst := pick(inv.Instance, a.Instance)
	var local *os.Root // a pull's: every change on this machine goes through it
	if !inv.Push {
		var err error
		if local, err = os.OpenRoot(filepath.Dir(root)); errors.Is(err, fs.ErrNotExist) {
			logf(c, "%s is gone: nothing of the copy is left to undo", filepath.Dir(root))
			return nil
		} else if err != nil {
			return errorf("Cannot Restore File", "%s: %v.", c.Addr, err)
		}
		defer local.Close()
	}
	name := func(rel string) string { return localName(filepath.Base(root), rel) }
	var warn []string
	for _, rel := range inv.Replaced {
		p := join(root, rel)
		if inv.Push {
			done, err := restoreInInstance(ctx, c.Settings.c, inst, p, inv.Kept[rel])
			if err != nil {
				return apiErr(c, "Cannot Restore File", err)
			}
			if !done {
				continue
			}
		} else if err := restoreLocal(local, name(rel)); errors.Is(err, fs.ErrNotExist) {
			continue // put back before
		} else if err != nil {
			return errorf("Cannot Restore File", "%s: %v.", c.Addr, err)
		}
		logf(c, "put back %s", p)
	}
	for _, rel := range slices.Backward(inv.Created) {
		p := join(root, rel)
		var err error
		if inv.Push {
			err = c.Settings.c.DeleteFile(ctx, inst, p)
			if incusapi.IsNotFound(err) {
				err = nil
			}
		} else if err = removeLocal(local, name(rel)); errors.Is(err, fs.ErrNotExist) {
			err = nil
		}
		if err != nil {
			warn = append(warn, fmt.Sprintf("%s (%v)", p, err))
			continue
		}
		logf(c, "removed %s", p)
	}
	if len(warn) > 0 {
		return warning("Copied Files Left", "%s could not remove what it created: %s. A directory that something else wrote into since is kept.", c.Addr, strings.Join(warn, "; "))
	}
	return nil
}

// restoreLocal puts NAME.migrate-orig back over name, and removes what a
// killed pull left of its temporary file.
func restoreLocal(root *os.Root, name string) error {
	if err := root.Remove(tmpName(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return root.Rename(name+origSuffix, name)
}

// removeLocal removes what a pull created at name, with the temporary
// file a killed pull may have left beside it.
func removeLocal(root *os.Root, name string) error {
	if err := root.Remove(tmpName(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return root.Remove(name)
}

// restoreInInstance puts PATH.migrate-orig back over PATH, with its mode
// and owner, then removes it; without it (put back before), nothing. A
// copy whose SHA-256 is not want (when known) was cut short by a kill
// before PATH was touched: it is removed, and PATH stays.
func restoreInInstance(ctx context.Context, api *incusapi.Client, inst, p, want string) (bool, error) {
	if want != "" {
		got, err := sumInInstance(ctx, api, inst, p+origSuffix)
		if incusapi.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if got != want {
			return false, api.DeleteFile(ctx, inst, p+origSuffix)
		}
	}
	fi, r, _, err := api.GetFile(ctx, inst, p+origSuffix)
	if incusapi.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer r.Close()
	if err := api.DeleteFile(ctx, inst, p); err != nil && !incusapi.IsNotFound(err) {
		return false, err
	}
	if err := api.PushFile(ctx, inst, p, incusapi.FilePut{UID: fi.UID, GID: fi.GID, Mode: fi.Mode, Content: r}); err != nil {
		return false, err
	}
	return true, api.DeleteFile(ctx, inst, p+origSuffix)
}
