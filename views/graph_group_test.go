package views_test

import (
	"bytes"
	"encoding/xml"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/views"
)

// groupedRunbook: phase apps calls the group svc with for_each (two
// instances of a volume and an app that uses it, and a check) and db
// without; exec.notify, written in the phase, waits for both apps; phase
// later has a step of its own.
func groupedRunbook() *phases.Runbook {
	in := func(call, key, a string) phases.Address {
		x := addr(a)
		x.Group, x.GroupKey = call, key
		return x
	}
	apps := &phases.Phase{Name: "apps"}
	notify := &phases.Step{Addr: addr("exec.notify")}
	for _, k := range []string{"jellyfin", "emby"} {
		vol := &phases.Step{Addr: in("svc", k, "incus_volume.data")}
		app := &phases.Step{Addr: in("svc", k, "helm_release.app"), DependsOn: []phases.Address{vol.Addr}}
		apps.Steps = append(apps.Steps, vol, app)
		apps.Checks = append(apps.Checks, &phases.Step{Addr: in("svc", k, "http_check.up"), When: phases.CheckAfter, DependsOn: []phases.Address{app.Addr}})
		notify.DependsOn = append(notify.DependsOn, app.Addr)
	}
	apps.Steps = append(apps.Steps, notify, &phases.Step{Addr: in("db", "", "exec.dump")})
	return &phases.Runbook{Phases: []*phases.Phase{apps,
		{Name: "later", After: []string{"apps"}, Steps: []*phases.Step{{Addr: addr("exec.last"), DependsOn: []phases.Address{notify.Addr}}}}}}
}

func graphOf(t *testing.T, rb *phases.Runbook, format string) string {
	t.Helper()
	v, out, _ := newView()
	if err := v.Graph(rb, format); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// block is the text from the line that opens a block (open) to the line
// at the same indentation that closes it (close), that line and its
// newline included, or "" when open is not there.
func block(text, open, close string) string {
	i := strings.Index(text, open)
	if i < 0 {
		return ""
	}
	line := text[strings.LastIndex(text[:i], "\n")+1:]
	indent := line[:len(line)-len(strings.TrimLeft(line, " "))]
	j := strings.Index(text[i:], "\n"+indent+close+"\n")
	if j < 0 {
		return ""
	}
	return text[i : i+j+len(indent)+len(close)+2]
}

// TestGraphDotGroups: each group call instance is a cluster inside its
// phase's, labelled group.CALL or group.CALL["KEY"], its steps and
// checks in it labelled with their address in the group; edges join the
// whole addresses.
func TestGraphDotGroups(t *testing.T) {
	dot := graphOf(t, groupedRunbook(), views.GraphDot)
	phase := block(dot, `subgraph "cluster_apps" {`, "}")
	if phase == "" {
		t.Fatalf("no cluster for phase apps:\n%s", dot)
	}
	for key, prefix := range map[string]string{"jellyfin": `group.svc[\"jellyfin\"]`, "emby": `group.svc[\"emby\"]`} {
		c := block(phase, `subgraph "cluster_apps `+prefix+`" {`, "}")
		for _, want := range []string{
			`label = "` + prefix + `";`,
			`"` + prefix + `.incus_volume.data" [label = "incus_volume.data"];`,
			`"` + prefix + `.helm_release.app" [label = "helm_release.app"];`,
			`"` + prefix + `.http_check.up" [label = "check http_check.up (after)", shape = hexagon];`,
		} {
			if !strings.Contains(c, want) {
				t.Errorf("the cluster of %s lacks %s:\n%s", key, want, dot)
			}
		}
		if strings.Contains(c, "exec.notify") || strings.Contains(c, "exec.dump") {
			t.Errorf("the cluster of %s holds steps not in it:\n%s", key, c)
		}
		if want := `"` + prefix + `.helm_release.app" -> "exec.notify";`; !strings.Contains(dot, want) {
			t.Errorf("dot lacks the edge %s:\n%s", want, dot)
		}
	}
	if c := block(phase, `subgraph "cluster_apps group.db" {`, "}"); !strings.Contains(c, `label = "group.db";`) || !strings.Contains(c, `"group.db.exec.dump" [label = "exec.dump"];`) {
		t.Errorf("no cluster group.db with exec.dump:\n%s", dot)
	}
	if !strings.Contains(phase, "\n    \"exec.notify\";") || strings.Count(dot, "subgraph") != 5 {
		t.Errorf("exec.notify is not the phase's own, or clusters are not 2 phases and 3 group instances:\n%s", dot)
	}
}

// TestGraphMermaidGroups: each group call instance is a subgraph inside
// its phase's, labelled with the instance (quotes as #quot;), its nodes
// with their address in the group.
func TestGraphMermaidGroups(t *testing.T) {
	m := graphOf(t, groupedRunbook(), views.GraphMermaid)
	phase := block(m, `subgraph p0["phase apps"]`, "end")
	if phase == "" {
		t.Fatalf("no subgraph for phase apps:\n%s", m)
	}
	for _, prefix := range []string{`group.db`, `group.svc[#quot;emby#quot;]`, `group.svc[#quot;jellyfin#quot;]`} {
		i := strings.Index(phase, `["`+prefix+`"]`)
		if i < 0 {
			t.Errorf("no subgraph %s in phase apps:\n%s", prefix, m)
			continue
		}
		open := phase[strings.LastIndex(phase[:i], "\n")+1 : i+len(prefix)+4]
		g := block(phase, open, "end")
		if !strings.HasPrefix(strings.TrimSpace(open), "subgraph p0g") || g == "" {
			t.Errorf("%s is not a subgraph of its own in phase apps: %q\n%s", prefix, open, m)
			continue
		}
		want := []string{`["exec.dump"]`}
		if prefix != "group.db" {
			want = []string{`["incus_volume.data"]`, `["helm_release.app"]`, `{{"check http_check.up (after)"}}`}
		}
		for _, w := range want {
			if !strings.Contains(g, w) {
				t.Errorf("the subgraph %s lacks %s:\n%s", prefix, w, m)
			}
		}
	}
	if strings.Count(m, "subgraph") != 5 || strings.Count(m, "\n    end\n") != 3 || strings.Count(m, "-->") != 7 {
		t.Errorf("want 2 phases, 3 group subgraphs and 7 edges:\n%s", m)
	}
}

// TestGraphSVGGroups: each group call instance is a framed box inside
// its phase's frame, titled with the instance, around the boxes of its
// steps and checks (labelled with their address in the group, titled
// with the whole one) and no others; edges inside the phase still point
// right.
func TestGraphSVGGroups(t *testing.T) {
	svg := graphOf(t, groupedRunbook(), views.GraphSVG)
	type rect struct{ x, y, w, h float64 }
	inside := func(a, b rect) bool { return a.x >= b.x && a.y >= b.y && a.x+a.w <= b.x+b.w && a.y+a.h <= b.y+b.h }
	phasesAt, groupsAt, boxes := map[string]rect{}, map[string]rect{}, map[string]rect{}
	labels, titles, groupText := map[string]string{}, map[string]string{}, map[string]string{}
	dec := xml.NewDecoder(strings.NewReader(svg))
	var cls, key string // the g being read
	var text, title bool
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, svg)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			at := map[string]string{}
			for _, a := range el.Attr {
				at[a.Name.Local] = a.Value
			}
			f := func(k string) float64 { v, _ := strconv.ParseFloat(at[k], 64); return v }
			switch el.Name.Local {
			case "g":
				cls = at["class"]
				key = map[string]string{"phase": at["data-phase"], "group": at["data-group"], "step": at["data-address"]}[cls]
			case "rect", "polygon":
				r := rect{f("x"), f("y"), f("width"), f("height")}
				if el.Name.Local == "polygon" {
					var xs, ys []float64
					for _, p := range strings.Fields(at["points"]) {
						xy := strings.Split(p, ",")
						x, _ := strconv.ParseFloat(xy[0], 64)
						y, _ := strconv.ParseFloat(xy[1], 64)
						xs, ys = append(xs, x), append(ys, y)
					}
					r = rect{xs[0], ys[1], xs[3] - xs[0], ys[4] - ys[1]}
				}
				switch cls {
				case "phase":
					phasesAt[key] = r
				case "group":
					groupsAt[key] = r
				case "step":
					boxes[key] = r
				}
			case "text":
				text = true
			case "title":
				title = true
			}
		case xml.CharData:
			switch {
			case text && cls == "step":
				labels[key] = string(el)
			case text && cls == "group":
				groupText[key] = string(el)
			case title && cls == "step":
				titles[key] = string(el)
			}
		case xml.EndElement:
			text, title = false, false
		}
	}
	members := map[string][]string{
		`group.svc["jellyfin"]`: {"incus_volume.data", "helm_release.app", "http_check.up"},
		`group.svc["emby"]`:     {"incus_volume.data", "helm_release.app", "http_check.up"},
		`group.db`:              {"exec.dump"},
	}
	if len(groupsAt) != len(members) {
		t.Errorf("group frames %v, want one for each of %v", groupsAt, members)
	}
	for prefix, locals := range members {
		fr, ok := groupsAt[prefix]
		if !ok {
			t.Errorf("no frame for %s:\n%s", prefix, svg)
			continue
		}
		if groupText[prefix] != prefix {
			t.Errorf("the frame of %s says %q", prefix, groupText[prefix])
		}
		if !inside(fr, phasesAt["apps"]) {
			t.Errorf("the frame of %s %v is not inside phase apps' %v", prefix, fr, phasesAt["apps"])
		}
		for _, local := range locals {
			id := prefix + "." + local
			b, ok := boxes[id]
			wantLabel := local
			if strings.HasPrefix(local, "http_check") {
				wantLabel = "check " + local + " (after)"
			}
			if !ok || labels[id] != wantLabel || !strings.Contains(titles[id], id) {
				t.Errorf("%s: box %v, label %q, title %q; want the label %q and the whole address in the title", id, ok, labels[id], titles[id], wantLabel)
			}
			if !inside(b, fr) {
				t.Errorf("the box of %s %v is not inside the frame of %s %v", id, b, prefix, fr)
			}
		}
		for id, b := range boxes {
			if !strings.HasPrefix(id, prefix+".") && inside(b, fr) {
				t.Errorf("the box of %s is inside the frame of %s", id, prefix)
			}
		}
	}
	for other, fr := range groupsAt {
		for prefix, g := range groupsAt {
			if other < prefix && g.x < fr.x+fr.w && fr.x < g.x+g.w && g.y < fr.y+fr.h && fr.y < g.y+g.h {
				t.Errorf("the frames of %s %v and %s %v overlap", other, fr, prefix, g)
			}
		}
	}
	for _, e := range [][2]string{{`group.svc["emby"].incus_volume.data`, `group.svc["emby"].helm_release.app`}, {`group.svc["jellyfin"].helm_release.app`, "exec.notify"}} {
		if from, to := boxes[e[0]], boxes[e[1]]; from.x+from.w >= to.x {
			t.Errorf("%s %v is not left of %s %v, which waits for it", e[0], from, e[1], to)
		}
	}
	if !bytes.Contains([]byte(svg), []byte(`data-from="group.svc[&#34;jellyfin&#34;].helm_release.app" data-to="exec.notify"`)) {
		t.Errorf("no edge from the whole address:\n%s", svg)
	}
	if b := boxes["exec.last"]; !inside(b, phasesAt["later"]) {
		t.Errorf("exec.last %v is not in phase later %v", b, phasesAt["later"])
	}
}
