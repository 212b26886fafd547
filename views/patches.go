package views

import (
	"fmt"
	"strings"
)

// PatchesReport is what `migrate patches upgrade` found and did.
type PatchesReport struct {
	To    string
	Write bool // the rewrites were written
	Files []PatchFileReport
}

// PatchFileReport is one patch: its rewrite as a diff ("" when the
// release takes it as it is), the keys moved and those left.
type PatchFileReport struct {
	Name  string
	Diff  string
	Moved []string
	Left  []string
}

// PatchesUpgrade prints each rewrite as a diff, what could not be moved,
// and what was (or would be) written.
func (v *View) PatchesUpgrade(r PatchesReport) {
	st := v.st
	changed := 0
	for _, f := range r.Files {
		if f.Diff == "" && len(f.Left) == 0 {
			fmt.Fprintf(v.out, "%s: %s\n", f.Name, st.dim("already in Talos "+r.To+"'s form"))
			continue
		}
		if f.Diff != "" {
			changed++
			fmt.Fprintf(v.out, "%s: %s\n", st.bold(f.Name), strings.Join(f.Moved, "; "))
			for _, line := range strings.SplitAfter(f.Diff, "\n") {
				switch {
				case strings.HasPrefix(line, "+") && !strings.HasPrefix(line, "+++"):
					line = st.green(strings.TrimSuffix(line, "\n")) + "\n"
				case strings.HasPrefix(line, "-") && !strings.HasPrefix(line, "---"):
					line = st.red(strings.TrimSuffix(line, "\n")) + "\n"
				}
				fmt.Fprint(v.out, line)
			}
		}
		for _, l := range f.Left {
			fmt.Fprintf(v.out, "%s: %s %s\n", f.Name, st.yellow("not rewritten:"), l)
		}
	}
	switch {
	case changed == 0:
		fmt.Fprintf(v.out, "Nothing to rewrite for Talos %s.\n", r.To)
	case r.Write:
		fmt.Fprintf(v.out, "Rewrote %d patch(es) for Talos %s; each old file is kept as FILE.orig.\n", changed, r.To)
	default:
		fmt.Fprintf(v.out, "%d patch(es) to rewrite for Talos %s: nothing written; run again with --write to write them (each old file kept as FILE.orig).\n", changed, r.To)
	}
}
