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
	nodes []graphNode // the steps written in the phase
	// groups are the group call instances the phase calls, by prefix
	// (group.CALL, group.CALL["KEY"]), each drawn as a box of its own
	// inside the phase.
	groups []graphGroup
}

// graphGroup is one instance of a group call: its steps, labelled with
// their address in the group (TYPE.NAME).
type graphGroup struct {
	prefix string
	nodes  []graphNode
}

type graphNode struct {
	id    string // the address
	label string // what the node shows: the address in its group
	title string // the whole address (and check and when, for a check)
	check bool
}

// allNodes are the phase's steps and those of its groups.
func (ph graphPhase) allNodes() []graphNode {
	out := ph.nodes
	for _, g := range ph.groups {
		out = append(out[:len(out):len(out)], g.nodes...)
	}
	return out
}

func buildGraph(rb *phases.Runbook) graphModel {
	g := graphModel{labels: map[[2]string]string{}}
	providerDeps := map[string][]phases.Address{}
	for _, pc := range rb.Providers {
		providerDeps[pc.Key()] = pc.DependsOn
	}
	for _, ph := range rb.Phases {
		gp := graphPhase{name: ph.Name}
		groups := map[string]int{} // prefix -> index in gp.groups
		all := append(append([]*phases.Step(nil), ph.Steps...), ph.Checks...)
		for _, s := range all {
			n := graphNode{id: s.Addr.String(), label: s.Addr.Local().String(), title: s.Addr.String()}
			if s.IsCheck() {
				n.check = true
				n.label = fmt.Sprintf("check %s (%s)", s.Addr.Local(), s.When)
				n.title = fmt.Sprintf("check %s (%s)", s.Addr, s.When)
			}
			if prefix := s.Addr.GroupPrefix(); prefix != "" {
				i, ok := groups[prefix]
				if !ok {
					i = len(gp.groups)
					groups[prefix] = i
					gp.groups = append(gp.groups, graphGroup{prefix: prefix})
				}
				gp.groups[i].nodes = append(gp.groups[i].nodes, n)
			} else {
				gp.nodes = append(gp.nodes, n)
			}
			for _, d := range s.DependsOn {
				e := [2]string{d.String(), s.Addr.String()}
				g.edges = append(g.edges, e)
				if slices.Contains(providerDeps[s.Provider], d) {
					g.labels[e] = "provider " + s.Provider
				}
			}
		}
		sortNodes(gp.nodes)
		sort.Slice(gp.groups, func(i, j int) bool { return gp.groups[i].prefix < gp.groups[j].prefix })
		for _, g := range gp.groups {
			sortNodes(g.nodes)
		}
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

func sortNodes(l []graphNode) { sort.Slice(l, func(i, j int) bool { return l[i].id < l[j].id }) }

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
		writeDotNodes(w, "    ", ph.nodes)
		// A group call instance is a cluster of its own in its phase's,
		// its steps labelled with their address in the group.
		for _, gr := range ph.groups {
			fmt.Fprintf(w, "    subgraph %s {\n", q("cluster_"+ph.name+" "+gr.prefix))
			fmt.Fprintf(w, "      label = %s;\n", q(gr.prefix))
			writeDotNodes(w, "      ", gr.nodes)
			fmt.Fprintln(w, "    }")
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

// writeDotNodes writes the node statements of nodes, each line after
// indent: a step shows its address (its label, in a group), a check its
// label in a hexagon.
func writeDotNodes(w io.Writer, indent string, nodes []graphNode) {
	q := strconv.Quote
	for _, n := range nodes {
		switch {
		case n.check:
			fmt.Fprintf(w, "%s%s [label = %s, shape = hexagon];\n", indent, q(n.id), q(n.label))
		case n.label != n.id:
			fmt.Fprintf(w, "%s%s [label = %s];\n", indent, q(n.id), q(n.label))
		default:
			fmt.Fprintf(w, "%s%s;\n", indent, q(n.id))
		}
	}
}

func writeMermaid(w io.Writer, g graphModel) {
	ids := map[string]string{}
	phaseIDs := map[string]string{}
	n := 0
	for i, ph := range g.phases {
		phaseIDs[ph.name] = fmt.Sprintf("p%d", i)
		for _, x := range ph.allNodes() {
			ids[x.id] = fmt.Sprintf("n%d", n)
			n++
		}
	}
	label := func(s string) string { return `"` + strings.ReplaceAll(s, `"`, "#quot;") + `"` }
	nodes := func(indent string, list []graphNode) {
		for _, x := range list {
			if x.check {
				fmt.Fprintf(w, "%s%s{{%s}}\n", indent, ids[x.id], label(x.label))
			} else {
				fmt.Fprintf(w, "%s%s[%s]\n", indent, ids[x.id], label(x.label))
			}
		}
	}
	fmt.Fprintln(w, "flowchart LR")
	for _, ph := range g.phases {
		id := phaseIDs[ph.name]
		fmt.Fprintf(w, "  subgraph %s[%s]\n", id, label("phase "+ph.name))
		nodes("    ", ph.nodes)
		// A group call instance is a subgraph in its phase's.
		for j, gr := range ph.groups {
			fmt.Fprintf(w, "    subgraph %sg%d[%s]\n", id, j, label(gr.prefix))
			nodes("      ", gr.nodes)
			fmt.Fprintln(w, "    end")
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
// phase point right and edges between phases point down. The steps of
// a group call instance are a band of the phase's columns of their own,
// below the phase's own steps, in a frame labelled with the instance.
const (
	svgBoxH   = 28 // a step's box
	svgCharW  = 7  // the width of a character of the 12px monospace font
	svgGapX   = 36 // between columns of a phase
	svgGapY   = 12 // between boxes of a column, and between bands
	svgPad    = 16 // inside a phase's frame
	svgHeader = 26 // a phase's title
	svgPhaseY = 40 // between phases
	// A group call instance's frame: its title, and its margin around
	// its boxes.
	svgGroupHeader = 20
	svgGroupPad    = 8
	svgGroupCharW  = 6 // of its 11px title
)

type svgBox struct{ x, y, w int }

// svgFrame is a phase's frame: its top and height.
type svgFrame struct{ y, h int }

// svgRect is a group call instance's frame.
type svgRect struct{ x, y, w, h int }

// svgLayout is where writeSVG draws everything.
type svgLayout struct {
	inPhase map[string]string // address -> phase
	boxes   map[string]svgBox
	frames  map[string]svgFrame
	groups  map[[2]string]svgRect // phase, group prefix -> its frame
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
		for _, gr := range ph.groups {
			r := l.groups[[2]string{ph.name, gr.prefix}]
			fmt.Fprintf(w, `  <g class="group" data-phase="%s" data-group="%s"><title>%s</title>`, svgEsc(ph.name), svgEsc(gr.prefix), svgEsc(gr.prefix+" (phase "+ph.name+")"))
			fmt.Fprintf(w, `<rect x="%d" y="%d" width="%d" height="%d" rx="4" fill="#e8edf6" stroke="#6b7a94" stroke-dasharray="4 3"/>`, r.x, r.y, r.w, r.h)
			fmt.Fprintf(w, `<text x="%d" y="%d" font-size="11" fill="#3c4a63">%s</text></g>`+"\n", r.x+svgGroupPad, r.y+14, svgEsc(gr.prefix))
		}
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
		for _, n := range ph.allNodes() {
			writeSVGNode(w, n, l.boxes[n.id])
		}
	}
	fmt.Fprintln(w, "</svg>")
}

// layoutSVG places each phase's steps in columns by their depth in the
// phase (a step right of those it waits for), the steps of each group
// call instance in a band of those columns of its own, and the phases
// one below the other.
func layoutSVG(g graphModel) svgLayout {
	l := svgLayout{inPhase: map[string]string{}, boxes: map[string]svgBox{}, frames: map[string]svgFrame{}, groups: map[[2]string]svgRect{}}
	for _, ph := range g.phases {
		for _, n := range ph.allNodes() {
			l.inPhase[n.id] = ph.name
		}
	}
	depthOf := stepDepths(g, l.inPhase)
	y, width := svgPad, 0
	for _, ph := range g.phases {
		// The columns: as wide as their widest box, of any band.
		var colW []int
		for _, n := range ph.allNodes() {
			d := depthOf(n.id)
			for len(colW) <= d {
				colW = append(colW, 0)
			}
			colW[d] = max(colW[d], len([]rune(n.label))*svgCharW+20)
		}
		colX := make([]int, len(colW))
		cx := 2 * svgPad
		for d, cw := range colW {
			colX[d] = cx
			cx += cw + svgGapX
		}
		title := "phase " + ph.name
		// A phase without steps: cx-svgGapX+svgPad is less than the title's width.
		width = max(width, cx-svgGapX+svgPad, svgPad+len([]rune(title))*svgCharW+2*svgPad)
		// band places nodes from top down, each in its column; it
		// returns the band's height and its first and last column.
		band := func(nodes []graphNode, top int) (h, first, last int) {
			n := make([]int, len(colW)) // boxes in each column so far
			first = len(colW)
			for _, x := range nodes {
				d := depthOf(x.id)
				l.boxes[x.id] = svgBox{x: colX[d], y: top + n[d]*(svgBoxH+svgGapY), w: colW[d]}
				n[d]++
				h = max(h, n[d]*(svgBoxH+svgGapY)-svgGapY)
				first, last = min(first, d), max(last, d)
			}
			return h, first, last
		}
		top := y + svgHeader
		h, _, _ := band(ph.nodes, top)
		for _, gr := range ph.groups {
			if h > 0 {
				h += svgGapY
			}
			bh, first, last := band(gr.nodes, top+h+svgGroupHeader)
			r := svgRect{x: colX[first] - svgGroupPad, y: top + h, h: svgGroupHeader + bh + svgGroupPad}
			r.w = max(colX[last]+colW[last]+svgGroupPad-r.x, len([]rune(gr.prefix))*svgGroupCharW+2*svgGroupPad)
			l.groups[[2]string{ph.name, gr.prefix}] = r
			width = max(width, r.x+r.w+svgPad)
			h += r.h
		}
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
// output), at b; its title is the whole address.
func writeSVGNode(w io.Writer, n graphNode, b svgBox) {
	fmt.Fprintf(w, `  <g class="step" data-address="%s"><title>%s</title>`, svgEsc(n.id), svgEsc(n.title))
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
