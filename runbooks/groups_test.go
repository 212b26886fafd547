package runbooks_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/runbooks"
)

// groupFiles is a runbook that calls one group per app (for_each) and
// one group once, with an argument computed from a step's output.
var groupFiles = map[string]string{
	"main.hcl": `
variable "apps" {
  default = { jellyfin = "/srv/jf", frigate = "/srv/fr" }
}
phase "p" {
  step "exec" "prepare" {
    command = ["true"]
  }
  group "app" {
    source   = "./groups/app"
    for_each = var.apps
    app      = each.key
    path     = each.value
  }
  group "single" {
    source     = "./groups/app"
    app        = "samba"
    path       = "/srv/${exec.prepare.exit_code}"
    depends_on = [exec.prepare]
  }
  step "exec" "after" {
    command = ["echo", group.app["jellyfin"].archive, group.single.archive]
  }
  step "exec" "all" {
    command    = ["true"]
    depends_on = [group.app]
  }
}
`,
	"groups/app/main.hcl": `
variable "app" {
  type = string
}
variable "path" {
  type = string
}
variable "mode" {
  default = "tar"
}
locals {
  archive = "${var.app}.${var.mode}"
}
step "exec" "stop" {
  command = ["systemctl", "stop", var.app]
}
step "exec" "export" {
  command    = ["tar", "-C", var.path, "-cf", local.archive, "."]
  depends_on = [exec.stop]
}
output "archive" {
  value = "${local.archive}:${exec.export.exit_code}"
}
`,
}

func TestGroupCallsMakeAddressedSteps(t *testing.T) {
	rb := mustLoad(t, groupFiles, runbooks.Options{})
	var addrs []string
	for _, s := range rb.AllSteps() {
		addrs = append(addrs, s.Addr.String())
	}
	want := []string{
		"exec.prepare",
		`group.app["frigate"].exec.stop`, `group.app["frigate"].exec.export`,
		`group.app["jellyfin"].exec.stop`, `group.app["jellyfin"].exec.export`,
		"group.single.exec.stop", "group.single.exec.export",
		"exec.after", "exec.all",
	}
	if !slices.Equal(addrs, want) {
		t.Fatalf("steps = %q\nwant    %q", addrs, want)
	}
	jf := func(name string) phases.Address {
		return phases.Address{Group: "app", GroupKey: "jellyfin", Type: "exec", Name: name}
	}
	// Inside the group, exec.stop is the instance's own.
	if got := step(t, rb, `group.app["jellyfin"].exec.export`).DependsOn; !slices.Equal(got, []phases.Address{jf("stop")}) {
		t.Errorf("export depends on %v, want its own instance's stop", got)
	}
	v := eval(t, step(t, rb, `group.app["jellyfin"].exec.export`), nil)
	if got := v.GetAttr("command").AsValueSlice(); got[2].AsString() != "/srv/jf" || got[4].AsString() != "jellyfin.tar" {
		t.Errorf("inputs and locals: command = %#v", v.GetAttr("command"))
	}
	// An argument computed from a step's output: the group's steps wait
	// for it, with the call's depends_on, and see it once it is known.
	single := step(t, rb, "group.single.exec.export")
	if !slices.Contains(single.DependsOn, phases.Address{Type: "exec", Name: "prepare"}) {
		t.Errorf("group.single.exec.export depends on %v, want exec.prepare too", single.DependsOn)
	}
	prepared := map[phases.Address]cty.Value{{Type: "exec", Name: "prepare"}: cty.ObjectVal(map[string]cty.Value{"exit_code": cty.NumberIntVal(3)})}
	if got := eval(t, single, prepared).GetAttr("command").AsValueSlice()[2]; !got.IsKnown() || got.AsString() != "/srv/3" {
		t.Errorf("path from exec.prepare's output = %#v, want /srv/3", got)
	}
	// The caller sees the outputs, and waits for what they refer to.
	after := step(t, rb, "exec.after")
	for _, a := range []phases.Address{jf("export"), {Group: "single", Type: "exec", Name: "export"}} {
		if !slices.Contains(after.DependsOn, a) {
			t.Errorf("exec.after depends on %v, want %s", after.DependsOn, a)
		}
	}
	outs := map[phases.Address]cty.Value{jf("export"): cty.ObjectVal(map[string]cty.Value{"exit_code": cty.NumberIntVal(0)})}
	if got := eval(t, after, outs).GetAttr("command").AsValueSlice()[1]; !got.IsKnown() || got.AsString() != "jellyfin.tar:0" {
		t.Errorf("group.app[\"jellyfin\"].archive = %#v, want jellyfin.tar:0", got)
	}
	if got := step(t, rb, "exec.all").DependsOn; len(got) != 4 {
		t.Errorf("depends_on = [group.app] is every step of every instance: %v", got)
	}
}

func TestGroupMistakes(t *testing.T) {
	group := groupFiles["groups/app/main.hcl"]
	for _, tc := range []struct {
		name, call, group, want, where string
	}{
		{"unknown argument", `app = "x"
    path = "/"
    colour = "red"`, group, `declares no variable "colour"`, "main.hcl:6"},
		{"missing argument", `app = "x"`, group, `needs a value for its variable "path"`, "main.hcl:2"},
		{"source outside", `app = "x"`, "", "leads out of the runbook", "main.hcl:3"},
		{"undeclared output", `app = "x"
    path = "/"
  }
  step "exec" "z" {
    command = [group.g.nothing]`, group, `has no output "nothing"`, "main.hcl:8"},
		{"phase in group", `app = "x"
    path = "/"`, group + "\nphase \"q\" {}\n", "Block Not Allowed in a Group", "groups/app/main.hcl:25"},
		{"group step refers to root step", `app = "x"
    path = "/"`, strings.Replace(group, "depends_on = [exec.stop]", "depends_on = [exec.outside]", 1), "No step or check exec.outside is declared in group g", "groups/app/main.hcl:19"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			source := "./groups/app"
			if tc.group == "" {
				source = "./../elsewhere"
			}
			files := map[string]string{
				"main.hcl":            "phase \"p\" {\n  group \"g\" {\n    source = \"" + source + "\"\n    " + tc.call + "\n  }\n  step \"exec\" \"outside\" {\n    command = [\"true\"]\n  }\n}\n",
				"groups/app/main.hcl": tc.group,
			}
			_, diags := load(t, files, runbooks.Options{})
			if !diags.HasErrors() || !strings.Contains(diags.Err().Error(), tc.want) || !strings.Contains(diags.Err().Error(), tc.where) {
				t.Fatalf("diags = %v\nwant %q at %s", diags.Err(), tc.want, tc.where)
			}
		})
	}
}

// A group called twice: each call's steps are its own, and a mistake in
// the group's file is reported at the file, once per call, naming the
// call site.
func TestGroupMistakeReportedOnce(t *testing.T) {
	files := map[string]string{
		"main.hcl": "phase \"p\" {\n  group \"a\" {\n    source = \"./g\"\n  }\n  group \"b\" {\n    source = \"./g\"\n  }\n}\n",
		"g/x.hcl":  "step \"exec\" \"s\" {\n  command = [var.nope]\n}\n",
	}
	_, diags := load(t, files, runbooks.Options{})
	if n := strings.Count(diags.Err().Error(), "var.nope"); !diags.HasErrors() || n != 1 && !strings.Contains(diags.Err().Error(), `"nope"`) {
		t.Fatalf("diags = %v", diags.Err())
	}
	var calls []string
	for _, d := range diags {
		if strings.Contains(d.Detail, `"nope"`) {
			calls = append(calls, d.Detail[strings.Index(d.Detail, "(In the group"):])
		}
	}
	// Once per call, each naming its call site: the call is where a
	// person looks next.
	want := []string{"(In the group called as group.a at main.hcl:2.)", "(In the group called as group.b at main.hcl:5.)"}
	if !slices.Equal(calls, want) {
		t.Errorf("the mistake in g/x.hcl reported with %q, want once per call, %q:\n%v", calls, want, diags.Err())
	}
}

// A group's steps take the provider its call names for their type.
func TestGroupProviders(t *testing.T) {
	files := map[string]string{
		"main.hcl": `provider "local" "a" {}
provider "local" "b" {}
phase "p" {
  group "one" {
    source    = "./g"
    providers = { local = local.b }
  }
}
`,
		"g/x.hcl": "step \"exec\" \"s\" {\n  command = [\"true\"]\n}\n",
	}
	rb := mustLoad(t, files, runbooks.Options{})
	if got := step(t, rb, "group.one.exec.s").Provider; !strings.HasSuffix(got, ".b") {
		t.Errorf("provider = %q, want local.b", got)
	}
	delete(files, "main.hcl")
	files["main.hcl"] = "provider \"local\" \"a\" {}\nprovider \"local\" \"b\" {}\nphase \"p\" {\n  group \"one\" {\n    source = \"./g\"\n  }\n}\n"
	_, diags := load(t, files, runbooks.Options{})
	if !diags.HasErrors() || !strings.Contains(diags.Err().Error(), "Ambiguous Provider") {
		t.Errorf("two local providers and no providers argument: %v", diags.Err())
	}
}

// moved blocks carry a record into a group and out of one.
func TestMovedIntoGroup(t *testing.T) {
	files := map[string]string{}
	for k, v := range groupFiles {
		files[k] = v
	}
	files["moved.hcl"] = `moved {
  from = exec.stop_jellyfin
  to   = group.app["jellyfin"].exec.stop
}
moved {
  from = group.old.exec.stop
  to   = exec.prepare
}
`
	rb := mustLoad(t, files, runbooks.Options{})
	if len(rb.Moved) != 2 || rb.Moved[0].To != (phases.Address{Group: "app", GroupKey: "jellyfin", Type: "exec", Name: "stop"}) {
		t.Fatalf("moved = %+v", rb.Moved)
	}
	files["moved.hcl"] = "moved {\n  from = exec.x\n  to   = group.app[\"plex\"].exec.stop\n}\n"
	if _, diags := load(t, files, runbooks.Options{}); !diags.HasErrors() || !strings.Contains(diags.Err().Error(), "Moved To an Undeclared Step") {
		t.Errorf("a move to an instance the call does not make: %v", diags.Err())
	}
}

// An evaluation that fails at plan (a step output of the wrong type)
// names the call instance and its site, not only the group's file.
func TestGroupEvaluationNamesTheCall(t *testing.T) {
	files := map[string]string{
		"main.hcl": "phase \"p\" {\n  step \"exec\" \"src\" {\n    command = [\"true\"]\n  }\n  group \"g\" {\n    source = \"./g\"\n    for_each = toset([\"k\"])\n    n = exec.src.exit_code\n  }\n}\n",
		"g/x.hcl":  "variable \"n\" {}\nstep \"exec\" \"s\" {\n  command = [\"echo\", var.n]\n  timeout = \"1s\"\n}\n",
	}
	rb := mustLoad(t, files, runbooks.Options{})
	s := step(t, rb, `group.g["k"].exec.s`)
	bad := map[phases.Address]cty.Value{{Type: "exec", Name: "src"}: cty.ObjectVal(map[string]cty.Value{"exit_code": cty.ListValEmpty(cty.String)})}
	_, diags := s.Config.Evaluate(bad)
	if !diags.HasErrors() || !strings.Contains(diags.Err().Error(), `(In group.g["k"], called at main.hcl:5.)`) {
		t.Fatalf("diags = %v, want the call instance and its site", diags.Err())
	}
}

// Two calls whose arguments use each other's outputs, with no step in
// between, are a cycle: refused at load, not computed forever at plan.
func TestGroupCallsInACircle(t *testing.T) {
	files := map[string]string{
		"main.hcl": "phase \"p\" {\n  group \"a\" {\n    source = \"./g\"\n    x = group.b.o\n  }\n  group \"b\" {\n    source = \"./g\"\n    x = group.a.o\n  }\n  step \"exec\" \"s\" {\n    command = [group.a.o]\n  }\n}\n",
		"g/x.hcl":  "variable \"x\" {}\noutput \"o\" {\n  value = var.x\n}\nstep \"exec\" \"e\" {\n  command = [var.x]\n}\n",
	}
	rb, diags := load(t, files, runbooks.Options{})
	if !diags.HasErrors() || !strings.Contains(diags.Err().Error(), "group.a -> group.b -> group.a") {
		t.Fatalf("diags = %v, want the cycle named", diags.Err())
	}
	for _, s := range rb.AllSteps() {
		s.Config.Evaluate(map[phases.Address]cty.Value{}) // must return
	}
}

// A provider block configured from a group's output waits for the steps
// the output reads, and sees the output once they ran.
func TestProviderFromGroupOutput(t *testing.T) {
	files := map[string]string{
		"main.hcl": `provider "local" "main" {
  dir = group.g.dir
}
provider "local" "other" {}
phase "p" {
  group "g" {
    source    = "./g"
    providers = { local = local.other }
  }
  step "exec" "s" {
    provider = local.main
    command  = ["true"]
  }
}
`,
		"g/x.hcl": "step \"exec\" \"e\" {\n  command = [\"true\"]\n}\noutput \"dir\" {\n  value = \"/srv/${exec.e.exit_code}\"\n}\n",
	}
	schemas := testSchemas()
	local := schemas["local"]
	local.Provider.Attributes = map[string]phases.Attribute{"dir": {Type: cty.String}}
	schemas["local"] = local
	rb := mustLoad(t, files, runbooks.Options{Schemas: schemas})
	var p *phases.ProviderConfig
	for _, pc := range rb.Providers {
		if pc.Name == "main" {
			p = pc
		}
	}
	if p == nil || !slices.Equal(p.DependsOn, []phases.Address{{Group: "g", Type: "exec", Name: "e"}}) {
		t.Fatalf("provider = %+v, want it to depend on group.g.exec.e", p)
	}
	v, diags := p.Config.Evaluate(map[phases.Address]cty.Value{{Group: "g", Type: "exec", Name: "e"}: cty.ObjectVal(map[string]cty.Value{"exit_code": cty.NumberIntVal(0)})})
	if diags.HasErrors() || v.GetAttr("dir").AsString() != "/srv/0" {
		t.Fatalf("dir = %#v, %v", v, diags.Err())
	}
}

// discards = [group.NAME] stands for every step of the call.
func TestDiscardsAGroup(t *testing.T) {
	files := map[string]string{
		"main.hcl": "phase \"p\" {\n  group \"g\" {\n    source = \"./g\"\n  }\n  step \"exec\" \"vm_deleted\" {\n    command    = [\"true\"]\n    depends_on = [group.g]\n    discards   = [group.g]\n  }\n}\n",
		"g/x.hcl":  "step \"exec\" \"a\" {\n  command = [\"true\"]\n}\nstep \"exec\" \"b\" {\n  command = [\"true\"]\n}\n",
	}
	rb := mustLoad(t, files, runbooks.Options{})
	want := []phases.Address{{Group: "g", Type: "exec", Name: "a"}, {Group: "g", Type: "exec", Name: "b"}}
	if got := step(t, rb, "exec.vm_deleted").Discards; !slices.Equal(got, want) {
		t.Errorf("discards = %v, want %v", got, want)
	}
	files["main.hcl"] = strings.Replace(files["main.hcl"], "discards   = [group.g]", "discards   = [group.h]", 1)
	if _, diags := load(t, files, runbooks.Options{}); !diags.HasErrors() || !strings.Contains(diags.Err().Error(), `No phase calls a group named "h"`) {
		t.Errorf("discards of an undeclared group: %v", diags.Err())
	}
}
