package runbooks_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/runbooks"
)

const forEachRunbook = `
variable "apps" {
  default = { nextcloud = "/srv/nc", jellyfin = "/srv/jf", "a \"q\"" = "/srv/q" }
}
locals {
  nodes = toset(["n1", "n2"])
}
phase "apps" {
  step "exec" "export" {
    for_each = var.apps
    command  = ["tar", "-C", each.value, "-cf", "${each.key}.tar", "."]
  }
  step "exec" "node" {
    for_each = local.nodes
    command  = ["echo", each.key, each.value]
  }
  step "exec" "all" {
    command    = ["echo", "${exec.export["jellyfin"].exit_code}"]
    depends_on = [exec.export]
  }
  step "exec" "one" {
    command    = ["echo"]
    depends_on = [exec.node["n2"]]
  }
  step "exec" "each" {
    for_each = var.apps
    command  = ["echo", "${exec.export[each.key].exit_code}"]
  }
}
`

func TestForEachMakesOneStepPerKey(t *testing.T) {
	rb := mustLoad(t, map[string]string{"main.hcl": forEachRunbook}, runbooks.Options{})
	var addrs []string
	for _, s := range rb.AllSteps() {
		addrs = append(addrs, s.Addr.String())
	}
	want := []string{
		`exec.export["a \"q\""]`, `exec.export["jellyfin"]`, `exec.export["nextcloud"]`,
		`exec.node["n1"]`, `exec.node["n2"]`,
		`exec.all`, `exec.one`,
		`exec.each["a \"q\""]`, `exec.each["jellyfin"]`, `exec.each["nextcloud"]`,
	}
	if !slices.Equal(addrs, want) {
		t.Fatalf("steps = %q\nwant    %q", addrs, want)
	}
	v := eval(t, step(t, rb, `exec.export["nextcloud"]`), nil)
	if got := v.GetAttr("command").AsValueSlice(); got[2].AsString() != "/srv/nc" || got[4].AsString() != "nextcloud.tar" {
		t.Errorf("each.value/each.key: command = %#v", v.GetAttr("command"))
	}
	v = eval(t, step(t, rb, `exec.node["n2"]`), nil)
	if got := v.GetAttr("command").AsValueSlice(); got[1].AsString() != "n2" || got[2].AsString() != "n2" {
		t.Errorf("a set's each.value is its key: %#v", v.GetAttr("command"))
	}

	export := func(k string) phases.Address { return phases.Address{Type: "exec", Name: "export", Key: k} }
	if got, want := step(t, rb, "exec.all").DependsOn, []phases.Address{export(`a "q"`), export("jellyfin"), export("nextcloud")}; !slices.Equal(got, want) {
		t.Errorf("depends_on = [exec.export] is every instance: %v, want %v", got, want)
	}
	if got, want := step(t, rb, "exec.one").DependsOn, []phases.Address{{Type: "exec", Name: "node", Key: "n2"}}; !slices.Equal(got, want) {
		t.Errorf("depends_on = [exec.node[\"n2\"]] = %v, want %v", got, want)
	}
	outs := map[phases.Address]cty.Value{export("jellyfin"): cty.ObjectVal(map[string]cty.Value{"exit_code": cty.NumberIntVal(7)})}
	v = eval(t, step(t, rb, "exec.all"), outs)
	if got := v.GetAttr("command").AsValueSlice()[1]; !got.IsKnown() || got.AsString() != "7" {
		t.Errorf(`exec.export["jellyfin"].exit_code = %#v, want "7"`, got)
	}
	v = eval(t, step(t, rb, `exec.each["jellyfin"]`), outs)
	if got := v.GetAttr("command").AsValueSlice()[1]; !got.IsKnown() || got.AsString() != "7" {
		t.Errorf(`exec.export[each.key].exit_code = %#v, want "7"`, got)
	}
}

func TestForEachMistakes(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"step output", `
  step "exec" "a" { command = ["x"] }
  step "exec" "b" {
    for_each = toset([exec.a.exit_code])
    command = ["x"]
  }`, "depends on step outputs that cannot be determined until run"},
		{"list", `step "exec" "b" {
    for_each = ["x", "y"]
    command = ["x"]
  }`, "toset"},
		{"empty key", `step "exec" "b" {
    for_each = toset(["", "y"])
    command = ["x"]
  }`, "empty key"},
		{"each without for_each", `step "exec" "b" { command = [each.key] }`, "only in a step with for_each"},
		{"unknown key", `
  step "exec" "a" {
    for_each = toset(["x"])
    command = ["x"]
  }
  step "exec" "b" { depends_on = [exec.a["y"]] 
    command = ["x"] }`, `has no instance "y": its for_each keys are "x"`},
		{"no key", `
  step "exec" "a" {
    for_each = toset(["x"])
    command = ["x"]
  }
  step "exec" "b" { command = ["${exec.a.exit_code}"] }`, "has for_each: name one instance"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, diags := load(t, map[string]string{"main.hcl": "phase \"p\" {\n" + tc.body + "\n}\n"}, runbooks.Options{})
			if !diags.HasErrors() || !strings.Contains(diags.Err().Error(), tc.want) {
				t.Fatalf("diags = %v, want %q", diags.Err(), tc.want)
			}
			for _, d := range diags {
				if d.Subject == nil || d.Subject.StartLine < 2 {
					t.Errorf("diagnostic without its range: %+v", d)
				}
			}
		})
	}
}

// TestForEachKeysAreNFC: a key is kept as ParseAddress reads it back
// (NFC), so that the state's key of an instance names it again.
func TestForEachKeysAreNFC(t *testing.T) {
	rb := mustLoad(t, map[string]string{"main.hcl": "phase \"p\" {\n  step \"exec\" \"x\" {\n    for_each = toset([\"cafe\u0301\"])\n    command = [each.key]\n  }\n  step \"exec\" \"y\" {\n    command = [\"true\"]\n    depends_on = [exec.x[\"caf\u00e9\"]]\n  }\n}\n"}, runbooks.Options{})
	s := step(t, rb, "exec.x[\"caf\u00e9\"]")
	if a, err := phases.ParseAddress(s.Addr.String()); err != nil || a != s.Addr {
		t.Errorf("ParseAddress(%s) = %#v, %v", s.Addr, a, err)
	}
}

// A for_each step of a type whose object is named after its step must
// name each instance's own: otherwise every instance would manage one.
func TestForEachInstanceNeedsItsName(t *testing.T) {
	schemas := testSchemas()
	local := schemas["local"]
	local.StepTypes["vm"] = phases.StepType{Attributes: map[string]phases.Attribute{
		"name":  {Type: cty.String, Description: "The VM's name; default the step's name."},
		"image": {Type: cty.String, Required: true},
	}}
	const without = `phase "p" {
  step "vm" "app" {
    for_each = toset(["a", "b"])
    image    = "debian"
  }
}
`
	_, diags := load(t, map[string]string{"main.hcl": without}, runbooks.Options{Schemas: schemas})
	if !diags.HasErrors() || !strings.Contains(diags.Err().Error(), "Missing Instance Name") || !strings.Contains(diags.Err().Error(), "main.hcl:3") || !strings.Contains(diags.Err().Error(), "name = each.key") {
		t.Fatalf("a for_each vm without name: %v, want Missing Instance Name at main.hcl:3 with the fix", diags.Err())
	}
	with := strings.Replace(without, `image    = "debian"`, `image    = "debian"
    name     = "app-${each.key}"`, 1)
	rb := mustLoad(t, map[string]string{"main.hcl": with}, runbooks.Options{Schemas: schemas})
	if n := len(rb.Phases[0].Steps); n != 2 {
		t.Errorf("%d steps, want 2 instances", n)
	}
}
