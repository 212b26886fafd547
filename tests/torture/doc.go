// Package torture is the torture test of issue 17: examples/homelab
// against the lab home server (migrate-lab), its migrate killed with
// SIGKILL at seeded moments in every phase and in the rollback, and
// resumed each time with the same command. A pass is every phase in
// order, then the rollback; the passes after the first run on the world
// a rollback left, where the records of the world before it are.
//
// What it promises, checked on the world (the lab's Incus host, its
// Talos VMs and their etcd, the lab's events log, the data share), not
// only on the state, after every kill and resume and at the end:
//
//   - every phase completes, and so does the rollback: each command is
//     run again, killed again or not, until it exits 0, each attempt
//     within a deadline. An attempt that fails on its own, or hangs, is
//     reported with what it printed; one that failed is run again 2 s,
//     then 4 s later (does it resume?), and its round stops at the third
//     failure or at a hang;
//   - the state is always readable (migrate status --json and migrate
//     state show --json parse);
//   - every once-only effect happened once per pass, counted from the
//     lab's events log (lab/home, events.jsonl): Synapse stopped in the
//     old matrix VM, Jellyfin and Frigate in the old services VM (and
//     started again by the rollback) once, or once more per kill that
//     found the step running; each one's export run once, and Synapse's
//     configuration rewritten once; each
//     Job's pod run once (the rehearsal's data test, data-apps' probe,
//     the Synapse restore); each Talos VM's etcd bootstrapped once; and
//     the export pulled onto the data share once (the restore's result
//     is not overwritten by a second pull);
//   - no throwaway VM is left: once the rehearsal is complete, the VM
//     `rehearsal` is gone; after the rollback no Talos VM is left and the
//     three old VMs run, Synapse, Jellyfin and Frigate active;
//   - no cluster without etcd: a Talos VM whose kubeconfig was fetched
//     in the pass was bootstrapped in the pass (each pass makes its VMs
//     anew); a bootstrap recorded done in the pass has a healthy etcd on
//     its VM while the VM runs; a complete platform has its node
//     bootstrapped once with etcd healthy; and no kubernetes_ready waits
//     a minute for a cluster whose etcd does not answer (the test stops
//     it rather than let it wait its 10 minutes);
//   - no refusal that changed anything: at every kill, migrate is first
//     frozen (SIGSTOP) with its lock held and the same command started
//     beside it must be refused, leaving state.json and journal.jsonl
//     byte for byte as they were; and after a phase's first kill, the
//     next phase run out of order must be refused, leaving the state
//     (migrate status --json) and the lab's world (its events) as they
//     were;
//   - no provider program outlives its killed migrate.
//
// Kill points are seeded: for each command, kill i of n targets a step
// of the i-th part of the steps left to run (or to revert), its start or
// its end, plus 1 ms to 1.5 s (as many short delays as long ones: the
// lab's steps are quick); the first kill of a command is, one time in
// three, a plain delay after the start instead, to catch the plan and
// the first steps in flight.
// Anchored to steps rather than to times, a seed gives the same kill
// points on a slow machine as on a fast one. The seed is logged;
// TORTURE_SEED=N runs it again. At the end the test logs a summary: per
// command the kills, the resumes, where each kill landed; per invariant
// how many times it was checked and failed. On a failure the runbook,
// the state, every attempt's output and the lab's files stay on disk,
// the test says where.
//
// The test runs in rounds, each in a world of its own (a new lab, a new
// copy of the runbook), so that a bug which stops one round does not hide
// what the next one finds. CI mode (the default: go test ./tests/torture/,
// about 4 minutes on 2 cores) has two. "apps tortured, plain, tortured":
// the move with kills from data-apps on (so that the apps, the Matrix
// move, the cleanup and the rollback are tortured even while a bug stops
// the resumes of a Talos install), then a plain pass on the world its
// rollback left, each command once as migrate-lab demo runs them (an
// uninterrupted command plans before any VM of the pass exists, which a
// resumed one never does), then a tortured pass. "tortured twice": a
// tortured pass, then another on the world its rollback left. A tortured
// phase's run is killed 2 times (one per 5 steps in the longer phases: 3
// in the rehearsal and in ingress-matrix), the rollback 3 times. The long
// mode (TORTURE_LONG=1, or go test -args -torture.long) kills 6 times a
// phase and 8 in the rollback, and adds a round of five passes; give go
// test a -timeout to match (60m).
//
// The test needs root, as migrate-lab demo does (Synapse's restore Job
// chowns its data to uid 991), and is skipped with -short.
package torture
