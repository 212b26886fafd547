package runbooks_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/runbooks"
)

// load loads files given as name -> content with the test schemas.
func load(t *testing.T, files map[string]string, opts runbooks.Options) (*phases.Runbook, phases.Diagnostics) {
	t.Helper()
	fsys := fstest.MapFS{}
	for name, src := range files {
		fsys[name] = &fstest.MapFile{Data: []byte(src)}
	}
	if opts.Schemas == nil {
		opts.Schemas = testSchemas()
	}
	if opts.Dir == "" {
		opts.Dir = "/runbook"
	}
	return runbooks.NewLoader(fsys, opts).Load()
}

func mustLoad(t *testing.T, files map[string]string, opts runbooks.Options) *phases.Runbook {
	t.Helper()
	rb, diags := load(t, files, opts)
	if diags.HasErrors() {
		t.Fatalf("unexpected errors: %s", diags.Err())
	}
	return rb
}

func step(t *testing.T, rb *phases.Runbook, addr string) *phases.Step {
	t.Helper()
	for _, s := range rb.AllSteps() {
		if s.Addr.String() == addr {
			return s
		}
	}
	t.Fatalf("no step %s", addr)
	return nil
}

func eval(t *testing.T, s *phases.Step, outputs map[phases.Address]cty.Value) cty.Value {
	t.Helper()
	v, diags := s.Config.Evaluate(outputs)
	if diags.HasErrors() {
		t.Fatalf("%s: %v", s.Addr, diags.Err())
	}
	return v
}

const outputsRunbook = `
provider "talos" "node" {
  version = "v1.13.3"
}

phase "platform" {
  step "talos_kubeconfig" "main" {
    provider = talos.node
  }
}

phase "apps" {
  step "exec" "deploy" {
    command = ["kubectl", "--kubeconfig", talos_kubeconfig.main.path, "apply"]
    env     = { KUBECONFIG = upper(talos_kubeconfig.main.path) }
  }
  step "exec" "after" {
    command    = ["echo", "deploy exited ${exec.deploy.exit_code}"]
    depends_on = [talos_kubeconfig.main, exec.deploy]
    timeout    = "90s"
    retry {
      attempts = 4
    }
  }
}
`

func TestOutputsFlow(t *testing.T) {
	t.Parallel()
	rb := mustLoad(t, map[string]string{"main.hcl": outputsRunbook}, runbooks.Options{})
	kc := phases.Address{Type: "talos_kubeconfig", Name: "main"}
	deploy := step(t, rb, "exec.deploy")

	if got := deploy.DependsOn; !slices.Equal(got, []phases.Address{kc}) {
		t.Errorf("exec.deploy DependsOn = %v", got)
	}
	after := step(t, rb, "exec.after")
	if got, want := after.DependsOn, []phases.Address{{Type: "exec", Name: "deploy"}, kc}; !slices.Equal(got, want) {
		t.Errorf("exec.after DependsOn = %v, want %v", got, want)
	}
	if after.Timeout != 90*time.Second || after.Retry != (phases.RetryPolicy{Attempts: 4, Backoff: time.Second}) {
		t.Errorf("exec.after timeout %v retry %+v", after.Timeout, after.Retry)
	}
	if deploy.Retry != (phases.RetryPolicy{Attempts: 1, Backoff: time.Second}) || deploy.Timeout != 0 {
		t.Errorf("exec.deploy defaults: timeout %v retry %+v", deploy.Timeout, deploy.Retry)
	}
	if deploy.Phase != "apps" || deploy.Provider != "local.default" {
		t.Errorf("exec.deploy phase %q provider %q", deploy.Phase, deploy.Provider)
	}
	if p := step(t, rb, "talos_kubeconfig.main").Provider; p != "talos.node" {
		t.Errorf("talos step provider %q", p)
	}
	if got := rb.Phase("apps").After; !slices.Equal(got, []string{"platform"}) {
		t.Errorf("apps.After = %q", got)
	}
	if got := rb.Phase("platform").After; len(got) != 0 {
		t.Errorf("platform.After = %q", got)
	}
	var keys []string
	for _, p := range rb.Providers {
		keys = append(keys, p.Key())
	}
	if !slices.Equal(keys, []string{"talos.node", "local.default"}) {
		t.Errorf("providers %q", keys)
	}

	// Plan time: nothing ran yet, so the path is unknown, without error.
	v := eval(t, deploy, nil)
	cmd := v.GetAttr("command")
	if cmd.IsWhollyKnown() || !cmd.Index(cty.NumberIntVal(2)).Type().Equals(cty.String) {
		t.Errorf("plan-time command = %#v, want an unknown string at index 2", cmd)
	}
	if !cmd.Index(cty.NumberIntVal(0)).RawEquals(cty.StringVal("kubectl")) {
		t.Errorf("known parts must stay known: %#v", cmd)
	}

	// Run time: the output flows in.
	outputs := map[phases.Address]cty.Value{
		kc: cty.ObjectVal(map[string]cty.Value{"path": cty.StringVal("/tmp/kc")}),
	}
	v = eval(t, deploy, outputs)
	want := cty.ListVal([]cty.Value{cty.StringVal("kubectl"), cty.StringVal("--kubeconfig"), cty.StringVal("/tmp/kc"), cty.StringVal("apply")})
	if !v.GetAttr("command").RawEquals(want) {
		t.Errorf("command = %#v", v.GetAttr("command"))
	}
	if got := v.GetAttr("env").Index(cty.StringVal("KUBECONFIG")); !got.RawEquals(cty.StringVal("/TMP/KC")) {
		t.Errorf("env = %#v", got)
	}
	if !v.GetAttr("dir").IsNull() {
		t.Errorf("unset attributes are null, got %#v", v.GetAttr("dir"))
	}

	outputs[phases.Address{Type: "exec", Name: "deploy"}] = cty.ObjectVal(map[string]cty.Value{"exit_code": cty.NumberIntVal(0)})
	v = eval(t, after, outputs)
	if got := v.GetAttr("command").Index(cty.NumberIntVal(1)); !got.RawEquals(cty.StringVal("deploy exited 0")) {
		t.Errorf("command[1] = %#v", got)
	}

	// An explicit DynamicVal (how the engine may mark "not run") works too.
	outputs[kc] = cty.DynamicVal
	if v := eval(t, deploy, outputs); v.GetAttr("command").IsWhollyKnown() {
		t.Error("DynamicVal output should give an unknown command")
	}
}

func TestVariablePrecedence(t *testing.T) {
	t.Parallel()
	src := `
variable "name" {
  default = "default"
}
variable "count" {
  type    = number
  default = 1
}
variable "tags" {
  type    = list(string)
  default = []
}
phase "p" {
  step "exec" "x" {
    command = concat([var.name, tostring(var.count + 1)], var.tags)
  }
}
`
	dir := t.TempDir()
	file1 := filepath.Join(dir, "one.hcl")
	file2 := filepath.Join(dir, "two.json")
	if err := os.WriteFile(file1, []byte("name = \"file1\"\ncount = 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file2, []byte(`{"name": "file2", "tags": ["a", "b"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		opts runbooks.Options
		want []string
	}{
		{"defaults", runbooks.Options{}, []string{"default", "2"}},
		{"env", runbooks.Options{Environ: []string{"MIGRATE_VAR_name=env", "MIGRATE_VAR_count=41", "OTHER=x"}}, []string{"env", "42"}},
		{"env list parsed as HCL", runbooks.Options{Environ: []string{`MIGRATE_VAR_tags=["x"]`}}, []string{"default", "2", "x"}},
		{"var-file beats env", runbooks.Options{
			Environ:  []string{"MIGRATE_VAR_name=env"},
			VarFiles: []string{file1},
		}, []string{"file1", "6"}},
		{"later var-file wins", runbooks.Options{VarFiles: []string{file1, file2}}, []string{"file2", "6", "a", "b"}},
		{"var beats everything", runbooks.Options{
			Environ:  []string{"MIGRATE_VAR_name=env"},
			VarFiles: []string{file1},
			Vars:     []string{"name=first", "name=cli=with=equals", `tags=["t"]`},
		}, []string{"cli=with=equals", "6", "t"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rb := mustLoad(t, map[string]string{"main.hcl": src}, tc.opts)
			v := eval(t, step(t, rb, "exec.x"), nil)
			var got []string
			for _, e := range v.GetAttr("command").AsValueSlice() {
				got = append(got, e.AsString())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("command = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestVariableErrors(t *testing.T) {
	t.Parallel()
	src := `
variable "needed" {}
variable "port" {
  type = number
  validation {
    condition     = var.port > 1024
    error_message = "Use an unprivileged port."
  }
}
phase "p" {}
`
	_, diags := load(t, map[string]string{"main.hcl": src}, runbooks.Options{
		Vars:    []string{"port=80", "nope=1", "novalue"},
		Environ: []string{"MIGRATE_VAR_undeclared=ignored"},
	})
	got := map[string]string{}
	for _, d := range diags {
		got[d.Summary] += d.Detail
	}
	if d := got["Missing Required Variable"]; !strings.Contains(d, "--var needed=VALUE") || !strings.Contains(d, "MIGRATE_VAR_needed") {
		t.Errorf("missing variable detail should say how to set it: %q", d)
	}
	if d := got["Invalid Value for Variable"]; !strings.Contains(d, "Use an unprivileged port.") {
		t.Errorf("validation message missing: %q", d)
	}
	if _, ok := got["Value for Undeclared Variable"]; !ok {
		t.Error("--var nope=1 should be reported")
	}
	if _, ok := got["Invalid --var Option"]; !ok {
		t.Error("--var novalue should be reported")
	}
	if len(diags) != 4 {
		t.Errorf("want 4 diagnostics, got %d: %s", len(diags), diags.Err())
	}
}

func TestSensitive(t *testing.T) {
	t.Parallel()
	src := `
variable "token" {
  sensitive = true
}
locals {
  header = "Bearer ${var.token}"
}
provider "talos" "node" {
  version = "v1.13.3"
  token   = "plain"
}
phase "p" {
  step "exec" "x" {
    command = ["curl", "-H", local.header, "https://example.com"]
    env     = { LENGTH = tostring(length(var.token)) }
  }
  check "http_check" "h" {
    url     = "https://example.com"
    headers = { X = "not secret in itself" }
  }
}
`
	rb := mustLoad(t, map[string]string{"main.hcl": src}, runbooks.Options{Vars: []string{"token=s3cr3t"}})
	v := eval(t, step(t, rb, "exec.x"), nil)
	cmd := v.GetAttr("command")
	if !cmd.Index(cty.NumberIntVal(2)).HasMark(phases.SensitiveMark) && !cmd.HasMark(phases.SensitiveMark) {
		t.Errorf("a value computed from a sensitive variable must be marked: %#v", cmd)
	}
	if !v.GetAttr("env").Index(cty.StringVal("LENGTH")).HasMark(phases.SensitiveMark) && !v.GetAttr("env").HasMark(phases.SensitiveMark) {
		t.Errorf("function results keep the mark: %#v", v.GetAttr("env"))
	}
	plain, _ := cmd.UnmarkDeep()
	if got := plain.Index(cty.NumberIntVal(2)).AsString(); got != "Bearer s3cr3t" {
		t.Errorf("value = %q", got)
	}
	if cmd.Index(cty.NumberIntVal(0)).HasMark(phases.SensitiveMark) {
		t.Error("unrelated elements must not be marked")
	}

	h := eval(t, step(t, rb, "http_check.h"), nil)
	if !h.GetAttr("headers").HasMark(phases.SensitiveMark) || h.GetAttr("url").HasMark(phases.SensitiveMark) {
		t.Errorf("sensitive attribute marks: %#v", h)
	}
	if !h.GetAttr("headers").IsNull() && !step(t, rb, "http_check.h").IsCheck() {
		t.Error("http_check.h should be a check")
	}

	if len(rb.Secrets) != 1 || rb.Secrets[0] != "s3cr3t" {
		t.Errorf("Runbook.Secrets = %q, want the plain value of var.token for redaction", rb.Secrets)
	}

	pv, diags := rb.Providers[0].Config.Evaluate(nil)
	if diags.HasErrors() {
		t.Fatal(diags.Err())
	}
	if !pv.GetAttr("token").HasMark(phases.SensitiveMark) {
		t.Errorf("provider sensitive attribute not marked: %#v", pv)
	}
}

func TestFunctions(t *testing.T) {
	t.Parallel()
	files := map[string]string{
		"main.hcl": `
locals {
  data = yamldecode(file("values.yaml"))
}
phase "p" {
  step "exec" "x" {
    command = [
      file("files/hello.txt"),
      templatefile("files/greet.tmpl", { name = "ann", items = ["a", "b"] }),
      yamlencode({ replicas = local.data.replicas + 1 }),
      jsonencode({ a = [1, 2], b = "x" }),
      env("MIGRATE_TEST_HOME"),
      env("MIGRATE_TEST_UNSET"),
      abspath("files/hello.txt"),
      upper(join("-", split(",", "a,b"))),
      format("%s=%d", "n", max(1, 5)),
      replace("a.b.c", "/[.]/", "_"),
      sha256("x"),
      base64decode(base64encode("round trip")),
      tostring(length(merge({ a = 1 }, { b = 2 }))),
      tostring(fileexists("files/hello.txt")),
    ]
  }
}
`,
		"values.yaml":      "replicas: 2\n",
		"files/hello.txt":  "hello\n",
		"files/greet.tmpl": "hi ${name}:%{ for i in items } ${i}%{ endfor }",
	}
	rb := mustLoad(t, files, runbooks.Options{Dir: "/srv/runbook", Environ: []string{"MIGRATE_TEST_HOME=/home/ann"}})
	v := eval(t, step(t, rb, "exec.x"), nil)
	var got []string
	for _, e := range v.GetAttr("command").AsValueSlice() {
		got = append(got, e.AsString())
	}
	want := []string{
		"hello\n",
		"hi ann: a b",
		"\"replicas\": 3\n",
		`{"a":[1,2],"b":"x"}`,
		"/home/ann",
		"",
		filepath.Join("/srv/runbook", "files/hello.txt"),
		"A-B",
		"n=5",
		"a_b_c",
		"2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881",
		"round trip",
		"2",
		"true",
	}
	if !slices.Equal(got, want) {
		t.Errorf("functions:\n got %q\nwant %q", got, want)
	}
}

func TestFunctionErrors(t *testing.T) {
	t.Parallel()
	_, diags := load(t, map[string]string{"main.hcl": `
phase "p" {
  step "exec" "x" {
    command = [file("missing.txt")]
  }
  step "exec" "y" {
    command = [templatefile("t.tmpl", {})]
  }
}
`, "t.tmpl": "${nope}"}, runbooks.Options{})
	if len(diags) != 2 {
		t.Fatalf("want 2 diagnostics, got %s", diags.Err())
	}
	for i, summary := range []string{"Error in function call", "Invalid function argument"} {
		if d := diags[i]; d.Subject == nil || d.Summary != summary {
			t.Errorf("diagnostic %q (%s) should be %q with a subject", d.Summary, d.Detail, summary)
		}
	}
	if !strings.Contains(diags[0].Detail, "missing.txt") || !strings.Contains(diags[1].Detail, `"nope"`) {
		t.Errorf("details: %q / %q", diags[0].Detail, diags[1].Detail)
	}
}

func TestPhaseOrderAndChecks(t *testing.T) {
	t.Parallel()
	rb := mustLoad(t, map[string]string{
		"a.hcl": `
phase "one" {
  check "http_check" "pre" {
    url  = "http://x"
    when = "before"
  }
  step "wait" "w" {
    duration = "0s"
  }
  check "http_check" "post" {
    url        = "http://x"
    depends_on = [wait.w]
  }
}
`,
		"b.hcl": `
phase "two" {}
phase "three" {
  after = [phase.one]
}
`,
	}, runbooks.Options{})
	var names []string
	for _, p := range rb.Phases {
		names = append(names, p.Name+"<"+strings.Join(p.After, ","))
	}
	if want := []string{"one<", "two<one", "three<one"}; !slices.Equal(names, want) {
		t.Errorf("phases %q, want %q (files in name order, after defaults to the previous phase)", names, want)
	}
	one := rb.Phase("one")
	if len(one.Steps) != 1 || len(one.Checks) != 2 {
		t.Fatalf("phase one: %d steps, %d checks", len(one.Steps), len(one.Checks))
	}
	if one.Checks[0].When != phases.CheckBefore || one.Checks[1].When != phases.CheckAfter || one.Steps[0].When != "" {
		t.Errorf("when: %q %q %q", one.Checks[0].When, one.Checks[1].When, one.Steps[0].When)
	}
	if r := one.Checks[1].Range; r.Filename != "a.hcl" || r.StartLine != 10 {
		t.Errorf("range %+v", r)
	}
	if r := one.Range; r.Filename != "a.hcl" || r.StartLine != 2 {
		t.Errorf("phase range %+v", r)
	}
}

func TestShadowedMetaArgument(t *testing.T) {
	t.Parallel()
	rb := mustLoad(t, map[string]string{"main.hcl": `
phase "p" {
  check "http_check" "h" {
    url     = "http://x"
    timeout = "3m"
  }
}
`}, runbooks.Options{})
	s := step(t, rb, "http_check.h")
	if s.Timeout != 0 {
		t.Errorf("http_check's own timeout must not become the step timeout, got %v", s.Timeout)
	}
	if got := eval(t, s, nil).GetAttr("timeout"); !got.RawEquals(cty.StringVal("3m")) {
		t.Errorf("timeout attribute = %#v", got)
	}
}

func TestFilesForDiagnostics(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{"main.hcl": {Data: []byte("phase \"p\" {\n  step \"exec\" \"x\" {}\n}\n")}}
	l := runbooks.NewLoader(fsys, runbooks.Options{Schemas: testSchemas(), Vars: []string{"x=1"}})
	_, diags := l.Load()
	if !diags.HasErrors() {
		t.Fatal("want errors")
	}
	if _, ok := l.Files()["main.hcl"]; !ok {
		t.Errorf("Files() = %v", l.Files())
	}
	out := render(l, diags)
	if !strings.Contains(out, `step "exec" "x" {}`) || !strings.Contains(out, "on main.hcl line 2") {
		t.Errorf("rendered diagnostics lack a snippet:\n%s", out)
	}
}

func TestNoFiles(t *testing.T) {
	t.Parallel()
	_, diags := load(t, map[string]string{"README.md": "x"}, runbooks.Options{})
	if len(diags) != 1 || diags[0].Summary != "No Runbook Files" {
		t.Errorf("got %v", diags)
	}
}

// For a command that needs only the runbook's shape, a variable given no
// value is unknown, not a mistake.
func TestUnsetVarsUnknown(t *testing.T) {
	files := map[string]string{"main.hcl": `
variable "needed" {}
phase "a" {
  step "exec" "x" { command = ["echo", var.needed] }
}
`}
	if _, diags := load(t, files, runbooks.Options{}); !diags.HasErrors() {
		t.Fatal("a variable without a value is not reported")
	}
	rb, diags := load(t, files, runbooks.Options{UnsetVarsUnknown: true})
	if diags.HasErrors() || len(rb.Phases) != 1 {
		t.Fatalf("with UnsetVarsUnknown: %v", diags)
	}
}

// TestDiscards: a step's discards become Step.Discards, sorted, whether
// the discarded steps are its dependencies or steps of an earlier phase.
func TestDiscards(t *testing.T) {
	t.Parallel()
	rb := mustLoad(t, map[string]string{"main.hcl": `
phase "one" {
  step "exec" "iso" {
    command = ["true"]
  }
}
phase "two" {
  step "exec" "vm" {
    command = ["true"]
  }
  step "exec" "job" {
    command = ["echo", exec.vm.exit_code]
  }
  step "exec" "delete" {
    command    = ["true"]
    depends_on = [exec.job]
    discards   = [exec.job, exec.vm, exec.iso]
  }
}
`}, runbooks.Options{})
	var got []string
	for _, a := range step(t, rb, "exec.delete").Discards {
		got = append(got, a.String())
	}
	if want := []string{"exec.iso", "exec.job", "exec.vm"}; !slices.Equal(got, want) {
		t.Errorf("Discards = %q, want %q", got, want)
	}
	if d := step(t, rb, "exec.job").Discards; d != nil {
		t.Errorf("a step without discards has %v", d)
	}
}

// TestStepTypeOfTwoProviders: a step type two providers offer is a load
// error naming both, whether or not the runbook uses it.
func TestStepTypeOfTwoProviders(t *testing.T) {
	t.Parallel()
	schemas := testSchemas()
	schemas["other"] = phases.Schema{StepTypes: map[string]phases.StepType{
		"wait": {Attributes: map[string]phases.Attribute{"duration": {Type: cty.String, Required: true}}},
	}}
	for name, src := range map[string]string{
		"used":   "phase \"p\" {\n  step \"wait\" \"w\" { duration = \"0s\" }\n}\n",
		"unused": "phase \"p\" {\n  step \"exec\" \"x\" { command = [\"true\"] }\n}\n",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, diags := load(t, map[string]string{"main.hcl": src}, runbooks.Options{Schemas: schemas})
			var found []string
			for _, d := range diags {
				if d.Summary == "Step Type Of Two Providers" {
					found = append(found, d.Detail)
				}
			}
			if len(found) != 1 || !strings.Contains(found[0], `"wait"`) || !strings.Contains(found[0], `"local"`) || !strings.Contains(found[0], `"other"`) {
				t.Errorf("diagnostics %v, want one naming wait, local and other", diags)
			}
		})
	}
}

// expectDiag fails t unless diags hold a diagnostic with summary whose
// subject starts at line (FILE:LINE) and whose detail says each of
// detail.
func expectDiag(t *testing.T, diags phases.Diagnostics, summary, line string, detail ...string) {
	t.Helper()
	var found *phases.Diagnostic
	for i := range diags {
		if diags[i].Summary == summary {
			found = &diags[i]
		}
	}
	if found == nil {
		t.Fatalf("no %q among %v", summary, diags.Err())
	}
	if found.Subject == nil || !strings.HasPrefix(found.Subject.String(), line) {
		t.Errorf("subject = %v, want %s", found.Subject, line)
	}
	for _, want := range detail {
		if !strings.Contains(found.Detail, want) {
			t.Errorf("detail %q does not say %q", found.Detail, want)
		}
	}
}
