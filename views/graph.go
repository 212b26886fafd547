package views

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/homelab-migrate/migrate/phases"
)

// Graph formats.
const (
	GraphDot     = "dot"
	GraphMermaid = "mermaid"
)

// graphModel is a runbook as nodes and edges, sorted so that the same
// runbook always gives the same text.
type graphModel struct {
	phases []graphPhase
	edges  [][2]string // step -> step that waits for it
	order  [][2]string // phase -> phase that runs after it
}

type graphPhase struct {
	name  string
	nodes []graphNode
}

type graphNode struct {
	id    string // the address
	label string
	check bool
}

func buildGraph(rb *phases.Runbook) graphModel {
	var g graphModel
	for _, ph := range rb.Phases {
		gp := graphPhase{name: ph.Name}
		all := append(append([]*phases.Step(nil), ph.Steps...), ph.Checks...)
		for _, s := range all {
			n := graphNode{id: s.Addr.String(), label: s.Addr.String()}
			if s.IsCheck() {
				n.check = true
				n.label = fmt.Sprintf("check %s (%s)", s.Addr, s.When)
			}
			gp.nodes = append(gp.nodes, n)
			for _, d := range s.DependsOn {
				g.edges = append(g.edges, [2]string{d.String(), s.Addr.String()})
			}
		}
		sort.Slice(gp.nodes, func(i, j int) bool { return gp.nodes[i].id < gp.nodes[j].id })
		for _, a := range ph.After {
			g.order = append(g.order, [2]string{a, ph.Name})
		}
		g.phases = append(g.phases, gp)
	}
	less := func(l [][2]string) func(i, j int) bool {
		return func(i, j int) bool {
			if l[i][0] != l[j][0] {
				return l[i][0] < l[j][0]
			}
			return l[i][1] < l[j][1]
		}
	}
	sort.Slice(g.edges, less(g.edges))
	sort.Slice(g.order, less(g.order))
	return g
}

// Graph writes the runbook's phases, steps and edges in format (dot or
// mermaid).
func (v *View) Graph(rb *phases.Runbook, format string) error {
	bw := bufio.NewWriter(v.out)
	g := buildGraph(rb)
	switch format {
	case GraphDot, "":
		writeDot(bw, g)
	case GraphMermaid:
		writeMermaid(bw, g)
	default:
		return fmt.Errorf("unknown graph format %q: use %s or %s", format, GraphDot, GraphMermaid)
	}
	return bw.Flush()
}

func writeDot(w io.Writer, g graphModel) {
	q := strconv.Quote
	fmt.Fprintln(w, "digraph migrate {")
	fmt.Fprintln(w, "  compound = true;")
	fmt.Fprintln(w, "  rankdir = LR;")
	fmt.Fprintln(w, "  node [shape = box];")
	for _, ph := range g.phases {
		fmt.Fprintf(w, "\n  subgraph %s {\n", q("cluster_"+ph.name))
		fmt.Fprintf(w, "    label = %s;\n", q("phase "+ph.name))
		// An invisible anchor lets phase-order edges join clusters,
		// empty ones included.
		fmt.Fprintf(w, "    %s [shape = point, style = invis];\n", q("phase:"+ph.name))
		for _, n := range ph.nodes {
			if n.check {
				fmt.Fprintf(w, "    %s [label = %s, shape = hexagon];\n", q(n.id), q(n.label))
			} else {
				fmt.Fprintf(w, "    %s;\n", q(n.id))
			}
		}
		fmt.Fprintln(w, "  }")
	}
	if len(g.edges) > 0 {
		fmt.Fprintln(w)
	}
	for _, e := range g.edges {
		fmt.Fprintf(w, "  %s -> %s;\n", q(e[0]), q(e[1]))
	}
	if len(g.order) > 0 {
		fmt.Fprintln(w)
	}
	for _, e := range g.order {
		fmt.Fprintf(w, "  %s -> %s [ltail = %s, lhead = %s, style = dashed];\n",
			q("phase:"+e[0]), q("phase:"+e[1]), q("cluster_"+e[0]), q("cluster_"+e[1]))
	}
	fmt.Fprintln(w, "}")
}

func writeMermaid(w io.Writer, g graphModel) {
	ids := map[string]string{}
	phaseIDs := map[string]string{}
	n := 0
	for i, ph := range g.phases {
		phaseIDs[ph.name] = fmt.Sprintf("p%d", i)
		for _, x := range ph.nodes {
			ids[x.id] = fmt.Sprintf("n%d", n)
			n++
		}
	}
	label := func(s string) string { return `"` + strings.ReplaceAll(s, `"`, "#quot;") + `"` }
	fmt.Fprintln(w, "flowchart LR")
	for _, ph := range g.phases {
		fmt.Fprintf(w, "  subgraph %s[%s]\n", phaseIDs[ph.name], label("phase "+ph.name))
		for _, x := range ph.nodes {
			if x.check {
				fmt.Fprintf(w, "    %s{{%s}}\n", ids[x.id], label(x.label))
			} else {
				fmt.Fprintf(w, "    %s[%s]\n", ids[x.id], label(x.label))
			}
		}
		fmt.Fprintln(w, "  end")
	}
	for _, e := range g.edges {
		from, ok1 := ids[e[0]]
		to, ok2 := ids[e[1]]
		if ok1 && ok2 {
			fmt.Fprintf(w, "  %s --> %s\n", from, to)
		}
	}
	for _, e := range g.order {
		from, ok1 := phaseIDs[e[0]]
		to, ok2 := phaseIDs[e[1]]
		if ok1 && ok2 {
			fmt.Fprintf(w, "  %s -.-> %s\n", from, to)
		}
	}
}
