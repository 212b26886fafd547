package engine

import (
	"context"

	"github.com/homelab-migrate/migrate/phases"
)

// graph is the steps of one phase with their edges. Edges point from a step
// to the steps it depends on; dependencies outside the node set (earlier
// phases) are already satisfied and ignored.
type graph struct {
	nodes []*phases.Step
	index map[phases.Address]int
	deps  [][]int // deps[i]: the nodes i waits for
}

func newGraph(steps []*phases.Step) *graph {
	g := &graph{nodes: steps, index: make(map[phases.Address]int, len(steps)), deps: make([][]int, len(steps))}
	for i, s := range steps {
		g.index[s.Addr] = i
	}
	for i, s := range steps {
		for _, d := range s.DependsOn {
			if j, ok := g.index[d]; ok {
				g.deps[i] = append(g.deps[i], j)
			}
		}
	}
	return g
}

// reversed returns the graph with every edge turned around: for rollback,
// a step waits for the steps that depended on it.
func (g *graph) reversed() *graph {
	r := &graph{nodes: g.nodes, index: g.index, deps: make([][]int, len(g.nodes))}
	for i, ds := range g.deps {
		for _, j := range ds {
			r.deps[j] = append(r.deps[j], i)
		}
	}
	return r
}

// walkResult tells, per node, whether it ran and how it ended.
type walkResult int

const (
	notStarted walkResult = iota // stopped before it could start
	succeeded
	failed
	skipped // a dependency failed
)

// walk visits every node after the nodes it depends on, at most
// parallelism at once, in declaration order where there is a choice. A
// node whose visit fails makes its dependents (transitively) skipped,
// while independent nodes go on. Once stop is done no new node starts;
// the running ones finish.
func (g *graph) walk(stop context.Context, parallelism int, visit func(*phases.Step) bool) []walkResult {
	n := len(g.nodes)
	res := make([]walkResult, n)
	waiting := make([]int, n)
	dependents := make([][]int, n)
	for i, ds := range g.deps {
		waiting[i] = len(ds)
		for _, j := range ds {
			dependents[j] = append(dependents[j], i)
		}
	}
	var ready []int
	for i := 0; i < n; i++ {
		if waiting[i] == 0 {
			ready = append(ready, i)
		}
	}
	type done struct {
		i  int
		ok bool
	}
	results := make(chan done)
	running := 0
	var skip func(i int)
	skip = func(i int) {
		for _, d := range dependents[i] {
			if res[d] == notStarted {
				res[d] = skipped
				skip(d)
			}
		}
	}
	for {
		for len(ready) > 0 && running < parallelism && stop.Err() == nil {
			i := ready[0]
			ready = ready[1:]
			if res[i] == skipped {
				continue
			}
			running++
			go func() { results <- done{i, visit(g.nodes[i])} }()
		}
		if running == 0 {
			return res
		}
		d := <-results
		running--
		if !d.ok {
			res[d.i] = failed
			skip(d.i)
			continue
		}
		res[d.i] = succeeded
		for _, k := range dependents[d.i] {
			waiting[k]--
			if waiting[k] == 0 && res[k] == notStarted {
				ready = insertSorted(ready, k)
			}
		}
	}
}

// insertSorted keeps the ready list in declaration order.
func insertSorted(list []int, k int) []int {
	i := len(list)
	for i > 0 && list[i-1] > k {
		i--
	}
	list = append(list, 0)
	copy(list[i+1:], list[i:])
	list[i] = k
	return list
}
