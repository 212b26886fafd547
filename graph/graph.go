package graph

import (
	"math/bits"
	"slices"
)

// Graph is a directed graph over the nodes 0..Len()-1.
type Graph struct {
	edges [][]int // edges[a]: the nodes a waits for, in the order added
}

// New returns a graph of n nodes and no edges.
func New(n int) *Graph { return &Graph{edges: make([][]int, n)} }

// Len is the number of nodes.
func (g *Graph) Len() int { return len(g.edges) }

// AddEdge says that from waits for to. Edges are kept in the order added,
// duplicates included (they change no result).
func (g *Graph) AddEdge(from, to int) { g.edges[from] = append(g.edges[from], to) }

// Edges lists the nodes from waits for, in the order added. The caller
// must not change the slice.
func (g *Graph) Edges(from int) []int { return g.edges[from] }

// Reverse returns the graph with every edge turned around: what rollback
// walks, a node then waiting for those that waited for it.
func (g *Graph) Reverse() *Graph {
	r := New(len(g.edges))
	for a, list := range g.edges {
		for _, b := range list {
			r.edges[b] = append(r.edges[b], a)
		}
	}
	return r
}

// Order lists every node once, each after the nodes it waits for, taking
// nodes in declaration order and, before each, what it waits for in the
// order its edges were added (a depth-first, post-order walk). An edge
// that closes a cycle is ignored: report Cycles first where they matter.
func (g *Graph) Order() []int {
	n := len(g.edges)
	out := make([]int, 0, n)
	seen := make([]bool, n)
	// An explicit stack: a chain of thousands of phases must not recurse
	// that deep.
	type frame struct{ node, next int }
	var stack []frame
	for root := range n {
		if seen[root] {
			continue
		}
		seen[root] = true
		stack = append(stack, frame{node: root})
		for len(stack) > 0 {
			top := &stack[len(stack)-1]
			if top.next < len(g.edges[top.node]) {
				m := g.edges[top.node][top.next]
				top.next++
				if !seen[m] {
					seen[m] = true
					stack = append(stack, frame{node: m})
				}
				continue
			}
			out = append(out, top.node)
			stack = stack[:len(stack)-1]
		}
	}
	return out
}

// Cycle is one strongly connected component that contains a cycle.
type Cycle struct {
	// Members in index order.
	Members []int
	// Path goes from the first member along edges back to it: [a, b, a]
	// reads "a waits for b, which waits for a"; [a, a] is a node waiting
	// for itself. It is a shortest such path.
	Path []int
}

// Cycles returns one Cycle per strongly connected component that has
// one, ordered by their first member.
func (g *Graph) Cycles() []Cycle {
	var out []Cycle
	comp, sccs := g.components()
	for _, scc := range sccs {
		start := scc[0]
		if len(scc) == 1 {
			if slices.Contains(g.edges[start], start) {
				out = append(out, Cycle{Members: scc, Path: []int{start, start}})
			}
			continue
		}
		out = append(out, Cycle{Members: scc, Path: g.shortestCycle(start, comp)})
	}
	slices.SortFunc(out, func(a, b Cycle) int { return a.Members[0] - b.Members[0] })
	return out
}

// shortestCycle finds, breadth first within start's component, the
// shortest path from start back to it.
func (g *Graph) shortestCycle(start int, comp []int) []int {
	prev := map[int]int{}
	queue := []int{start}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		for _, m := range g.edges[v] {
			if comp[m] != comp[start] {
				continue
			}
			if _, ok := prev[m]; ok {
				continue
			}
			prev[m] = v
			if m == start {
				queue = nil
				break
			}
			queue = append(queue, m)
		}
	}
	path := []int{start}
	for v := prev[start]; v != start; v = prev[v] {
		path = append(path, v)
	}
	path = append(path, start)
	slices.Reverse(path)
	return path
}

// components returns the strongly connected components (Tarjan's
// algorithm, without recursion), each sorted, every component after the
// components it waits for, and each node's component number.
func (g *Graph) components() (comp []int, sccs [][]int) {
	n := len(g.edges)
	index := make([]int, n)
	low := make([]int, n)
	onStack := make([]bool, n)
	comp = make([]int, n)
	for i := range index {
		index[i] = -1
	}
	var stack []int
	type frame struct{ node, next int }
	var calls []frame
	next := 0
	for root := range n {
		if index[root] >= 0 {
			continue
		}
		calls = append(calls, frame{node: root})
		index[root], low[root] = next, next
		next++
		stack = append(stack, root)
		onStack[root] = true
		for len(calls) > 0 {
			top := &calls[len(calls)-1]
			v := top.node
			if top.next < len(g.edges[v]) {
				w := g.edges[v][top.next]
				top.next++
				switch {
				case index[w] < 0:
					index[w], low[w] = next, next
					next++
					stack = append(stack, w)
					onStack[w] = true
					calls = append(calls, frame{node: w})
				case onStack[w]:
					low[v] = min(low[v], index[w])
				}
				continue
			}
			calls = calls[:len(calls)-1]
			if len(calls) > 0 {
				u := calls[len(calls)-1].node
				low[u] = min(low[u], low[v])
			}
			if low[v] == index[v] {
				var scc []int
				for {
					w := stack[len(stack)-1]
					stack = stack[:len(stack)-1]
					onStack[w] = false
					comp[w] = len(sccs)
					scc = append(scc, w)
					if w == v {
						break
					}
				}
				slices.Sort(scc)
				sccs = append(sccs, scc)
			}
		}
	}
	return comp, sccs
}

// Closure answers "must b come before a?" for every pair, in time linear
// in the edges times n/64 to build and constant to ask: what loading
// thousands of phases needs, where a list of earlier phases per phase
// costs n² map entries. It holds n²/8 bytes (1 MiB for 3,000 phases).
type Closure struct {
	comp  []int
	reach [][]uint64 // reach[c]: the nodes component c waits for, transitively
}

// Closure computes what each node waits for, directly or not. A node in a
// cycle waits for every member of its cycle, itself included.
func (g *Graph) Closure() *Closure {
	comp, sccs := g.components()
	words := (len(g.edges) + 63) / 64
	c := &Closure{comp: comp, reach: make([][]uint64, len(sccs))}
	// Components come out of Tarjan's algorithm after every component
	// they wait for, so each one's successors are complete when reached.
	for ci, scc := range sccs {
		r := make([]uint64, words)
		for _, v := range scc {
			for _, w := range g.edges[v] {
				r[w/64] |= 1 << (w % 64)
				if cw := comp[w]; cw != ci {
					for i, x := range c.reach[cw] {
						r[i] |= x
					}
				}
			}
		}
		c.reach[ci] = r
	}
	return c
}

// Before reports whether a waits for b, directly or through others.
func (c *Closure) Before(a, b int) bool {
	return c.reach[c.comp[a]][b/64]&(1<<(b%64)) != 0
}

// All lists, in index order, every node a waits for.
func (c *Closure) All(a int) []int {
	var out []int
	for i, x := range c.reach[c.comp[a]] {
		for x != 0 {
			t := bits.TrailingZeros64(x)
			out = append(out, i*64+t)
			x &^= 1 << t
		}
	}
	return out
}
