package engine

import (
	"context"
	"slices"

	"github.com/homelab-migrate/migrate/graph"
	"github.com/homelab-migrate/migrate/phases"
)

// stepGraph is the steps of one phase with their edges, a graph.Graph
// over their indexes. An edge goes from a step to a step it depends on;
// dependencies outside the phase (earlier phases) are already satisfied
// and left out.
type stepGraph struct {
	nodes []*phases.Step
	g     *graph.Graph
}

func newStepGraph(steps []*phases.Step) *stepGraph {
	index := make(map[phases.Address]int, len(steps))
	for i, s := range steps {
		index[s.Addr] = i
	}
	g := graph.New(len(steps))
	for i, s := range steps {
		for _, d := range s.DependsOn {
			if j, ok := index[d]; ok {
				g.AddEdge(i, j)
			}
		}
	}
	return &stepGraph{nodes: steps, g: g}
}

// reversed returns the graph with every edge turned around: for rollback,
// a step waits for the steps that depended on it.
func (sg *stepGraph) reversed() *stepGraph { return &stepGraph{nodes: sg.nodes, g: sg.g.Reverse()} }

// order lists the steps so that each comes after its dependencies,
// keeping declaration order otherwise.
func (sg *stepGraph) order() []*phases.Step {
	out := make([]*phases.Step, 0, len(sg.nodes))
	for _, i := range sg.g.Order() {
		out = append(out, sg.nodes[i])
	}
	return out
}

// walkResult tells, per node, whether it ran and how it ended.
type walkResult int

const (
	notStarted walkResult = iota // stopped before it could start
	succeeded
	failed
	skipped // a dependency failed
	stopped // ended not done by the stop: neither done nor failed
)

// walk visits every node after the nodes it depends on, at most
// parallelism at once, in declaration order where there is a choice. A
// node whose visit fails makes its dependents (transitively) skipped,
// while independent nodes go on. Once stop is done no new node starts;
// the running ones finish, or end stopped, whose dependents stay not
// started.
func (sg *stepGraph) walk(stop context.Context, parallelism int, visit func(*phases.Step) walkResult) []walkResult {
	n := len(sg.nodes)
	res := make([]walkResult, n)
	waiting := make([]int, n)
	dependents := sg.g.Reverse()
	for i := range n {
		waiting[i] = len(sg.g.Edges(i))
	}
	var ready []int
	for i := 0; i < n; i++ {
		if waiting[i] == 0 {
			ready = append(ready, i)
		}
	}
	type done struct {
		i   int
		res walkResult
	}
	results := make(chan done)
	running := 0
	var skip func(i int)
	skip = func(i int) {
		for _, d := range dependents.Edges(i) {
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
			go func() { results <- done{i, visit(sg.nodes[i])} }()
		}
		if running == 0 {
			return res
		}
		d := <-results
		running--
		switch d.res {
		case failed:
			res[d.i] = failed
			skip(d.i)
			continue
		case stopped:
			res[d.i] = stopped
			continue
		}
		res[d.i] = succeeded
		for _, k := range dependents.Edges(d.i) {
			waiting[k]--
			if waiting[k] == 0 && res[k] == notStarted {
				i, _ := slices.BinarySearch(ready, k) // declaration order
				ready = slices.Insert(ready, i, k)
			}
		}
	}
}
