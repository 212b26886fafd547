package graph

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

func build(n int, edges ...[2]int) *Graph {
	g := New(n)
	for _, e := range edges {
		g.AddEdge(e[0], e[1])
	}
	return g
}

func TestOrderIsStableAndRespectsEdges(t *testing.T) {
	// 0 waits for 2; 1 waits for nothing; 2 waits for 3; 3 for nothing.
	g := build(4, [2]int{0, 2}, [2]int{2, 3})
	if got, want := g.Order(), []int{3, 2, 0, 1}; !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
	// No edges: declaration order.
	if got := New(3).Order(); !slices.Equal(got, []int{0, 1, 2}) {
		t.Errorf("order without edges %v", got)
	}
	// The same graph, the same order, every time.
	for range 20 {
		if got := g.Order(); !slices.Equal(got, []int{3, 2, 0, 1}) {
			t.Fatalf("order changed: %v", got)
		}
	}
	// A cycle does not lose a node.
	if got := build(2, [2]int{0, 1}, [2]int{1, 0}).Order(); !slices.Equal(got, []int{1, 0}) {
		t.Errorf("order with a cycle %v", got)
	}
}

func TestReverseOrderForRollback(t *testing.T) {
	// 1 and 2 wait for 0; 3 waits for 1.
	g := build(4, [2]int{1, 0}, [2]int{2, 0}, [2]int{3, 1})
	r := g.Reverse()
	if got := r.Edges(0); !slices.Equal(got, []int{1, 2}) {
		t.Errorf("reversed edges of 0: %v", got)
	}
	pos := map[int]int{}
	for i, v := range r.Order() {
		pos[v] = i
	}
	for a := range g.Len() {
		for _, b := range g.Edges(a) {
			if pos[a] > pos[b] {
				t.Errorf("rollback order undoes %d after %d, which waited for it", a, b)
			}
		}
	}
}

func TestCyclesWithTheirPath(t *testing.T) {
	// 0 -> 1 -> 2 -> 0 (a longer way 0 -> 3 -> 4 -> 1 too), 5 waits for
	// itself, 6 waits for 0 but is in no cycle.
	g := build(7,
		[2]int{0, 3}, [2]int{3, 4}, [2]int{4, 1}, [2]int{0, 1}, [2]int{1, 2}, [2]int{2, 0},
		[2]int{5, 5}, [2]int{6, 0})
	got := fmt.Sprint(g.Cycles())
	want := "[{[0 1 2 3 4] [0 1 2 0]} {[5] [5 5]}]"
	if got != want {
		t.Errorf("cycles %s, want %s", got, want)
	}
	if c := build(3, [2]int{0, 1}, [2]int{1, 2}).Cycles(); len(c) != 0 {
		t.Errorf("cycles in a chain: %v", c)
	}
}

func TestClosure(t *testing.T) {
	// 3 waits for 2, 2 for 1, 1 for 0; 4 for 0; 5 and 6 wait for each other.
	g := build(7, [2]int{3, 2}, [2]int{2, 1}, [2]int{1, 0}, [2]int{4, 0}, [2]int{5, 6}, [2]int{6, 5})
	c := g.Closure()
	for _, tc := range []struct {
		a    int
		want []int
	}{{0, nil}, {3, []int{0, 1, 2}}, {4, []int{0}}, {5, []int{5, 6}}} {
		if got := c.All(tc.a); !slices.Equal(got, tc.want) {
			t.Errorf("closure of %d: %v, want %v", tc.a, got, tc.want)
		}
	}
	if !c.Before(3, 0) || c.Before(0, 3) || c.Before(4, 1) || !c.Before(6, 6) || c.Before(3, 3) {
		t.Error("Before disagrees with All")
	}
}

// Thousands of phases in a chain (each after the one before): ordering,
// cycle search and the closure stay far from quadratic in time and do not
// recurse that deep.
func TestLongChainIsFast(t *testing.T) {
	const n = 5000
	g := New(n)
	for i := 1; i < n; i++ {
		g.AddEdge(i, i-1)
	}
	start := time.Now()
	order := g.Order()
	cycles := g.Cycles()
	c := g.Closure()
	if len(order) != n || order[0] != 0 || len(cycles) != 0 || !c.Before(n-1, 0) || c.Before(0, n-1) {
		t.Fatalf("chain: order from %d, %d cycles", order[0], len(cycles))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a chain of %d nodes took %s", n, d)
	}
}
