package talos

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/talos/talospatch"
	"github.com/homelab-migrate/migrate/providers/talos/talosschema"
)

// patchRelease checks each patch against the pinned release: a key the
// release keeps in a typed document (a conflict with its base config)
// fails the plan, which shows the patch rewritten for the release as a
// diff (package talospatch) and the command that writes it. Nothing is
// rewritten behind the runbook's back: the file in git is what is sent.
func (c *call) patchRelease(files []*patchFile) phases.Diagnostics {
	var diags phases.Diagnostics
	hostnameDoc := len(findPath(files, "HostnameConfig", "")) > 0
	for _, f := range files {
		r, err := talospatch.Upgrade(f.data, c.s.version)
		if err != nil || !r.Changed() {
			continue // an unreadable patch is LoadPatch's to explain
		}
		if hostnameDoc && movesInto(r, "HostnameConfig") {
			continue // two hostnames, not an old form: validationDiags names both
		}
		diags = append(diags, c.staleKeysDiag(f.name, r))
	}
	return diags
}

func movesInto(r *talospatch.Result, kind string) bool {
	for _, m := range r.Moved {
		if m.Into == kind {
			return true
		}
	}
	return false
}

func (c *call) staleKeysDiag(name string, r *talospatch.Result) phases.Diagnostic {
	var moved []string
	for _, m := range r.Moved {
		moved = append(moved, fmt.Sprintf("%s (line %d) -> %s", m.Field, m.Line, m.Into))
	}
	first := r.Moved[0].Line
	var b strings.Builder
	fmt.Fprintf(&b, "The patch %s of %s sets keys that Talos %s keeps in typed documents, which its base config already carries: the node would refuse the config as a conflict. %s.\n\n",
		name, c.addr, minorOf(r.To), strings.Join(moved, "; "))
	fmt.Fprintf(&b, "The patch rewritten for Talos %s (the same settings, in that release's documents):\n\n%s\n", r.To, r.Diff(name))
	for _, l := range r.Left {
		fmt.Fprintf(&b, "Not rewritten: %s (line %d): %s.\n", l.Field, l.Line, l.What)
	}
	fmt.Fprintf(&b, "Write it with `migrate patches upgrade --to %s --write` in the runbook's directory (the old file is kept as %s.orig), check the diff into git, and plan again.", r.To, name)
	return phases.Diagnostic{Severity: phases.Error, Summary: "Patch Written For An Older Talos",
		Detail: b.String(), Subject: loc{file: name, line: first, col: 1}.rng()}
}

// minorOf is "1.14" for "v1.14.7".
func minorOf(version string) string {
	v := strings.TrimPrefix(version, "v")
	if i := strings.Index(v, "."); i >= 0 {
		if j := strings.IndexAny(v[i+1:], ".-"); j >= 0 {
			return v[:i+1+j]
		}
	}
	return v
}

// UpgradePatch writes to w, as JSON, the patch rewritten for the release
// version (the talos program's UpgradePatchArg): name is the file's, for
// the diff.
func UpgradePatch(w io.Writer, patch []byte, version, name string) error {
	r, err := talospatch.Upgrade(patch, version)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	out := talosschema.PatchUpgrade{New: r.New}
	if r.Changed() {
		out.Diff = r.Diff(name)
	}
	for _, m := range r.Moved {
		out.Moved = append(out.Moved, fmt.Sprintf("%s (line %d) -> %s", m.Field, m.Line, m.Into))
	}
	for _, l := range r.Left {
		out.Left = append(out.Left, fmt.Sprintf("%s (line %d): %s", l.Field, l.Line, l.What))
	}
	return json.NewEncoder(w).Encode(out)
}
