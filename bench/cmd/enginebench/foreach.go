package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/homelab-migrate/migrate/bench/gen"
)

// forEach: the same groups*keys cheap exec steps (true) written out, one
// block per step (gen.ExecFlat), and written as groups steps with
// for_each over a map of keys (gen.ExecForEach); migrate plan and migrate
// run of each, alternating, which goes first swapped every repetition,
// each run on a fresh runbook directory (and so a fresh state).
func (b *bench) forEach() error {
	n := b.feGroups * b.feKeys
	gens := [2]func(string, int, int) error{gen.ExecFlat, gen.ExecForEach}
	sides := [2]string{"flat", "foreach"}
	var planT, runT [2][]time.Duration
	planDir := [2]string{}
	for i := range sides {
		planDir[i] = filepath.Join(b.tmp, "plan-"+sides[i])
		if err := gens[i](planDir[i], b.feGroups, b.feKeys); err != nil {
			return err
		}
	}
	for rep := 0; rep < b.feReps; rep++ {
		for j := 0; j < 2; j++ {
			i := (rep + j) % 2
			fmt.Fprintf(os.Stderr, "for_each %d/%d: migrate plan, %d steps %s\n", rep+1, b.feReps, n, sides[i])
			res, err := b.migrate("plan", "--runbook", planDir[i])
			if err != nil {
				return err
			}
			planT[i] = append(planT[i], res.wall)
		}
	}
	for rep := 0; rep < b.feReps; rep++ {
		for j := 0; j < 2; j++ {
			i := (rep + j) % 2
			dir := filepath.Join(b.tmp, fmt.Sprintf("run-%s-%d", sides[i], rep))
			if err := gens[i](dir, b.feGroups, b.feKeys); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "for_each %d/%d: migrate run, %d steps %s\n", rep+1, b.feReps, n, sides[i])
			res, err := b.migrate("run", "--all", "--auto-approve", "--parallelism", fmt.Sprint(b.width), "--runbook", dir)
			if err != nil {
				return err
			}
			runT[i] = append(runT[i], res.wall)
			if rep == 0 {
				if err := b.allDone(dir, n); err != nil {
					return err
				}
			}
		}
	}
	ratio := func(ts [2][]time.Duration) float64 { return float64(median(ts[1])) / float64(median(ts[0])) }
	best := func(ts [2][]time.Duration) string {
		r := float64(slices.Min(ts[1])) / float64(slices.Min(ts[0]))
		return fmt.Sprintf("%.3f (%+.1f%%)", r, (r-1)*100)
	}
	pr, rr := ratio(planT), ratio(runT)
	b.add(row{fmt.Sprintf("migrate plan, %d exec steps written out (median of %d: %s)", n, b.feReps, durs(planT[0])), secs(median(planT[0])), "", ""})
	b.add(row{fmt.Sprintf("  the same as %d steps with for_each over %d keys (median of %d: %s)", b.feGroups, b.feKeys, b.feReps, durs(planT[1])), secs(median(planT[1])), "", ""})
	b.add(row{"  for_each / written out (medians)", fmt.Sprintf("%.3f (%+.1f%%)", pr, (pr-1)*100), "<= 1.10", verdict(pr <= 1.10)})
	b.add(row{"  the same with the fastest of each (less noise)", best(planT), "", ""})
	b.add(row{fmt.Sprintf("migrate run --all --parallelism %d, %d exec true steps written out (median of %d: %s)", b.width, n, b.feReps, durs(runT[0])), secs(median(runT[0])), "", ""})
	b.add(row{fmt.Sprintf("  the same as %d steps with for_each over %d keys (median of %d: %s)", b.feGroups, b.feKeys, b.feReps, durs(runT[1])), secs(median(runT[1])), "", ""})
	b.add(row{"  for_each / written out (medians)", fmt.Sprintf("%.3f (%+.1f%%)", rr, (rr-1)*100), "<= 1.10", verdict(rr <= 1.10)})
	b.add(row{"  the same with the fastest of each (less noise)", best(runT), "", ""})
	return nil
}

// allDone checks that the state of the runbook in dir has n steps, all
// done.
func (b *bench) allDone(dir string, n int) error {
	show, err := b.migrate("state", "show", "--json", "--runbook", dir)
	if err != nil {
		return err
	}
	var doc struct {
		State struct {
			Steps map[string]struct {
				Status string `json:"status"`
			} `json:"steps"`
		} `json:"state"`
	}
	if err := json.Unmarshal(show.stdout, &doc); err != nil {
		return fmt.Errorf("migrate state show --json: %w", err)
	}
	if len(doc.State.Steps) != n {
		return fmt.Errorf("after the run of %s, the state has %d steps, want %d", dir, len(doc.State.Steps), n)
	}
	for addr, s := range doc.State.Steps {
		if s.Status != "done" {
			return fmt.Errorf("after the run of %s, %s is %s", dir, addr, s.Status)
		}
	}
	return nil
}
