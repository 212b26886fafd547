package engine

import (
	"slices"
	"strings"

	"github.com/homelab-migrate/migrate/phases"
)

// A file a step reads may be one a step before it writes (incus_file pulls
// Synapse's signing key, age-encrypted anew each time, and
// kubernetes_secret reads it). When a step it depends on runs in this
// plan, or may, such files are known only after it, like outputs: the plan
// holds the hash of the attributes alone and run hashes the files then.
// Otherwise a file edited by hand after the plan is refused.

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
	out := slices.Clone(s.DependsOn)
	for i := 0; i < len(out); i++ {
		if ds := e.steps[out[i]]; ds != nil {
			for _, d := range ds.DependsOn {
				if !slices.Contains(out, d) {
					out = append(out, d)
				}
			}
		}
	}
	return out
}
