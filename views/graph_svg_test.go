package views_test

import (
	"bytes"
	"encoding/xml"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/views"
)

// TestGraphSVG: the svg format is well-formed XML with a box for every
// step and check, a path for every dependency (pointing right inside a
// phase, as the layout ranks steps by depth; down between phases, which
// are rows), and one for the order of phases.
func TestGraphSVG(t *testing.T) {
	rb := &phases.Runbook{Phases: []*phases.Phase{
		{Name: "A", Steps: []*phases.Step{
			{Addr: addr("exec.b"), DependsOn: []phases.Address{addr("exec.a")}},
			{Addr: addr("exec.a")},
			{Addr: addr("exec.c_with_<odd>_&_name"), DependsOn: []phases.Address{addr("exec.b"), addr("exec.a")}},
		}},
		{Name: "B", After: []string{"A"}, Steps: []*phases.Step{{Addr: addr("exec.d"), DependsOn: []phases.Address{addr("exec.b")}}},
			Checks: []*phases.Step{{Addr: addr("http_check.up"), When: phases.CheckAfter}}},
		{Name: "empty"},
	}}
	v, out, _ := newView()
	if err := v.Graph(rb, views.GraphSVG); err != nil {
		t.Fatal(err)
	}

	steps := map[string][2]float64{} // address -> x of its left and right edges
	tops := map[string]float64{}     // address -> y of its top edge
	edges := map[string]bool{}
	order := map[string]bool{}
	dec := xml.NewDecoder(bytes.NewReader(out.Bytes()))
	var cur string
	root := true
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, out)
		}
		el, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		if root {
			if el.Name.Local != "svg" || el.Name.Space != "http://www.w3.org/2000/svg" {
				t.Fatalf("root element %v, want svg", el.Name)
			}
			root = false
		}
		at := map[string]string{}
		for _, a := range el.Attr {
			at[a.Name.Local] = a.Value
		}
		switch {
		case el.Name.Local == "g" && at["class"] == "step":
			cur = at["data-address"]
		case el.Name.Local == "g" && at["class"] == "edge":
			edges[at["data-from"]+" -> "+at["data-to"]] = true
		case el.Name.Local == "g" && at["class"] == "phase-order":
			order[at["data-from"]+" -> "+at["data-to"]] = true
		case (el.Name.Local == "rect" || el.Name.Local == "polygon") && cur != "":
			var xs, ys []float64
			if el.Name.Local == "rect" {
				x, _ := strconv.ParseFloat(at["x"], 64)
				w, _ := strconv.ParseFloat(at["width"], 64)
				y, _ := strconv.ParseFloat(at["y"], 64)
				xs, ys = []float64{x, x + w}, []float64{y}
			} else {
				for _, p := range strings.Fields(at["points"]) {
					xy := strings.Split(p, ",")
					f, _ := strconv.ParseFloat(xy[0], 64)
					g, _ := strconv.ParseFloat(xy[1], 64)
					xs, ys = append(xs, f), append(ys, g)
				}
			}
			tops[cur] = slices.Min(ys)
			lo, hi := xs[0], xs[0]
			for _, x := range xs {
				lo, hi = min(lo, x), max(hi, x)
			}
			steps[cur] = [2]float64{lo, hi}
			cur = ""
		}
	}
	for _, a := range []string{"exec.a", "exec.b", "exec.c_with_<odd>_&_name", "exec.d", "http_check.up"} {
		if _, ok := steps[a]; !ok {
			t.Errorf("no box for %s:\n%s", a, out)
		}
	}
	for _, e := range [][2]string{{"exec.a", "exec.b"}, {"exec.b", "exec.c_with_<odd>_&_name"}, {"exec.a", "exec.c_with_<odd>_&_name"}, {"exec.b", "exec.d"}} {
		if !edges[e[0]+" -> "+e[1]] {
			t.Errorf("no edge %s -> %s:\n%s", e[0], e[1], out)
		}
		if e[1] == "exec.d" { // in the next phase: the row below
			if tops[e[0]] >= tops[e[1]] {
				t.Errorf("%s is not above %s, which waits for it: %v %v", e[0], e[1], tops[e[0]], tops[e[1]])
			}
			continue
		}
		if steps[e[0]][1] >= steps[e[1]][0] {
			t.Errorf("%s is not left of %s, which waits for it: %v %v", e[0], e[1], steps[e[0]], steps[e[1]])
		}
	}
	if len(edges) != 4 {
		t.Errorf("%d edges, want 4: %v", len(edges), edges)
	}
	if !order["A -> B"] || len(order) != 1 {
		t.Errorf("phase order edges %v, want A -> B", order)
	}
	if !strings.Contains(out.String(), "check http_check.up (after)") {
		t.Errorf("the check's label is missing:\n%s", out)
	}
}
