// Package ideal is the yardstick of the engine benchmark: it runs the same
// commands as a generated runbook, level by level, at most w at once, with
// no state, no plan and no bookkeeping at all.
package ideal

import (
	"context"
	"errors"
	"os/exec"
	"sync"
)

// Run runs argv(name) for every name, one level after the other; within a
// level at most w commands run at once. It returns the first error.
func Run(ctx context.Context, levels [][]string, w int, argv func(name string) []string) error {
	sem := make(chan struct{}, max(w, 1))
	for _, lvl := range levels {
		var wg sync.WaitGroup
		errs := make([]error, len(lvl))
		for i, name := range lvl {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				a := argv(name)
				errs[i] = exec.CommandContext(ctx, a[0], a[1:]...).Run()
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	return nil
}
