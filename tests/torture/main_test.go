package torture

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/tests/buildmigrate"
)

// bin holds migrate, its provider programs and migrate-lab, built once.
var bin string

func migrateBin() string { return filepath.Join(bin, "migrate") }

var longFlag = flag.Bool("torture.long", false, "the long mode (as TORTURE_LONG=1): more kills, more passes")

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run()) // the test skips itself: nothing to build
	}
	dir, err := os.MkdirTemp("", "migrate-torture-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = dir
	// The Talos and Helm providers and the lab run as programs found beside
	// migrate, which is built as make build does: with their sums.
	if err := buildmigrate.Build(dir, "cmd/migrate-lab"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// config is how hard the test tortures.
type config struct {
	mode   string
	seed   uint64
	rounds []round
	// deadline bounds one attempt of a command: a run that hangs fails
	// the test with what it printed instead of waiting for its timeouts.
	deadline time.Duration
	// stall is how long a kubernetes_ready may wait on a cluster whose
	// etcd does not answer before the test calls it a cluster without etcd.
	stall time.Duration
}

// round is a world of its own (a new lab, a new copy of the runbook)
// and the passes made in it. A bug that stops a pass stops its round
// only: the next round still shows what it shows.
type round struct {
	name   string
	passes []passPlan
}

// passPlan is how many times each command of a pass is killed: each
// phase's run (from the phase from on; the ones before run plain), and
// the rollback. A pass of 0 kills is the plain run a person makes after a
// rollback, each command once: an uninterrupted command plans from the
// start, before any VM of the pass exists, which a resumed one never does.
type passPlan struct {
	phase, rollback int
	from            string
}

// kills is how many times the run of a phase is killed.
func (p passPlan) kills(phase string) int {
	if p.from == "" {
		return p.phase
	}
	for _, ph := range phasesInOrder {
		switch ph.name {
		case p.from:
			return p.phase
		case phase:
			return 0
		}
	}
	return 0
}

// loadConfig: CI mode by default, TORTURE_LONG=1 (or -torture.long) the
// long one; TORTURE_SEED=N the seed.
//
// CI: two rounds. "apps tortured, plain, tortured": first the move with
// kills from data-apps on (the apps, the Matrix move, the cleanup and
// the rollback are tortured even while a bug stops the resumes of a
// Talos install), then a plain pass on the world that rollback left
// (each command once, as migrate-lab demo runs them), then a tortured pass
// on the world of two rollbacks. "tortured twice": a tortured pass on a
// new world, then another on the world its tortured rollback left. A
// tortured phase's run is killed 2 times (one per 5 steps in the longer
// phases: 3 in the rehearsal and in ingress-matrix), the rollback 3
// times. Long: 6 kills a phase, 8 in the rollback, and a third round of
// five passes.
func loadConfig(t *testing.T) config {
	c := config{mode: "CI", seed: uint64(time.Now().UnixNano()), deadline: 5 * time.Minute, stall: time.Minute}
	kills, plain := passPlan{phase: 2, rollback: 3}, passPlan{}
	if *longFlag || os.Getenv("TORTURE_LONG") == "1" {
		c.mode, c.deadline, kills = "long", 10*time.Minute, passPlan{phase: 6, rollback: 8}
	}
	apps := kills
	apps.from = "data-apps"
	c.rounds = []round{
		{"apps tortured, plain, tortured", []passPlan{apps, plain, kills}},
		{"tortured twice", []passPlan{kills, kills}},
	}
	if c.mode == "long" {
		c.rounds = append(c.rounds, round{"tortured, tortured, plain, tortured, tortured", []passPlan{kills, kills, plain, kills, kills}})
	}
	if s := os.Getenv("TORTURE_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("TORTURE_SEED: %v", err)
		}
		c.seed = seed
	}
	return c
}

func (c config) String() string {
	var rounds []string
	for i, r := range c.rounds {
		var plans []string
		for _, p := range r.passes {
			plan := fmt.Sprintf("%d/%d", p.phase, p.rollback)
			if p.from != "" {
				plan += " from " + p.from
			}
			plans = append(plans, plan)
		}
		rounds = append(rounds, fmt.Sprintf("round %d %q (kills a phase/in the rollback, per pass: %s)", i+1, r.name, strings.Join(plans, ", ")))
	}
	return fmt.Sprintf("%s mode: %s; %s an attempt at most", c.mode, strings.Join(rounds, "; "), c.deadline)
}

// copyTracked copies the files of src that git tracks to dst, keeping
// their modes: a walk-through's .migrate/ or rendered/ stay out.
func copyTracked(t *testing.T, src, dst string) {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z", "--cached")
	cmd.Dir = src
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files in %s (the test needs a git checkout): %v", src, err)
	}
	for _, rel := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if rel == "" {
			continue
		}
		fi, err := os.Stat(filepath.Join(src, rel))
		if os.IsNotExist(err) {
			continue // deleted but not yet committed
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(src, rel))
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
}
