package views_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/views"
)

// TestEveryEventKindDocumented: EventKinds, which the reference lists,
// has every kind declared in engine/event.go once, in their order, and names
// only fields that EventFields describes; EventFields describes every
// field of an event's JSON.
func TestEveryEventKindDocumented(t *testing.T) {
	t.Parallel()
	f, err := parser.ParseFile(token.NewFileSet(), "../engine/event.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []engine.EventKind
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, sp := range g.Specs {
			v := sp.(*ast.ValueSpec)
			if id, ok := v.Type.(*ast.Ident); !ok || id.Name != "EventKind" {
				continue
			}
			s, err := strconv.Unquote(v.Values[0].(*ast.BasicLit).Value)
			if err != nil {
				t.Fatal(err)
			}
			declared = append(declared, engine.EventKind(s))
		}
	}
	var documented []engine.EventKind
	for _, k := range views.EventKinds {
		documented = append(documented, k.Kind)
	}
	if !slices.Equal(declared, documented) {
		t.Errorf("EventKinds documents %v, event.go declares %v", documented, declared)
	}

	var tags []string
	ty := reflect.TypeFor[engine.Event]()
	for i := range ty.NumField() {
		if name, _, _ := strings.Cut(ty.Field(i).Tag.Get("json"), ","); name != "-" {
			tags = append(tags, name)
		}
	}
	var fields []string
	for _, f := range views.EventFields {
		fields = append(fields, f.Name)
	}
	if !slices.Equal(tags, fields) {
		t.Errorf("EventFields describes %v, an event's JSON has %v", fields, tags)
	}
	for _, k := range views.EventKinds {
		if k.Says == "" {
			t.Errorf("%s says nothing", k.Kind)
		}
		for _, f := range k.Fields {
			if !slices.Contains(fields, f) || f == "kind" || f == "time" {
				t.Errorf("%s lists field %q, not one of %v besides kind and time", k.Kind, f, fields)
			}
		}
	}
}
