package engine

import (
	"strings"

	"github.com/homelab-migrate/migrate/phases"
)

// A file a step reads may be one a step before it writes: incus_file
// pulls Synapse's signing key, age-encrypted, and kubernetes_secret reads
// it. When a step it depends on (at any depth) runs in this plan, or may
// (a stopped run was applying it; it is read again after the steps before
// it), what such a file will hold is known only after that step, like its
// outputs: an age file is encrypted anew, under another nonce, each time.
// The plan then holds the hash of the step's attributes alone, which run
// compares before it applies the step (a value known at plan that turns
// out otherwise is still refused); its files are hashed as they are then.
// A step none of whose dependencies runs keeps its files in the compared
// hash: a file edited by hand after the plan was made is refused (and a
// saved plan's contract compares every file before the first step runs).

// filesAfterPrefix marks a planned input hash of attributes alone.
const filesAfterPrefix = "files-after:"

// plannedHash is the input hash the plan holds for s, which run compares
// before it applies s.
func (e *Engine) plannedHash(s *phases.Step, in inputs, out *outputs) string {
	if in.hash == "" || len(out.changesBefore(e.dependencies(s))) == 0 {
		return in.hash
	}
	return filesAfterPrefix + in.attrs
}

// asPlanned reports whether in are the inputs the plan held (plannedHash);
// a plan that could not know them holds none, and any will do.
func (in inputs) asPlanned(planned string) bool {
	if rest, ok := strings.CutPrefix(planned, filesAfterPrefix); ok {
		return in.attrs != "" && rest == in.attrs
	}
	return planned == "" || planned == in.hash
}

// filesRewritten reports whether a step the plan took as done holds files
// known only after steps before it (plannedHash): if they changed since
// its record, it is planned again just before it is applied.
func filesRewritten(sp *StepPlan) bool {
	return sp != nil && strings.HasPrefix(sp.InputHash, filesAfterPrefix)
}

// dependencies lists the steps s depends on, at any depth.
func (e *Engine) dependencies(s *phases.Step) []phases.Address {
	seen := map[phases.Address]bool{}
	var out []phases.Address
	var walk func(list []phases.Address)
	walk = func(list []phases.Address) {
		for _, d := range list {
			if seen[d] {
				continue
			}
			seen[d] = true
			out = append(out, d)
			if ds := e.steps[d]; ds != nil {
				walk(ds.DependsOn)
			}
		}
	}
	walk(s.DependsOn)
	return out
}
