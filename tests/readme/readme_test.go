package readme

import (
	"bufio"
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// root is the repository, from this package's directory.
const root = "../.."

type block struct {
	line   int    // of the opening fence, 1-based
	text   string // the commands
	reason string // why it is not run; empty: it is run
}

var notRun = regexp.MustCompile(`^<!-- not run by tests: (.+\S) -->$`)

// shellBlocks returns README's ```sh blocks, with the reason a block is
// not run if the line before its fence gives one. A shell block under
// another name (bash, shell, console) is an error: it would escape both.
func shellBlocks(t *testing.T, readme string) []block {
	t.Helper()
	var blocks []block
	lines := strings.Split(readme, "\n")
	for i := 0; i < len(lines); i++ {
		fence := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(fence, "```") {
			continue
		}
		lang := strings.TrimPrefix(fence, "```")
		start := i
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
		}
		switch lang {
		case "bash", "shell", "console", "shell-session":
			t.Errorf("README.md:%d: a ```%s block: write ```sh, so that this test runs it (or marks why not)", start+1, lang)
		case "sh":
			b := block{line: start + 1, text: strings.Join(lines[start+1:min(i, len(lines))], "\n")}
			if start > 0 {
				if m := notRun.FindStringSubmatch(strings.TrimSpace(lines[start-1])); m != nil {
					b.reason = m[1]
				}
			}
			blocks = append(blocks, b)
		}
	}
	return blocks
}

// exportRepo copies what git tracks into a new directory: a fresh clone
// of the working tree, with nothing a walk-through left behind.
func exportRepo(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "migrate")
	cmd := exec.Command("git", "ls-files", "-z", "--cached")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files (this test needs a git checkout): %v", err)
	}
	for _, rel := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, rel)
		fi, err := os.Lstat(src)
		if os.IsNotExist(err) || (err == nil && !fi.Mode().IsRegular()) {
			continue // deleted but not committed yet, or a symlink
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, rel), b, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// processesMentioning returns the pids of processes whose command line
// contains s (a path unique to this test).
func processesMentioning(s string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(s)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestREADMECommands runs every ```sh block of README.md not marked as
// not run, in order, in one shell (a block may use what an earlier one
// started: the lab node's job), with `set -e`: the first command that
// fails fails the test, naming its block. The commands are run as
// written, except that /tmp/ becomes a directory of this test's own, so
// that a run never meets a reader's walk-through (the quick start's lab,
// whose default is in the runbook, is moved there with MIGRATE_VAR_lab,
// and the Makefile's lab node with LAB_DIR; make demo uses a temporary
// directory of its own).
func TestREADMECommands(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := shellBlocks(t, string(readme))
	tmp := t.TempDir()
	var script strings.Builder
	script.WriteString("set -euo pipefail\n")
	ran := 0
	for _, b := range blocks {
		if b.reason != "" {
			t.Logf("README.md:%d not run: %s", b.line, b.reason)
			continue
		}
		ran++
		fmt.Fprintf(&script, "echo '=== README.md:%d' >&2\n%s\n", b.line, strings.ReplaceAll(b.text, "/tmp/", tmp+"/"))
	}
	if ran == 0 {
		t.Fatal("README.md has no ```sh block to run")
	}

	src := exportRepo(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local", "MIGRATE_VAR_lab="+tmp+"/migrate-quickstart/lab",
		"LAB_DIR="+tmp+"/make-lab", "NO_COLOR=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	// A command that hangs until the deadline says where: the process
	// tree, then SIGQUIT, which makes every Go program of the group
	// (migrate, the provider programs) print its goroutines, then SIGKILL.
	var hung atomic.Value // the process tree at the deadline
	cmd.Cancel = func() error {
		tree, _ := exec.Command("ps", "-e", "--forest", "-o", "pid,stat,etime,args").Output()
		hung.Store(string(tree))
		syscall.Kill(-cmd.Process.Pid, syscall.SIGQUIT)
		time.AfterFunc(3*time.Second, func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
		return nil
	}
	cmd.WaitDelay = 10 * time.Second
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err = cmd.Run()
	// Whatever the outcome, nothing the commands started may stay behind.
	defer func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		for _, pid := range processesMentioning(tmp) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}()
	if tree, ok := hung.Load().(string); ok {
		t.Logf("the commands hung until the deadline; the processes then:\n%s", tree)
	}
	if err != nil {
		t.Fatalf("the README's commands failed (%v); the last === line names the block:\n%s", err, out.String())
	}
	t.Logf("README.md: %d blocks ran in %s", ran, time.Since(start).Round(time.Second))

	// `kill %1` must stop the lab node itself, not only a parent of it
	// (as with `go run ... &`, whose child kept serving).
	deadline := time.Now().Add(30 * time.Second)
	for len(processesMentioning(tmp+"/talos-lab")) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after the README's `kill %%1` the lab node still runs (pids %v):\n%s", processesMentioning(tmp+"/talos-lab"), out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The walk-throughs wrote where the README says, nothing into the tree.
	for _, p := range []string{"migrate-quickstart/state/state.json", "talos-lab/state/state.json", "talos-lab/rendered/kubeconfig", "migrate-groups/out/moved.txt"} {
		if _, err := os.Stat(filepath.Join(tmp, p)); err != nil {
			t.Errorf("a walk-through did not write %s: %v", p, err)
		}
	}
	for _, junk := range []string{"examples/quickstart/.migrate", "examples/quickstart/lab", "examples/groups/.migrate", "examples/talos-platform/.migrate", "examples/talos-platform/rendered"} {
		if _, err := os.Stat(filepath.Join(src, junk)); !os.IsNotExist(err) {
			t.Errorf("the README's commands left %s in the source tree", junk)
		}
	}
	svg, err := os.ReadFile(filepath.Join(tmp, "migrate-quickstart/graph.svg"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		XMLName xml.Name `xml:"http://www.w3.org/2000/svg svg"`
	}
	if err := xml.Unmarshal(svg, &doc); err != nil {
		t.Errorf("graph.svg: %v", err)
	}
}

// TestREADMEMarksWhatItDoesNotRun: a block left out says why.
func TestREADMEMarksWhatItDoesNotRun(t *testing.T) {
	t.Parallel()
	blocks := shellBlocks(t, "intro\n\n<!-- not run by tests: needs root -->\n```sh\nmake test\n```\n\n```sh\nbin/migrate version\n```\n\n<!-- not run by tests: -->\n```sh\nx\n```\n")
	if len(blocks) != 3 || blocks[0].reason != "needs root" || blocks[1].reason != "" || blocks[1].text != "bin/migrate version" {
		t.Fatalf("blocks: %+v", blocks)
	}
	if blocks[2].reason != "" {
		t.Errorf("a mark without a reason was taken: %+v", blocks[2])
	}
}

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestLinksResolve: every relative link of README.md and docs/*.md leads
// to a file or directory inside the repository (a clone has nothing
// beside it).
func TestLinksResolve(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	files = append(files, filepath.Join(root, "README.md"))
	top, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	links := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for n := 1; sc.Scan(); n++ {
			for _, m := range mdLink.FindAllStringSubmatch(sc.Text(), -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") || strings.HasPrefix(target, "#") {
					continue
				}
				target, _, _ = strings.Cut(target, "#")
				links++
				abs, err := filepath.Abs(filepath.Join(filepath.Dir(f), target))
				if err != nil {
					t.Fatal(err)
				}
				rel, _ := filepath.Rel(top, f)
				if abs != top && !strings.HasPrefix(abs, top+string(filepath.Separator)) {
					t.Errorf("%s:%d: %s leads out of the repository", rel, n, m[1])
				} else if _, err := os.Stat(abs); err != nil {
					t.Errorf("%s:%d: %s does not exist", rel, n, m[1])
				}
			}
		}
	}
	if links == 0 {
		t.Error("no relative link found: is the pattern broken?")
	}
	if b, _ := os.ReadFile(filepath.Join(root, "README.md")); bytes.Contains(b, []byte("../shared")) {
		t.Error("README.md refers to ../shared, which a clone does not have")
	}
}
