package torture

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"testing"
	"time"
)

// phaseRun is a phase of examples/homelab and the flags its run takes.
type phaseRun struct {
	name  string
	flags []string
}

// phasesInOrder are examples/homelab's phases, in order.
var phasesInOrder = []phaseRun{
	{"rehearsal", nil},
	{"platform", nil},
	{"data-apps", nil},
	{"host-services", nil},
	{"ingress-matrix", []string{"--approve", "approval.dns"}},
	{"cleanup", nil},
}

// nextPhase is the phase after name, nil after the last (or the rollback).
func nextPhase(name string) *phaseRun {
	for i, ph := range phasesInOrder[:len(phasesInOrder)-1] {
		if ph.name == name {
			return &phasesInOrder[i+1]
		}
	}
	return nil
}

// TestTorture: the homelab against the lab, every phase and the rollback
// killed and resumed, pass after pass, in rounds of their own; see the
// package's doc.
func TestTorture(t *testing.T) {
	if testing.Short() {
		t.Skip("the torture test takes minutes: not with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("the torture test needs root, as migrate-lab demo does: Synapse's restore Job chowns its data to uid 991, and as another user the lab maps only that user's uid")
	}
	cfg := loadConfig(t)
	t.Logf("seed %d (rerun with TORTURE_SEED=%d); %s", cfg.seed, cfg.seed, cfg)
	start := time.Now()
	sum := &summary{cfg: cfg, tally: newTally()}
	defer func() { t.Log("\n" + sum.String(time.Since(start))) }()
	for i, r := range cfg.rounds {
		t.Run(fmt.Sprintf("round-%d", i+1), func(t *testing.T) {
			w := newWorld(t, cfg, i+1, sum.tally)
			for j, kills := range r.passes {
				if !w.runPass(t, j+1, kills, sum) {
					return
				}
			}
		})
	}
}

// runPass runs every phase, then the rollback, each killed as kills says;
// false when a command could not be completed.
func (w *world) runPass(t *testing.T, pass int, kills passPlan, sum *summary) bool {
	w.beginPass(t, pass)
	for _, ph := range phasesInOrder {
		s := sum.add(w.round, pass, ph.name)
		args := append([]string{"run", "--phase", ph.name, "--auto-approve"}, ph.flags...)
		if !w.runCommand(t, s, kills.kills(ph.name), args...) {
			return false
		}
	}
	s := sum.add(w.round, pass, "rollback")
	return w.runCommand(t, s, kills.rollback, "rollback", "--auto-approve")
}

// seeded is the random source of one command of one pass of a round.
func seeded(seed uint64, round, pass int, command string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte{byte(round), byte(pass)})
	h.Write([]byte(command))
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}
