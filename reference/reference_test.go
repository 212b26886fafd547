package reference

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"
	"unicode"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/runbooks"
)

// schemas are two small providers: a step type with every kind of
// attribute, a check-only type without a rollback text.
var schemas = map[string]phases.Schema{
	"zeta": {StepTypes: map[string]phases.StepType{
		"zeta_probe": {Description: "Probes <things>.", CheckOnly: true},
	}},
	"alpha": {
		Provider: phases.Block{Attributes: map[string]phases.Attribute{
			"endpoint": {Type: cty.String, Required: true, Description: "Where | it listens."},
		}},
		StepTypes: map[string]phases.StepType{
			"alpha_thing": {
				Description: "Makes a thing (pending-* ones too).",
				Rollback:    "Deletes the thing.",
				CanCheck:    true,
				WaitsOnly:   true,
				Attributes: map[string]phases.Attribute{
					"token": {Type: cty.String, Sensitive: true, Required: true, Description: "The token."},
					"tags":  {Type: cty.Map(cty.String)},
					"spec":  {Type: cty.ObjectWithOptionalAttrs(map[string]cty.Type{"a": cty.Number, "b": cty.List(cty.Bool)}, []string{"b"})},
					"any":   {Type: cty.DynamicPseudoType},
				},
				Outputs: map[string]cty.Type{"id": cty.String, "size": cty.Number},
			},
		},
	},
}

func TestWrite(t *testing.T) {
	var a, b bytes.Buffer
	if err := Write(&a, schemas); err != nil {
		t.Fatal(err)
	}
	if err := Write(&b, schemas); err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() {
		t.Fatal("two runs gave different references: map order leaks into the output")
	}
	got := a.String()
	for _, want := range []string{
		"| [`alpha_thing`](#alpha_thing) | step or check | Deletes the thing. |",
		"| [`zeta_probe`](#zeta_probe) | check only | not documented. |",
		"| `token` | `string` | required, **sensitive** | The token. |",
		"| `tags` | `map(string)` | optional |  |",
		"| `spec` | `object({a = number, b = optional(list(bool))})` | optional |",
		"| `any` | `any` | optional |",
		"| `endpoint` | `string` | required | Where \\| it listens. |",
		"- Outputs, as `alpha_thing.NAME.OUTPUT`: `id` (string), `size` (number).",
		"Makes a thing (pending-\\* ones too).",
		"Probes &lt;things>.",
		"- Rollback: Deletes the thing.\n- Ctrl-C: it only waits, so the first Ctrl-C ends it at once; it is recorded as not done, and the next run does it again.\n\n",
		"- Rollback: not documented.\n\nNo attributes.",
		"### Meta-arguments of `step` and `check`",
		"#### `retry`",
		"run `migrate docs`",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the reference lacks %q:\n%s", want, got)
		}
	}
	if strings.Index(got, "## The `alpha` provider") > strings.Index(got, "## The `zeta` provider") {
		t.Error("providers are not sorted by name")
	}
	if strings.Index(got, "| `any` |") > strings.Index(got, "| `token` |") {
		t.Error("attributes are not sorted by name")
	}
}

// TestLanguageIsTheLoaders: a runbook using every attribute and block the
// reference documents loads without a diagnostic, so the reference names
// nothing the loader would refuse.
func TestLanguageIsTheLoaders(t *testing.T) {
	const text = `
variable "v" {
  type        = string
  default     = "x"
  description = "d"
  sensitive   = false
  validation {
    condition     = length(var.v) > 0
    error_message = "empty"
  }
}
locals { l = var.v }
backend "etcd" {
  endpoints = ["127.0.0.1:2379"]
  prefix    = "migrate/${local.l}/"
  ca        = "ca.pem"
  cert      = "client.pem"
  key       = "client-key.pem"
  username  = "migrate"
  password  = "p"
  lock_ttl  = "30s"
  insecure  = false
}
provider "alpha" "main" { endpoint = local.l }
phase "one" {
  description = "first"
  step "alpha_thing" "a" {
    token = "t"
    timeout = "1m"
  }
}
phase "two" {
  after = [phase.one]
  check "alpha_thing" "c" {
    token      = "t"
    provider   = alpha.main
    depends_on = [alpha_thing.a]
    when       = "before"
    timeout    = "1m"
    retry {
      attempts = 2
      backoff  = "2s"
    }
  }
  step "alpha_thing" "gone" {
    token    = "t"
    discards = [alpha_thing.a]
  }
  check "alpha_thing" "up" { token = "t" }
  step "alpha_thing" "each" {
    for_each = toset(["x", "y"])
    token    = each.key
  }
  group "g" {
    source     = "./g"
    for_each   = toset(["k"])
    depends_on = [alpha_thing.gone]
    providers  = { alpha = alpha.main }
    token      = each.key
  }
}
moved {
  from = alpha_thing.old
  to   = alpha_thing.gone
}
removed {
  from   = alpha_thing.deleted
  revert = false
}
service "s" {
  stop         = [alpha_thing.a]
  serving      = alpha_thing.up
  max_downtime = "5m"
}
`
	for _, blk := range language {
		for _, name := range names(blk) {
			if !strings.Contains(text, name) {
				t.Errorf("the test runbook does not use %q, which the reference documents: add it", name)
			}
		}
	}
	group := "variable \"token\" {}\nstep \"alpha_thing\" \"in\" { token = var.token }\noutput \"o\" { value = var.token }\n"
	ld := runbooks.NewLoader(fstest.MapFS{"main.hcl": {Data: []byte(text)}, "g/main.hcl": {Data: []byte(group)}}, runbooks.Options{Dir: "/rb", Schemas: schemas})
	if _, diags := ld.Load(); len(diags) > 0 {
		t.Fatalf("diagnostics: %v", diags)
	}
}

// names lists the attributes and nested blocks of blk.
func names(blk block) []string {
	var out []string
	for n := range blk.attrs {
		out = append(out, n)
	}
	for _, n := range blk.nested {
		out = append(out, n.header)
		out = append(out, names(n)...)
	}
	return out
}

// TestLinksLeadToHeadings: every #anchor of the reference is the slug
// GitHub gives one of its headings.
func TestLinksLeadToHeadings(t *testing.T) {
	var b bytes.Buffer
	if err := Write(&b, schemas); err != nil {
		t.Fatal(err)
	}
	slugs := map[string]bool{}
	for _, line := range strings.Split(b.String(), "\n") {
		if h, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " "); ok && strings.HasPrefix(line, "#") {
			slugs[slug(h)] = true
		}
	}
	links := regexp.MustCompile(`\]\(#([^)]+)\)`).FindAllStringSubmatch(b.String(), -1)
	if len(links) == 0 {
		t.Fatal("no #anchor link found")
	}
	for _, m := range links {
		if !slugs[m[1]] {
			t.Errorf("#%s leads to no heading (headings: %v)", m[1], slugs)
		}
	}
}

// slug is GitHub's anchor of a heading: lower case, punctuation but - and
// _ dropped, spaces as -.
func slug(h string) string {
	var out strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			out.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			out.WriteRune(r)
		}
	}
	return out.String()
}

func TestWriteEvents(t *testing.T) {
	var b bytes.Buffer
	fields := []Field{{"kind", "What happened."}, {"error", "What | went wrong."}}
	events := []Event{{Kind: "step_failed", Says: "A step failed.", Fields: []string{"address", "error"}}, {Kind: "phase_started", Says: "A phase starts."}}
	if err := WriteEvents(&b, fields, events); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{
		"\n## The `--json` events\n",
		"| `error` | What \\| went wrong. |",
		"| `step_failed` | A step failed. | `address`, `error` |",
		"| `phase_started` | A phase starts. |  |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the events reference lacks %q:\n%s", want, got)
		}
	}
}
