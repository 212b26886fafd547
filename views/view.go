package views

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"

	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/secret"
)

// Options say where a View writes and how.
type Options struct {
	Stdout, Stderr io.Writer
	// Color enables styles on Stdout, ErrColor on Stderr; the caller
	// decides (a terminal, and no --no-color).
	Color, ErrColor bool
	// Width of the terminal, for wrapping diagnostics; 0 means 78.
	Width int
	// Interactive says Stdout is a terminal, so a run may redraw a live
	// progress view.
	Interactive bool
}

// View is the common base of every command's output.
type View struct {
	out, err    io.Writer
	interactive bool
	width       int
	errColor    bool
	st, est     styles
	files       map[string][]byte
	lines       map[string][]int // line starts of files, built as needed
	scrub       func(string) string
}

// New makes a View.
func New(o Options) *View {
	if o.Width <= 0 {
		o.Width = 78
	}
	return &View{
		out:         o.Stdout,
		err:         o.Stderr,
		interactive: o.Interactive,
		width:       o.Width,
		errColor:    o.ErrColor,
		st:          newStyles(o.Stdout, o.Color),
		est:         newStyles(o.Stderr, o.ErrColor),
	}
}

// Stdout is where results go.
func (v *View) Stdout() io.Writer { return v.out }

// Stderr is where diagnostics, errors and notes go.
func (v *View) Stderr() io.Writer { return v.err }

// SetFiles gives the runbook files' bytes by name (runbooks.Loader.Files),
// so that diagnostics can show the source lines they point at.
func (v *View) SetFiles(files map[string][]byte) { v.files, v.lines = files, nil }

// Error prints an error that ends a command.
func (v *View) Error(err error) {
	if err == nil {
		return
	}
	msg := secret.Visible(v.scrubText(strings.TrimSpace(err.Error())))
	fmt.Fprintf(v.err, "%s %s\n", v.est.errLabel("Error:"), msg)
}

// Note prints a line for the person at the terminal on stderr.
func (v *View) Note(format string, args ...any) {
	fmt.Fprintf(v.err, format+"\n", args...)
}

// Warn prints a warning on stderr.
func (v *View) Warn(format string, args ...any) {
	fmt.Fprintf(v.err, "%s %s\n", v.est.warn("Warning:"), fmt.Sprintf(format, args...))
}

// styles are the paints a view uses; without color they change nothing.
// They are only ever applied to single lines.
type styles struct {
	bold, dim, green, yellow, red, magenta, cyan func(string) string
	errLabel, warn                               func(string) string
	color                                        bool
}

func newStyles(w io.Writer, color bool) styles {
	if !color || w == nil {
		id := func(s string) string { return s }
		return styles{id, id, id, id, id, id, id, id, id, false}
	}
	r := lipgloss.NewRenderer(w)
	mk := func(s lipgloss.Style) func(string) string {
		return func(x string) string {
			if x == "" {
				return x
			}
			return s.Render(x)
		}
	}
	base := r.NewStyle().Inline(true)
	return styles{
		bold:     mk(base.Bold(true)),
		dim:      mk(base.Faint(true)),
		green:    mk(base.Foreground(lipgloss.Color("2"))),
		yellow:   mk(base.Foreground(lipgloss.Color("3"))),
		red:      mk(base.Foreground(lipgloss.Color("1"))),
		magenta:  mk(base.Foreground(lipgloss.Color("5"))),
		cyan:     mk(base.Foreground(lipgloss.Color("6"))),
		errLabel: mk(base.Bold(true).Foreground(lipgloss.Color("1"))),
		warn:     mk(base.Bold(true).Foreground(lipgloss.Color("3"))),
		color:    true,
	}
}

// fmtDuration rounds a duration for people: milliseconds under a second,
// tenths of a second under a minute, seconds beyond.
func fmtDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// indent prefixes every line of s.
func indent(s, prefix string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if l == "" {
			lines[i] = strings.TrimRight(prefix, " ")
			continue
		}
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n") + "\n"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

// Valid confirms that a runbook loaded without errors.
func (v *View) Valid(phaseCount, stepCount int) {
	fmt.Fprintf(v.out, "%s %s, %s.\n", v.st.green("The runbook is valid:"),
		plural(phaseCount, "phase", "phases"), plural(stepCount, "step", "steps"))
}

// Nothing says a run or rollback has nothing to do.
func (v *View) Nothing(what string) {
	fmt.Fprintln(v.out, what)
}

// Version prints the version of migrate.
func (v *View) Version(version, goVersion, platform string) {
	fmt.Fprintf(v.out, "migrate %s (%s %s)\n", version, goVersion, platform)
}

// ProviderProgram says which program a plugin provider runs, or why it
// is refused.
func (v *View) ProviderProgram(name string, p providers.Program, err error) {
	if err != nil {
		fmt.Fprintf(v.out, "  provider %s: not usable: %v\n", name, err)
		return
	}
	fmt.Fprintf(v.out, "  provider %s: %s\n", name, programLine(p))
}

// UnverifiedProgram warns, on stderr, that a program runs whose sum this
// migrate could not check (a build without sums).
func (v *View) UnverifiedProgram(p providers.Program) {
	if !p.Verified {
		v.Warn("running %s", programLine(p))
	}
}

// programLine names a provider program: its path, the start of its
// sha256, and whether that is the sum migrate was built with.
func programLine(p providers.Program) string {
	if p.Verified {
		return fmt.Sprintf("%s (sha256 %.12s, the one this migrate was built with)", p.Path, p.SHA256)
	}
	return fmt.Sprintf("%s (sha256 %.12s, NOT VERIFIED: this migrate was built without the sums of its programs; build it with make build)", p.Path, p.SHA256)
}

// Confirm writes the question that only "yes" answers, as terraform asks
// it, on w (the terminal: stdout, or stderr when stdout carries JSON). Run
// and rollback confirmations and approval steps all ask this way.
func Confirm(w io.Writer, question string) {
	fmt.Fprintf(w, "\n%s\n  Only 'yes' will be accepted to approve.\n\n  Enter a value: ", question)
}
