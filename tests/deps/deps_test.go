package deps

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/homelab-migrate/migrate/"

// rule says what the packages matching pkg may import of ours (may), and
// what they may never depend on, directly or not (never). Patterns are
// paths inside the module ("phases"), with "..." for a subtree, "*" for
// one element, and "{X}" for the element of pkg matched by {X}; never
// also takes other modules' paths. The first rule that matches wins;
// every package of ours must match one.
type rule struct {
	pkg   string
	may   []string
	never []string
	why   string
}

var hcl = "github.com/hashicorp/hcl/v2/..."

var rules = []rule{
	{pkg: "phases", may: []string{"graph"}, why: "the vocabulary every layer shares, and the phases' order (a graph): nothing else of ours"},
	{pkg: "graph", why: "directed graphs (order, cycles) for phases and steps: it imports nothing of ours"},
	{pkg: "secret", may: []string{"phases"}, why: "scrubbing is below every layer that logs"},
	{pkg: "secret/agefile", why: "age files beside a runbook: below every layer that reads them"},
	{pkg: "secret/edit", may: []string{"secret/agefile", "state"}, why: "edits sealed files ($EDITOR on a private clear copy) and writes them as the state writes its files: no view, no CLI"},
	{pkg: "state", may: []string{"phases", "secret"}, why: "state stores what the engine gives it: no provider, no engine"},
	{pkg: "state/etcdstate", may: []string{"phases", "state"}, why: "a state backend: the state model, no engine"},
	{pkg: "state/etcdstate/etcdtest", may: []string{"state/etcdstate"}, why: "starts real etcd for tests"},
	{pkg: "state/backend", may: []string{"phases", "state", "state/etcdstate"}, never: []string{hcl},
		why: "chooses and opens a state backend (local or etcd) and locks it late: the state model and its backends, no engine, no view, no HCL"},
	{pkg: "state/statetest", may: []string{"phases", "state"}, why: "the conformance suite of every state backend"},
	{pkg: "versions", why: "versions as packages and image tags write them: plain text, below every layer that reads one"},
	{pkg: "runbooks", may: []string{"graph", "phases", "secret/...", "versions"}, why: "the loader turns HCL into phases values"},
	{pkg: "engine", may: []string{"graph", "phases", "providers", "secret", "state"}, never: []string{hcl},
		why: "the engine knows providers by their interface only, and runbooks only as phases values (HCL belongs to runbooks)"},
	{pkg: "views", may: []string{"engine", "inventory", "phases", "providers", "secret", "state"}, why: "views render what the engine and state say (and what migrate init read)"},
	{pkg: "inventory/sqlitefile", why: "reads SQLite database files (copies pulled from a VM) by the file format: it imports nothing of ours"},
	{pkg: "inventory/inventorytest", may: []string{"examples/homelab", "inventory", "phases", "providers/..."}, why: "what inventory's and scaffold's tests share: the providers' schemas and examples/homelab loaded as migrate init loads it"},
	{pkg: "inventory", may: []string{"inventory/sqlitefile", "phases", "providers/incus/incusapi", "runbooks", "versions"}, why: "reads an Incus host through the typed client, and migrate init's template through the runbook loader: no engine, no provider"},
	{pkg: "scaffold", may: []string{"inventory", "phases", "secret/agefile", "versions"}, why: "writes a new runbook from the template inventory loaded and what it chose"},
	{pkg: "reference", may: []string{"phases"}, why: "the reference is written from schemas, not from providers"},
	{pkg: "examples", why: "the example runbooks, embedded for migrate-lab demo: it imports nothing of ours"},
	{pkg: "examples/homelab", why: "the homelab runbook without its secrets, migrate init's template: it imports nothing of ours"},

	{pkg: "providers", may: []string{"phases"}, why: "the interface every provider implements"},
	{pkg: "providers/sdk/...", may: []string{"phases", "providers", "providers/sdk/...", "secret"}, why: "the skeleton below every provider"},
	{pkg: "providers/plugin", may: []string{"phases", "providers", "providers/*/*schema", "secret"}, why: "a transport: it knows the interface and the compiled-in schemas, no provider; it scrubs a program's stderr"},
	{pkg: "providers/fake", may: []string{"phases", "providers"}, why: "a test provider"},
	{pkg: "providers/providertest", may: []string{"phases", "providers", "providers/sdk"}, why: "the conformance suite of every provider (and the check of a generated schema, encoded by the SDK)"},
	{pkg: "providers/internal/genschema", may: []string{"phases", "providers/helm", "providers/sdk", "providers/talos"},
		why: "go generate: writes the plugin providers' derived schemas, which migrate compiles in"},
	{pkg: "providers/{X}/...", may: []string{"phases", "providers", "providers/sdk/...", "providers/{X}/...", "secret/..."},
		why: "providers never import each other: only the SDK, secret and their own subpackages"},

	{pkg: "lab/...", may: []string{"..."}, never: []string{"cmd/..."}, why: "the lab is a test fixture, not a part of the CLI"},
	{pkg: "bench/...", may: []string{"..."}, never: []string{"cmd/..."}, why: "benchmarks measure the packages, not the CLI"},
	{pkg: "tests/...", may: []string{"..."}, why: "tests may use anything"},
	{pkg: "cmd/migrate", may: []string{"..."}, never: []string{"lab/...", "examples"},
		why: "the product carries no test fixture: the lab and the demo's examples (with their secrets) are migrate-lab's; migrate init's template, examples/homelab without secrets, is the product's"},
	{pkg: "cmd/...", may: []string{"..."}, why: "the programs put everything together"},
}

// match reports whether p (a path inside the module, or another
// module's path) matches pattern, binding or using {X} in vars.
func match(pattern, p string, vars map[string]string) bool {
	for k, v := range vars {
		pattern = strings.ReplaceAll(pattern, "{"+k+"}", v)
	}
	if rest, ok := strings.CutSuffix(pattern, "/..."); ok || pattern == "..." {
		if pattern == "..." {
			return true
		}
		return p == rest || strings.HasPrefix(p, rest+"/") || matchElems(rest, p, vars, true)
	}
	return matchElems(pattern, p, vars, false)
}

// matchElems matches element by element ("*", "{X}"); with prefix, p
// may go on below the pattern.
func matchElems(pattern, p string, vars map[string]string, prefix bool) bool {
	pe, e := strings.Split(pattern, "/"), strings.Split(p, "/")
	if len(e) < len(pe) || (!prefix && len(e) != len(pe)) {
		return false
	}
	bound := map[string]string{}
	for i, x := range pe {
		if name, ok := strings.CutPrefix(x, "{"); ok && strings.HasSuffix(name, "}") {
			bound[strings.TrimSuffix(name, "}")] = e[i]
			continue
		}
		if ok, _ := path.Match(x, e[i]); !ok {
			return false
		}
	}
	for k, v := range bound {
		vars[k] = v
	}
	return true
}

// pkg is what go list says of a package.
type pkg struct {
	ImportPath string
	Imports    []string
	Standard   bool
}

// check returns the violations of rules in graph, the imports of every
// package (ours by their path inside the module, others by theirs).
func check(rules []rule, ours []string, graph map[string][]string) []string {
	var errs []string
	for _, p := range ours {
		vars := map[string]string{}
		i := slices.IndexFunc(rules, func(r rule) bool { clear(vars); return match(r.pkg, p, vars) })
		if i < 0 {
			errs = append(errs, fmt.Sprintf("%s has no rule: add one to rules in tests/deps/deps_test.go", p))
			continue
		}
		r := rules[i]
		for _, imp := range graph[p] {
			if !slices.Contains(ours, imp) {
				continue
			}
			if !slices.ContainsFunc(r.may, func(m string) bool { return match(m, imp, vars) }) {
				errs = append(errs, fmt.Sprintf("%s imports %s, which it may not: %s (it may import %s)", p, imp, r.why, listOr(r.may, vars)))
			}
		}
		for _, n := range r.never {
			if chain := find(p, graph, func(d string) bool { return match(n, d, vars) }); chain != nil {
				errs = append(errs, fmt.Sprintf("%s depends on %s through %s: %s", p, chain[len(chain)-1], strings.Join(chain, " -> "), r.why))
			}
		}
	}
	return errs
}

// find returns the shortest import chain from p to a package for which
// bad is true, or nil.
func find(p string, graph map[string][]string, bad func(string) bool) []string {
	from := map[string]string{p: ""}
	queue := []string{p}
	for len(queue) > 0 {
		q := queue[0]
		queue = queue[1:]
		for _, d := range graph[q] {
			if _, seen := from[d]; seen {
				continue
			}
			from[d] = q
			if bad(d) {
				chain := []string{d}
				for x := q; x != ""; x = from[x] {
					chain = append([]string{x}, chain...)
				}
				return chain
			}
			queue = append(queue, d)
		}
	}
	return nil
}

// listOr says what a rule allows, its {X} replaced.
func listOr(may []string, vars map[string]string) string {
	if len(may) == 0 {
		return "nothing of ours"
	}
	s := strings.Join(may, ", ")
	for k, v := range vars {
		s = strings.ReplaceAll(s, "{"+k+"}", v)
	}
	return s
}

// TestDependencyDirection checks the whole module's imports against rules.
func TestDependencyDirection(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Imports,Standard", "./...")
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	graph := map[string][]string{}
	var ours []string
	short := func(p string) string { return strings.TrimPrefix(p, module) }
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if p.Standard {
			continue
		}
		name := short(p.ImportPath)
		if name != p.ImportPath {
			ours = append(ours, name)
		}
		for _, imp := range p.Imports {
			graph[name] = append(graph[name], short(imp))
		}
	}
	if len(ours) < 20 {
		t.Fatalf("go list found only %d packages of ours: %v", len(ours), ours)
	}
	for _, e := range check(rules, ours, graph) {
		t.Error(e)
	}
}

// TestRulesCatchWrongImports: the rules refuse what the project forbids,
// and name the chain.
func TestRulesCatchWrongImports(t *testing.T) {
	ours := []string{"phases", "secret", "state", "engine", "providers", "providers/helm", "providers/helm/helmschema",
		"providers/incus", "providers/plugin", "lab/talosnode", "cmd/migrate", "runbooks", "unruled"}
	for _, c := range []struct {
		from, to string
		want     string
	}{
		{"providers/helm", "providers/incus", "providers/helm imports providers/incus"},
		{"phases", "secret", "phases imports secret"},
		{"state", "engine", "state imports engine"},
		{"state", "providers/helm", "state imports providers/helm"},
		{"lab/talosnode", "cmd/migrate", "lab/talosnode depends on cmd/migrate through lab/talosnode -> cmd/migrate"},
		{"engine", "runbooks", "engine imports runbooks"},
		{"providers/plugin", "providers/incus", "providers/plugin imports providers/incus"},
		{"cmd/migrate", "lab/labenv", "cmd/migrate depends on lab/labenv through cmd/migrate -> lab/labenv"},
		{"cmd/migrate", "examples", "cmd/migrate depends on examples through cmd/migrate -> examples"},
	} {
		graph := map[string][]string{
			"secret": {"phases"}, "providers/helm": {"phases", "providers", "providers/helm/helmschema", "secret"},
			"providers/plugin": {"providers", "providers/helm/helmschema"}, "runbooks": {"phases", "github.com/hashicorp/hcl/v2"},
		}
		graph[c.from] = append(graph[c.from], c.to)
		errs := check(rules, ours, graph)
		if !slices.ContainsFunc(errs, func(e string) bool { return strings.Contains(e, c.want) }) {
			t.Errorf("%s -> %s: the rules said %q, want %q", c.from, c.to, errs, c.want)
		}
		for _, e := range errs { // nothing else: the rest of the graph is right
			if !strings.HasPrefix(e, c.from+" ") && !strings.HasPrefix(e, "unruled has no rule") {
				t.Errorf("%s -> %s: an unexpected violation: %s", c.from, c.to, e)
			}
		}
	}
	// Through another package: the engine reaches HCL via state.
	graph := map[string][]string{"engine": {"state"}, "state": {"phases", "github.com/hashicorp/hcl/v2/hclsyntax"}}
	errs := check(rules, []string{"engine", "state", "phases"}, graph)
	want := "engine depends on github.com/hashicorp/hcl/v2/hclsyntax through engine -> state -> github.com/hashicorp/hcl/v2/hclsyntax"
	if !slices.ContainsFunc(errs, func(e string) bool { return strings.Contains(e, want) }) {
		t.Errorf("HCL through state: %q", errs)
	}
	// Through another package: migrate reaches the lab via a view.
	graph = map[string][]string{"cmd/migrate": {"views"}, "views": {"phases", "lab/labenv"}}
	errs = check(rules, []string{"cmd/migrate", "views", "phases", "lab/labenv"}, graph)
	if want := "cmd/migrate depends on lab/labenv through cmd/migrate -> views -> lab/labenv"; !slices.ContainsFunc(errs, func(e string) bool { return strings.Contains(e, want) }) {
		t.Errorf("the lab through a view: %q", errs)
	}
}
