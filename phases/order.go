package phases

import (
	"fmt"
	"slices"
	"strings"

	"github.com/homelab-migrate/migrate/graph"
)

// Order is a runbook's phases in the order they run, and which run
// strictly before which.
type Order struct {
	List    []*Phase       // in run order
	decl    []*Phase       // in declaration order: the nodes of closure
	index   map[string]int // name -> declaration index
	pos     []int          // declaration index -> place in List
	closure *graph.Closure
}

// OrderPhases sorts phases so that each comes after those it names in
// After, keeping declaration order where After leaves a choice.
func OrderPhases(list []*Phase) (*Order, error) {
	po := &Order{decl: list, index: make(map[string]int, len(list)), pos: make([]int, len(list))}
	for i, p := range list {
		po.index[p.Name] = i
	}
	g := graph.New(len(list))
	for i, p := range list {
		for _, a := range p.After {
			j, ok := po.index[a]
			if !ok {
				return nil, fmt.Errorf("phase %q runs after unknown phase %q", p.Name, a)
			}
			g.AddEdge(i, j)
		}
	}
	if cycles := g.Cycles(); len(cycles) > 0 {
		var path []string
		for _, i := range cycles[0].Path {
			path = append(path, list[i].Name)
		}
		return nil, fmt.Errorf("phases wait for each other: %s", strings.Join(path, " -> "))
	}
	for k, i := range g.Order() {
		po.List = append(po.List, list[i])
		po.pos[i] = k
	}
	po.closure = g.Closure()
	return po, nil
}

// Before returns, in run order, every phase that must be complete
// before p runs.
func (po *Order) Before(p *Phase) []*Phase {
	before := po.closure.All(po.index[p.Name])
	slices.SortFunc(before, func(a, b int) int { return po.pos[a] - po.pos[b] })
	out := make([]*Phase, len(before))
	for k, i := range before {
		out[k] = po.decl[i]
	}
	return out
}
