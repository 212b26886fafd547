// Command enginebench measures the engine against its goals (issue 2,
// "Speed and memory") and prints one table. The machines are shared and
// noisy, so the comparisons are made side by side in one run, interleaved,
// and reported as ratios. See bench/README.md.
//
//	go run ./bench/cmd/enginebench            (or: make bench)
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/homelab-migrate/migrate/bench/gen"
	"github.com/homelab-migrate/migrate/bench/ideal"
)

type config struct {
	steps, width, reps int
	waits, planSteps   int
	rssSteps           int
	feGroups, feKeys   int
	feReps             int
	only               string
	terraform          bool
	etcd               bool
	keep               bool
}

func main() {
	var c config
	flag.IntVar(&c.steps, "steps", 400, "exec steps in the overhead comparison")
	flag.IntVar(&c.width, "width", 10, "steps per level (and --parallelism)")
	flag.IntVar(&c.reps, "reps", 5, "repetitions of each side of the overhead comparison, interleaved")
	flag.IntVar(&c.waits, "waits", 10000, "wait 0s steps in the checkpoint run")
	flag.IntVar(&c.planSteps, "plan-steps", 5000, "exec steps in the timed plan")
	flag.IntVar(&c.rssSteps, "rss-steps", 10000, "exec steps in the plan whose peak RSS is measured")
	flag.IntVar(&c.feGroups, "foreach-groups", 100, "for_each comparison: steps with for_each (and groups of steps written out)")
	flag.IntVar(&c.feKeys, "foreach-keys", 100, "for_each comparison: keys of each for_each map (steps of each group written out)")
	flag.IntVar(&c.feReps, "foreach-reps", 3, "for_each comparison: plans and runs of each side, alternating")
	flag.StringVar(&c.only, "only", "", "run only these parts, comma-separated: overhead, checkpoints, plan, foreach (default all)")
	flag.BoolVar(&c.terraform, "terraform", true, "compare with terraform apply (skipped when terraform is not in PATH)")
	flag.BoolVar(&c.etcd, "etcd", true, "also run the DAG and the wait steps with the state in a three-member loopback etcd cluster")
	flag.BoolVar(&c.keep, "keep", false, "keep the temporary directory")
	flag.Parse()
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "enginebench:", err)
		os.Exit(1)
	}
}

// row is one line of the result table.
type row struct{ what, figure, goal, verdict string }

type bench struct {
	config
	tmp, bin string
	etcdc    *cluster // nil without -etcd
	rows     []row
	notes    []string
}

func run(c config) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "enginebench-")
	if err != nil {
		return err
	}
	if c.keep {
		fmt.Fprintln(os.Stderr, "keeping", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	b := &bench{config: c, tmp: tmp, bin: filepath.Join(tmp, "migrate")}
	fmt.Fprintf(os.Stderr, "building migrate into %s\n", b.bin)
	build := exec.Command("go", "build", "-o", b.bin, "./cmd/migrate")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("go build ./cmd/migrate: %w", err)
	}
	fmt.Fprintf(os.Stderr, "%s, %d CPUs, load average %s\n", runtime.Version(), runtime.NumCPU(), loadavg())
	parts := []struct {
		name string
		f    func() error
	}{{"overhead", b.overhead}, {"checkpoints", b.checkpoints}, {"plan", b.plan}, {"foreach", b.forEach}}
	var todo []func() error
	for _, p := range parts {
		if c.only == "" || slices.Contains(strings.Split(c.only, ","), p.name) {
			todo = append(todo, p.f)
		}
	}
	if len(todo) == 0 {
		return fmt.Errorf("-only %q names no part: overhead, checkpoints, plan, foreach", c.only)
	}
	// Only the overhead and checkpoint parts use etcd.
	if c.only != "" && !strings.Contains(c.only, "overhead") && !strings.Contains(c.only, "checkpoints") {
		c.etcd = false
	}
	if c.etcd {
		fmt.Fprintln(os.Stderr, "starting a three-member etcd cluster on loopback")
		if b.etcdc, err = startCluster(tmp, 3); err != nil {
			return err
		}
		defer b.etcdc.stop()
	}
	for _, f := range todo {
		if err := f(); err != nil {
			return err
		}
	}
	b.print(os.Stdout)
	return nil
}

// overhead: the exec DAG through migrate vs the ideal executor, then
// through terraform.
func (b *bench) overhead() error {
	levels := gen.Levels(b.steps, b.width)
	var idealT, migT, etcdT []time.Duration
	for rep := 0; rep < b.reps; rep++ {
		log := filepath.Join(b.tmp, fmt.Sprintf("ideal-%d.log", rep))
		fmt.Fprintf(os.Stderr, "overhead %d/%d: ideal executor\n", rep+1, b.reps)
		start := time.Now()
		if err := ideal.Run(context.Background(), levels, b.width, func(n string) []string { return gen.Argv(n, log) }); err != nil {
			return fmt.Errorf("ideal executor: %w", err)
		}
		idealT = append(idealT, time.Since(start))
		if err := checkLog(log, b.steps); err != nil {
			return err
		}

		wall, err := b.migrateExec(fmt.Sprintf("exec-%d", rep), fmt.Sprintf("overhead %d/%d: migrate run", rep+1, b.reps))
		if err != nil {
			return err
		}
		migT = append(migT, wall)

		if b.etcdc == nil {
			continue
		}
		wall, err = b.migrateExec(fmt.Sprintf("exec-etcd-%d", rep), fmt.Sprintf("overhead %d/%d: migrate run, state in etcd", rep+1, b.reps),
			"--backend", b.etcdc.url(fmt.Sprintf("bench/exec-%d", rep)))
		if err != nil {
			return err
		}
		etcdT = append(etcdT, wall)
	}
	mi, mm := median(idealT), median(migT)
	ratio := float64(mm) / float64(mi)
	b.add(row{fmt.Sprintf("ideal executor, %d exec steps in levels of %d (median of %d: %s)", b.steps, b.width, b.reps, durs(idealT)), secs(mi), "", ""})
	b.add(row{fmt.Sprintf("migrate run --all --parallelism %d (median of %d: %s)", b.width, b.reps, durs(migT)), secs(mm), "", ""})
	b.add(row{"  engine overhead: migrate / ideal (medians)", fmt.Sprintf("%.3f (%+.1f%%)", ratio, (ratio-1)*100), "<= 1.05", verdict(ratio <= 1.05)})
	best := float64(slices.Min(migT)) / float64(slices.Min(idealT))
	b.add(row{"  the same with the fastest of each (less noise)", fmt.Sprintf("%.3f (%+.1f%%)", best, (best-1)*100), "", ""})
	if len(etcdT) > 0 {
		me := median(etcdT)
		r := float64(me) / float64(mm)
		b.add(row{fmt.Sprintf("migrate run --all, state in etcd (3 loopback members; median of %d: %s)", b.reps, durs(etcdT)), secs(me), "", ""})
		b.add(row{"  etcd / local backend (medians)", fmt.Sprintf("%.2fx", r), "<= 1.5x", verdict(r <= 1.5)})
	}

	return b.terraformApply(mm)
}

// migrateExec writes the exec DAG into b.tmp/name and runs it with
// migrate (extra arguments added), saying what on stderr; it returns the
// wall time.
func (b *bench) migrateExec(name, what string, extra ...string) (time.Duration, error) {
	dir := filepath.Join(b.tmp, name)
	log := filepath.Join(dir, "steps.log")
	if err := gen.ExecLevels(dir, b.steps, b.width, log); err != nil {
		return 0, err
	}
	fmt.Fprintln(os.Stderr, what)
	args := append([]string{"run", "--all", "--auto-approve", "--parallelism", fmt.Sprint(b.width), "--runbook", dir}, extra...)
	res, err := b.migrate(args...)
	if err != nil {
		return 0, err
	}
	return res.wall, checkLog(log, b.steps)
}

// terraformApply runs the exec DAG through terraform, against mm, the
// median of migrate's runs.
func (b *bench) terraformApply(mm time.Duration) error {
	if !b.terraform {
		b.notes = append(b.notes, "terraform comparison skipped (-terraform=false)")
		return nil
	}
	tf, err := exec.LookPath("terraform")
	if err != nil {
		b.notes = append(b.notes, "terraform comparison skipped: no terraform in PATH")
		return nil
	}
	dir := filepath.Join(b.tmp, "terraform")
	log := filepath.Join(dir, "steps.log")
	if err := gen.Terraform(dir, b.steps, b.width, log); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "terraform init && terraform apply")
	env := append(os.Environ(), "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1", "TF_INPUT=0")
	start := time.Now()
	if _, err := runCmd(dir, env, tf, "init", "-input=false", "-no-color"); err != nil {
		return fmt.Errorf("terraform init: %w", err)
	}
	initT := time.Since(start)
	applyStart := time.Now()
	if _, err := runCmd(dir, env, tf, "apply", "-auto-approve", "-input=false", "-no-color", fmt.Sprintf("-parallelism=%d", b.width)); err != nil {
		return fmt.Errorf("terraform apply: %w", err)
	}
	applyT := time.Since(applyStart)
	if err := checkLog(log, b.steps); err != nil {
		return err
	}
	total := initT + applyT
	b.add(row{fmt.Sprintf("terraform init && terraform apply -parallelism=%d (init %s, apply %s)", b.width, secs(initT), secs(applyT)), secs(total), "", ""})
	b.add(row{"  terraform / migrate", fmt.Sprintf("%.1fx", float64(total)/float64(mm)), "far slower than migrate", verdict(total > 2*mm)})
	return nil
}

// checkpoints: many no-op steps, each durably checkpointed.
func (b *bench) checkpoints() error {
	dir := filepath.Join(b.tmp, "waits")
	if err := gen.Waits(dir, b.waits); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "checkpoints: %d wait steps\n", b.waits)
	res, err := b.migrate("run", "--all", "--auto-approve", "--runbook", dir)
	if err != nil {
		return err
	}
	b.add(row{fmt.Sprintf("migrate run --all, %d wait 0s steps in one phase", b.waits), secs(res.wall), "< 3s", verdict(res.wall < 3*time.Second)})
	if b.etcdc != nil {
		fmt.Fprintf(os.Stderr, "checkpoints: %d wait steps, state in etcd\n", b.waits)
		res, err := b.migrate("run", "--all", "--auto-approve", "--runbook", dir, "--backend", b.etcdc.url("bench/waits"))
		if err != nil {
			return err
		}
		b.add(row{"  the same, state in etcd (3 loopback members)", secs(res.wall), "< 10s", verdict(res.wall < 10*time.Second)})
	}

	show, err := b.migrate("state", "show", "--json", "--runbook", dir)
	if err != nil {
		return err
	}
	var doc struct {
		State struct {
			Steps map[string]struct {
				Status     string     `json:"status"`
				FinishedAt *time.Time `json:"finished_at"`
			} `json:"steps"`
		} `json:"state"`
	}
	if err := json.Unmarshal(show.stdout, &doc); err != nil {
		return fmt.Errorf("migrate state show --json: %w", err)
	}
	var fin []time.Time
	for addr, s := range doc.State.Steps {
		if s.Status != "done" || s.FinishedAt == nil {
			return fmt.Errorf("after the run, %s is %s", addr, s.Status)
		}
		fin = append(fin, *s.FinishedAt)
	}
	if len(fin) != b.waits {
		return fmt.Errorf("the state has %d steps, want %d", len(fin), b.waits)
	}
	slices.SortFunc(fin, func(a, b time.Time) int { return a.Compare(b) })
	k := min(1000, len(fin)/2)
	first := fin[k-1].Sub(fin[0]) / time.Duration(k-1)
	last := fin[len(fin)-1].Sub(fin[len(fin)-k]) / time.Duration(k-1)
	growth := float64(last) / float64(first)
	b.add(row{fmt.Sprintf("  time per step, first %d steps (state finished_at)", k), first.String(), "", ""})
	b.add(row{fmt.Sprintf("  time per step, last %d steps", k), last.String(), "", ""})
	b.add(row{"  last / first", fmt.Sprintf("%.2f", growth), "no growth (~1, < 1.5)", verdict(growth < 1.5)})
	b.add(row{fmt.Sprintf("peak RSS, migrate run of %d steps", b.waits), mib(res.maxrss), "< 150 MiB", verdict(res.maxrss < 150<<20)})
	b.add(row{"  of which anonymous (heap, stacks; without the executable's own pages)", mib(res.maxanon), "", ""})
	return nil
}

// plan: the time of a plan, and the memory of a large one.
func (b *bench) plan() error {
	dir := filepath.Join(b.tmp, "plan")
	if err := gen.ExecLevels(dir, b.planSteps, b.width, filepath.Join(dir, "steps.log")); err != nil {
		return err
	}
	var ts []time.Duration
	for i := 0; i < 3; i++ {
		fmt.Fprintf(os.Stderr, "plan %d/3: %d steps\n", i+1, b.planSteps)
		res, err := b.migrate("plan", "--runbook", dir)
		if err != nil {
			return err
		}
		ts = append(ts, res.wall)
	}
	m := median(ts)
	b.add(row{fmt.Sprintf("migrate plan, %d exec steps in levels of %d (median of 3: %s)", b.planSteps, b.width, durs(ts)), secs(m), "< 1s", verdict(m < time.Second)})

	dir = filepath.Join(b.tmp, "plan-rss")
	if err := gen.ExecLevels(dir, b.rssSteps, b.width, filepath.Join(dir, "steps.log")); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "plan: %d steps\n", b.rssSteps)
	res, err := b.migrate("plan", "--runbook", dir)
	if err != nil {
		return err
	}
	b.add(row{fmt.Sprintf("peak RSS, migrate plan of %d exec steps (took %s)", b.rssSteps, secs(res.wall)), mib(res.maxrss), "< 150 MiB", verdict(res.maxrss < 150<<20)})
	b.add(row{"  of which anonymous", mib(res.maxanon), "", ""})
	return nil
}

type result struct {
	wall   time.Duration
	maxrss int64 // bytes
	// maxanon is the peak of the process's anonymous memory (RssAnon,
	// sampled every 10 ms): its own heap and stacks, without the pages of
	// the executable that maxrss also counts.
	maxanon int64
	stdout  []byte
}

// migrate runs the built binary and measures it.
func (b *bench) migrate(args ...string) (result, error) {
	return runCmd("", nil, b.bin, append(args, "--no-color")...)
}

func runCmd(dir string, env []string, name string, args ...string) (result, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Start()
	var anon atomic.Int64
	if err == nil {
		done := make(chan struct{})
		go sampleAnon(cmd.Process.Pid, &anon, done)
		err = cmd.Wait()
		close(done)
	}
	res := result{wall: time.Since(start), stdout: out.Bytes(), maxanon: anon.Load()}
	if cmd.ProcessState == nil {
		return res, fmt.Errorf("%s: %w", filepath.Base(name), err)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		res.maxrss = ru.Maxrss << 10 // KiB on Linux
	}
	if err != nil {
		return res, fmt.Errorf("%s %s: %w\n%s%s", filepath.Base(name), strings.Join(args, " "), err, tail(out.Bytes()), tail(errb.Bytes()))
	}
	return res, nil
}

// sampleAnon records the peak RssAnon of pid until done is closed.
func sampleAnon(pid int, peak *atomic.Int64, done <-chan struct{}) {
	path := fmt.Sprintf("/proc/%d/status", pid)
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if b, err := os.ReadFile(path); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "RssAnon:"); ok {
					var kib int64
					fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kib)
					if kib<<10 > peak.Load() {
						peak.Store(kib << 10)
					}
				}
			}
		}
		select {
		case <-done:
			return
		case <-t.C:
		}
	}
}

func checkLog(path string, want int) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if n := bytes.Count(data, []byte("\n")); n != want {
		return fmt.Errorf("%s has %d lines, want %d: not every step ran once", path, n, want)
	}
	return nil
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("run enginebench from inside the migrate module")
	}
	return filepath.Dir(gomod), nil
}

func (b *bench) add(r row) { b.rows = append(b.rows, r) }

func (b *bench) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MEASUREMENT\tFIGURE\tGOAL\t")
	for _, r := range b.rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.what, r.figure, r.goal, r.verdict)
	}
	tw.Flush()
	for _, n := range b.notes {
		fmt.Fprintln(w, "note:", n)
	}
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func secs(d time.Duration) string { return fmt.Sprintf("%.3fs", d.Seconds()) }

func durs(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmt.Sprintf("%.2f", d.Seconds())
	}
	return strings.Join(parts, " ")
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func loadavg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func tail(b []byte) string {
	const n = 2000
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
