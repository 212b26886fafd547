package main

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReport: before anything ran, report says so and fails; after a run
// that fails and one that succeeds, the html page has both sessions (how
// each ended) and a bar for every attempt of the steps, the failed one
// and the one that then did it; the page is written 0644; the default is
// an svg on stdout.
func TestReport(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": `
phase "A" {
  step "exec" "one" { command = ["true"] }
  step "exec" "flaky" { command = ["sh", "-c", "test -f ok"] }
}
phase "B" {
  step "exec" "b" { command = ["true"] }
}
`})
	r := run(t, dir, 1, "report")
	if !strings.Contains(r.stderr, "nothing has run yet") {
		t.Errorf("report before any run: %s", r)
	}
	run(t, dir, 1, "run", "--all", "--auto-approve")
	if err := os.WriteFile(filepath.Join(dir, "ok"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, dir, 0, "run", "--all", "--auto-approve")

	out := filepath.Join(dir, "report.html")
	r = run(t, dir, 0, "report", "--format", "html", "--output", out)
	if !strings.Contains(r.stderr, "Wrote "+out) {
		t.Errorf("report --output: %s", r)
	}
	fi, err := os.Stat(out)
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("the report: %v, mode %v, want 0644", err, fi.Mode())
	}
	page, _ := os.ReadFile(out)
	bars, sessions := readReport(t, page)
	// The steps of a phase run in parallel: in any order.
	want := []string{"exec.b done", "exec.flaky done", "exec.flaky failed", "exec.one done"}
	slices.Sort(bars)
	if strings.Join(bars, ", ") != strings.Join(want, ", ") {
		t.Errorf("bars %q, want %q", bars, want)
	}
	if len(sessions) != 2 || !strings.HasPrefix(sessions[0], "run ") || !strings.Contains(sessions[0], "phase A did not complete") ||
		!strings.HasPrefix(sessions[1], "run ") || !strings.HasSuffix(sessions[1], " ok") {
		t.Errorf("sessions %q", sessions)
	}

	r = run(t, dir, 0, "report")
	if !strings.HasPrefix(r.stdout, "<svg") || !strings.HasSuffix(r.stdout, "</svg>\n") {
		t.Errorf("report: %s", r)
	}
	run(t, dir, 1, "report", "--format", "png")
}

// waitLog waits until the only run log of the runbook in dir holds every
// text in order, with a generous deadline.
func waitLog(t *testing.T, dir string, texts ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		logs, _ := filepath.Glob(filepath.Join(dir, ".migrate", "logs", "*-run.log"))
		if len(logs) == 1 {
			b, _ := os.ReadFile(logs[0])
			rest, ok := string(b), true
			for _, x := range texts {
				_, rest, ok = strings.Cut(rest, x)
				if !ok {
					break
				}
			}
			if ok {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log does not have %q after 30s: %v", texts, logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readReport reads the report's page: its bars ("ADDRESS OUTCOME", as
// drawn) and its table of sessions (each row's cells joined by spaces).
func readReport(t *testing.T, page []byte) (bars, sessions []string) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(page))
	var table string
	var row []string
	var cell *strings.Builder
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return bars, sessions
		}
		if err != nil {
			t.Fatalf("the page is not well-formed: %v\n%s", err, page)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			at := map[string]string{}
			for _, a := range el.Attr {
				at[a.Name.Local] = a.Value
			}
			switch el.Name.Local {
			case "g":
				if at["class"] == "bar" {
					bars = append(bars, at["data-address"]+" "+at["data-outcome"])
				}
			case "table":
				table = at["class"]
			case "tr":
				row = nil
			case "td":
				cell = &strings.Builder{}
			}
		case xml.CharData:
			if cell != nil {
				cell.Write(el)
			}
		case xml.EndElement:
			switch el.Name.Local {
			case "td":
				row = append(row, cell.String())
				cell = nil
			case "tr":
				if table == "sessions" && row != nil {
					sessions = append(sessions, strings.Join(row, " "))
				}
			}
		}
	}
}

// TestReportKilledAndResumed: a run killed (SIGKILL) during a long step,
// then run again: the report draws the first run killed, its step cut
// off with it, and the second run resumed; before the kill, while it
// holds the lock, running. The killed run's log has the
// step's start although no event followed it (the log is flushed on a
// timer).
func TestReportKilledAndResumed(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": `
phase "A" {
  step "exec" "long" { command = ["sh", "-c", "touch started; while [ ! -e go ]; do sleep 0.05; done"] }
}
`})
	cmd, out, errb := start(t, dir, "run", "--all", "--auto-approve")
	waitFile(t, filepath.Join(dir, "started"), out, errb)
	waitLog(t, dir, "step_started phase=A exec.long")
	// While it runs, holding the lock, it is drawn running, not killed.
	r := run(t, dir, 0, "report", "--format", "html")
	bars, sessions := readReport(t, []byte(r.stdout))
	if len(bars) != 1 || bars[0] != "exec.long running" || len(sessions) != 1 || !strings.HasSuffix(sessions[0], "still running") || strings.Contains(r.stdout, `class="kill"`) {
		t.Errorf("during the run: bars %q, sessions %q", bars, sessions)
	}
	// Killed once the log says it lived on after the step started.
	waitLog(t, dir, "step_started phase=A exec.long", " alive\n")
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, dir, 0, "run", "--all", "--auto-approve")

	r = run(t, dir, 0, "report", "--format", "html")
	bars, sessions = readReport(t, []byte(r.stdout))
	if len(bars) != 2 || bars[0] != "exec.long killed" || (bars[1] != "exec.long done" && bars[1] != "exec.long adopted") {
		t.Errorf("bars %q", bars)
	}
	// The killed attempt lasts until the run's last sign of life, seconds
	// after the step started.
	m := regexp.MustCompile(`<td><code>exec.long</code></td><td>[^<]*</td><td>([^<]*)</td><td>killed</td>`).FindStringSubmatch(r.stdout)
	if len(m) != 2 {
		t.Fatalf("no killed attempt of exec.long in the table:\n%s", r.stdout)
	}
	if d, err := time.ParseDuration(m[1]); err != nil || d < 2*time.Second {
		t.Errorf("the killed attempt lasts %q, not until the run's last alive line:\n%s", m, r.stdout)
	}
	if len(sessions) != 2 || !strings.Contains(sessions[0], "killed") || !strings.HasPrefix(sessions[1], "run (resumed) ") {
		t.Errorf("sessions %q", sessions)
	}
	for _, want := range []string{`class="kill"`, `data-killed="true"`, `data-resumed="true"`, ">resumed run<", ">✕ killed<"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the picture lacks %s", want)
		}
	}
}
