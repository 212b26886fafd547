package views

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/homelab-migrate/migrate/phases"
)

// Graph formats.
const (
	GraphDot     = "dot"
	GraphMermaid = "mermaid"
	GraphSVG     = "svg"
)

// graphModel is a runbook as nodes and edges, sorted so that the same
// runbook always gives the same text.
type graphModel struct {
	phases []graphPhase
	edges  [][2]string // step -> step that waits for it
	// labels says why an edge is there when it is not the step's own
	// reference: "provider talos.node" for a step the provider's block uses.
	labels map[[2]string]string
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
	g := graphModel{labels: map[[2]string]string{}}
	providerDeps := map[string][]phases.Address{}
	for _, pc := range rb.Providers {
		providerDeps[pc.Key()] = pc.DependsOn
	}
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
				e := [2]string{d.String(), s.Addr.String()}
				g.edges = append(g.edges, e)
				if slices.Contains(providerDeps[s.Provider], d) {
					g.labels[e] = "provider " + s.Provider
				}
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

// Graph writes the runbook's phases, steps and edges in format (dot,
// mermaid, or svg: a picture laid out here, needing no Graphviz).
func (v *View) Graph(rb *phases.Runbook, format string) error {
	bw := bufio.NewWriter(v.out)
	g := buildGraph(rb)
	switch format {
	case GraphDot, "":
		writeDot(bw, g)
	case GraphMermaid:
		writeMermaid(bw, g)
	case GraphSVG:
		writeSVG(bw, g)
	default:
		return fmt.Errorf("unknown graph format %q: use %s, %s or %s", format, GraphDot, GraphMermaid, GraphSVG)
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
		if l := g.labels[e]; l != "" {
			fmt.Fprintf(w, "  %s -> %s [label = %s, style = bold];\n", q(e[0]), q(e[1]), q(l))
			continue
		}
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
		switch l := g.labels[e]; {
		case !ok1 || !ok2:
		case l != "":
			fmt.Fprintf(w, "  %s ==>|%s| %s\n", from, label(l), to)
		default:
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

// SVG layout: phases are rows top to bottom, in declaration order, so a
// migration of many phases stays as wide as its widest phase (a picture
// for a README); in a phase, a step's column is its dependency depth (1 +
// the deepest step of the same phase it waits for), so edges inside a
// phase point right and edges between phases point down.
const (
	svgBoxH   = 28 // a step's box
	svgCharW  = 7  // the width of a character of the 12px monospace font
	svgGapX   = 36 // between columns of a phase
	svgGapY   = 12 // between boxes of a column
	svgPad    = 16 // inside a phase's frame
	svgHeader = 26 // a phase's title
	svgPhaseY = 40 // between phases
)

type svgBox struct{ x, y, w int }

// svgFrame is a phase's frame: its top and height.
type svgFrame struct{ y, h int }

// svgLayout is where writeSVG draws everything.
type svgLayout struct {
	inPhase map[string]string // address -> phase
	boxes   map[string]svgBox
	frames  map[string]svgFrame
	// width and height of the picture; frameW of every frame, as wide
	// as the widest phase.
	width, height, frameW int
}

func writeSVG(w io.Writer, g graphModel) {
	l := layoutSVG(g)
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="monospace" font-size="12">`+"\n", l.width, l.height, l.width, l.height)
	fmt.Fprintln(w, `  <defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" markerHeight="8" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#444"/></marker></defs>`)
	fmt.Fprintf(w, `  <rect width="%d" height="%d" fill="white"/>`+"\n", l.width, l.height)
	for _, ph := range g.phases {
		f := l.frames[ph.name]
		fmt.Fprintf(w, `  <g class="phase" data-phase="%s"><title>%s</title>`+"\n", svgEsc(ph.name), svgEsc("phase "+ph.name))
		fmt.Fprintf(w, `    <rect x="%d" y="%d" width="%d" height="%d" rx="6" fill="#f4f6fa" stroke="#8894a8"/>`+"\n", svgPad, f.y, l.frameW, f.h)
		fmt.Fprintf(w, `    <text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", 2*svgPad, f.y+18, svgEsc("phase "+ph.name))
		fmt.Fprintln(w, "  </g>")
	}
	for _, e := range g.edges {
		l.writeEdge(w, e, g.labels[e])
	}
	for _, e := range g.order {
		from, ok1 := l.frames[e[0]]
		to, ok2 := l.frames[e[1]]
		if !ok1 || !ok2 {
			continue
		}
		x := 4 * svgPad
		fmt.Fprintf(w, `  <g class="phase-order" data-from="%s" data-to="%s"><title>%s</title><path d="M %d %d L %d %d" fill="none" stroke="#8894a8" stroke-dasharray="5 4" marker-end="url(#arrow)"/></g>`+"\n",
			svgEsc(e[0]), svgEsc(e[1]), svgEsc("phase "+e[1]+" runs after phase "+e[0]), x, from.y+from.h, x, to.y)
	}
	// Boxes last, over the edges: a line that passes a box goes behind it.
	for _, ph := range g.phases {
		for _, n := range ph.nodes {
			writeSVGNode(w, n, l.boxes[n.id])
		}
	}
	fmt.Fprintln(w, "</svg>")
}

// layoutSVG places each phase's steps in columns by their depth in the
// phase (a step right of those it waits for), and the phases one below
// the other.
func layoutSVG(g graphModel) svgLayout {
	l := svgLayout{inPhase: map[string]string{}, boxes: map[string]svgBox{}, frames: map[string]svgFrame{}}
	for _, ph := range g.phases {
		for _, n := range ph.nodes {
			l.inPhase[n.id] = ph.name
		}
	}
	depthOf := stepDepths(g, l.inPhase)
	y, width := svgPad, 0
	for _, ph := range g.phases {
		var cols [][]graphNode
		for _, n := range ph.nodes {
			d := depthOf(n.id)
			for len(cols) <= d {
				cols = append(cols, nil)
			}
			cols[d] = append(cols[d], n)
		}
		title := "phase " + ph.name
		cx, h := 2*svgPad, 0
		for _, col := range cols {
			cw := 0
			for _, n := range col {
				cw = max(cw, len([]rune(n.label))*svgCharW+20)
			}
			for i, n := range col {
				l.boxes[n.id] = svgBox{x: cx, y: y + svgHeader + i*(svgBoxH+svgGapY), w: cw}
			}
			h = max(h, len(col)*(svgBoxH+svgGapY)-svgGapY)
			cx += cw + svgGapX
		}
		// A phase without steps: cx-svgGapX+svgPad is less than the title's width.
		width = max(width, cx-svgGapX+svgPad, svgPad+len([]rune(title))*svgCharW+2*svgPad)
		l.frames[ph.name] = svgFrame{y: y, h: svgHeader + h + svgPad}
		y += svgHeader + h + svgPad + svgPhaseY
	}
	l.height = y - svgPhaseY + svgPad
	if len(g.phases) == 0 {
		l.height = 2 * svgPad
	}
	l.frameW = width - svgPad
	l.width = width + svgPad
	return l
}

// stepDepths returns the depth of a step in its phase: 0 for one that
// waits for no step of its phase, else one more than the deepest it waits
// for.
func stepDepths(g graphModel, inPhase map[string]string) func(id string) int {
	deps := map[string][]string{}
	for _, e := range g.edges {
		deps[e[1]] = append(deps[e[1]], e[0])
	}
	depth := map[string]int{}
	var depthOf func(id string, seen map[string]bool) int
	depthOf = func(id string, seen map[string]bool) int {
		if d, ok := depth[id]; ok {
			return d
		}
		if seen[id] { // a cycle: the loader refuses those, but never loop
			return 0
		}
		seen[id] = true
		d := 0
		for _, dep := range deps[id] {
			if inPhase[dep] == inPhase[id] {
				d = max(d, depthOf(dep, seen)+1)
			}
		}
		depth[id] = d
		return d
	}
	return func(id string) int { return depthOf(id, map[string]bool{}) }
}

// writeEdge draws the edge e: right, from one box to the next, within a
// phase; down, from the bottom of one box to the top of the other, from
// one phase to another. A label says why the edge is there (the
// provider's block uses the step).
func (l svgLayout) writeEdge(w io.Writer, e [2]string, label string) {
	from, ok1 := l.boxes[e[0]]
	to, ok2 := l.boxes[e[1]]
	if !ok1 || !ok2 {
		return
	}
	x1, y1, x2, y2 := from.x+from.w, from.y+svgBoxH/2, to.x, to.y+svgBoxH/2
	c1x, c1y, c2x, c2y := (x1+x2)/2, y1, (x1+x2)/2, y2
	if l.inPhase[e[0]] != l.inPhase[e[1]] {
		x1, y1, x2, y2 = from.x+from.w/2, from.y+svgBoxH, to.x+to.w/2, to.y
		c1x, c1y, c2x, c2y = x1, (y1+y2)/2, x2, (y1+y2)/2
	}
	mid := (x1 + x2) / 2
	if label != "" {
		// The step waits for what its provider's block uses.
		fmt.Fprintf(w, `  <g class="edge provider" data-from="%s" data-to="%s" data-label="%s"><title>%s</title><path d="M %d %d C %d %d, %d %d, %d %d" fill="none" stroke="#2a5db0" stroke-width="2" marker-end="url(#arrow)"/><text x="%d" y="%d" text-anchor="middle" font-size="10" fill="#2a5db0">%s</text></g>`+"\n",
			svgEsc(e[0]), svgEsc(e[1]), svgEsc(label), svgEsc(e[0]+" -> "+e[1]+" ("+label+")"), x1, y1, c1x, c1y, c2x, c2y, x2, y2, mid, (y1+y2)/2-4, svgEsc(label))
		return
	}
	fmt.Fprintf(w, `  <g class="edge" data-from="%s" data-to="%s"><title>%s</title><path d="M %d %d C %d %d, %d %d, %d %d" fill="none" stroke="#444" marker-end="url(#arrow)"/></g>`+"\n",
		svgEsc(e[0]), svgEsc(e[1]), svgEsc(e[0]+" -> "+e[1]), x1, y1, c1x, c1y, c2x, c2y, x2, y2)
}

// writeSVGNode draws a step's box, or a check's hexagon (as in the dot
// output), at b.
func writeSVGNode(w io.Writer, n graphNode, b svgBox) {
	fmt.Fprintf(w, `  <g class="step" data-address="%s"><title>%s</title>`, svgEsc(n.id), svgEsc(n.label))
	if n.check {
		x0, x1, y0, ym, y1 := b.x, b.x+b.w, b.y, b.y+svgBoxH/2, b.y+svgBoxH
		fmt.Fprintf(w, `<polygon points="%d,%d %d,%d %d,%d %d,%d %d,%d %d,%d" fill="#fff8e6" stroke="#a07a20"/>`,
			x0, ym, x0+8, y0, x1-8, y0, x1, ym, x1-8, y1, x0+8, y1)
	} else {
		fmt.Fprintf(w, `<rect x="%d" y="%d" width="%d" height="%d" rx="3" fill="white" stroke="#333"/>`, b.x, b.y, b.w, svgBoxH)
	}
	fmt.Fprintf(w, `<text x="%d" y="%d" text-anchor="middle">%s</text></g>`+"\n", b.x+b.w/2, b.y+svgBoxH/2+4, svgEsc(n.label))
}

// svgEsc escapes s for XML text and attributes.
func svgEsc(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s)) //nolint:errcheck // a strings.Builder does not fail
	return b.String()
}
