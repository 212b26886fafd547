package views_test

import (
	"bytes"
	"encoding/xml"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/views"
)

// A provider block that uses a step's outputs makes every step of the
// provider wait for that step: the graph shows those edges, labelled with
// the provider, in every format; a step's own references stay unlabelled.
func TestGraphProviderEdges(t *testing.T) {
	rb := &phases.Runbook{
		Providers: []*phases.ProviderConfig{
			{Type: "talos", Name: "node", DependsOn: []phases.Address{addr("incus_instance.talos")}},
			{Type: "local", Name: "default"},
		},
		Phases: []*phases.Phase{{Name: "platform", Steps: []*phases.Step{
			{Addr: addr("incus_instance.talos"), Provider: "local.default"},
			{Addr: addr("talos_machine_config.node"), Provider: "talos.node", DependsOn: []phases.Address{addr("incus_instance.talos")}},
			{Addr: addr("exec.note"), Provider: "local.default", DependsOn: []phases.Address{addr("incus_instance.talos")}},
		}}},
	}
	graph := func(format string) string {
		v, out, _ := newView()
		if err := v.Graph(rb, format); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}

	dot := graph(views.GraphDot)
	for _, want := range []string{
		`"incus_instance.talos" -> "talos_machine_config.node" [label = "provider talos.node", style = bold];`,
		`"incus_instance.talos" -> "exec.note";`,
	} {
		if !strings.Contains(dot, want) {
			t.Errorf("dot lacks %s:\n%s", want, dot)
		}
	}

	mermaid := graph(views.GraphMermaid)
	if !strings.Contains(mermaid, `==>|"provider talos.node"|`) || strings.Count(mermaid, "==>") != 1 {
		t.Errorf("mermaid should have one labelled edge:\n%s", mermaid)
	}

	svg := graph(views.GraphSVG)
	if err := xml.Unmarshal([]byte(svg), new(struct{})); err != nil {
		t.Fatalf("not well-formed: %v", err)
	}
	dec := xml.NewDecoder(bytes.NewReader([]byte(svg)))
	labelled := map[string]string{}
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		if el, ok := tok.(xml.StartElement); ok && el.Name.Local == "g" {
			var from, to, label string
			for _, a := range el.Attr {
				switch a.Name.Local {
				case "data-from":
					from = a.Value
				case "data-to":
					to = a.Value
				case "data-label":
					label = a.Value
				}
			}
			if from != "" && to != "" && strings.Contains(from, ".") {
				labelled[from+" -> "+to] = label
			}
		}
	}
	if got := labelled["incus_instance.talos -> talos_machine_config.node"]; got != "provider talos.node" {
		t.Errorf("svg provider edge label = %q; edges %v", got, labelled)
	}
	if got, ok := labelled["incus_instance.talos -> exec.note"]; !ok || got != "" {
		t.Errorf("svg plain edge: %q, %v", got, ok)
	}
}
