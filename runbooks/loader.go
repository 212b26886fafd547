package runbooks

import (
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"filippo.io/age"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/graph"
	"github.com/homelab-migrate/migrate/phases"
)

// Options tell a Loader where the runbook lives, which providers exist and
// where variable values come from.
type Options struct {
	// Dir is the absolute runbook directory: the base for file(),
	// templatefile() and abspath(), and Runbook.Dir.
	Dir string
	// Schemas maps a provider type ("local", "incus", ...) to its schema.
	// A step's type is looked up among the step types of all of them.
	Schemas map[string]phases.Schema
	// Vars are --var NAME=VALUE options, in the order given.
	Vars []string
	// VarFiles are --var-file paths, read with the operating system (they
	// are the user's paths, not the runbook's), in the order given.
	VarFiles []string
	// Environ is the environment, as from os.Environ(): MIGRATE_VAR_NAME
	// entries set variables, and env() reads it. Nil is an empty
	// environment.
	Environ []string
	// Identities opens age-encrypted variables files; nil reads the
	// identity from MIGRATE_AGE_IDENTITY (agefile.Identities).
	Identities func() ([]age.Identity, error)
	// UnsetVarsUnknown leaves a variable given no value unknown instead of
	// reporting it: for commands that need the runbook's shape, not its
	// values (validate, graph, status).
	UnsetVarsUnknown bool
}

// Loader reads a runbook directory into a *phases.Runbook.
type Loader struct {
	fsys  fs.FS
	opts  Options
	files map[string][]byte
}

// NewLoader returns a Loader reading the *.hcl files at the root of fsys,
// normally os.DirFS(opts.Dir).
func NewLoader(fsys fs.FS, opts Options) *Loader {
	return &Loader{fsys: fsys, opts: opts, files: map[string][]byte{}}
}

// Files returns every file the last Load read, keyed by the file names used
// in diagnostic ranges (runbook files by their path in the fs.FS, variable
// files by their path as given, --var values by a name in angle brackets),
// with their bytes, for the snippets a view shows (views.View.SetFiles).
func (l *Loader) Files() map[string][]byte { return l.files }

// Load reads, decodes and checks the runbook. It reports every problem it
// can find in one go. When the diagnostics contain errors the runbook is
// incomplete (steps in error are left out) and must not be run; it is
// returned anyway for tools that want to show what could be understood.
func (l *Loader) Load() (*phases.Runbook, phases.Diagnostics) {
	ld := &load{
		Loader:    l,
		files:     map[string]*hcl.File{},
		stepTypes: map[string]stepTypeInfo{},
		loadContext: loadContext{
			vars:   map[string]*variable{},
			locals: map[string]*localValue{},
		},
		groups:    map[string]*groupCall{},
		sources:   map[string][]groupSourceFile{},
		providers: map[string]*providerDecl{},
		implicit:  map[string]*phases.ProviderConfig{},
		phaseIdx:  map[string]*phaseDecl{},
		steps:     map[phases.Address]*stepDecl{},
		names:     map[phases.Address]phases.Address{},
		specs:     map[string]hcldec.ObjectSpec{},

		sensitiveAttrs: map[string][]string{},
	}
	rb := ld.run()
	// Keep the bytes diagnostics quote, not the syntax trees: the steps
	// hold what they still evaluate.
	l.files = make(map[string][]byte, len(ld.files))
	for name, f := range ld.files {
		l.files[name] = f.Bytes
	}
	sortDiags(ld.diags)
	return rb, Diagnostics(capDiags(dedupDiags(ld.diags)))
}

// sortDiags orders diagnostics by file and position, those without a
// place first, so that a person reads them top to bottom.
func sortDiags(diags hcl.Diagnostics) {
	sort.SliceStable(diags, func(i, j int) bool {
		a, b := diags[i].Subject, diags[j].Subject
		switch {
		case a == nil || b == nil:
			return a == nil && b != nil
		case a.Filename != b.Filename:
			return a.Filename < b.Filename
		}
		return a.Start.Byte < b.Start.Byte
	})
}

// dedupDiags drops a diagnostic that repeats the one before it: the
// steps of a group called twice are checked twice, in the same file.
func dedupDiags(diags hcl.Diagnostics) hcl.Diagnostics {
	out := diags[:0]
	for i, d := range diags {
		if i > 0 {
			p := diags[i-1]
			if p.Summary == d.Summary && p.Detail == d.Detail && (p.Subject == nil) == (d.Subject == nil) && (p.Subject == nil || *p.Subject == *d.Subject) {
				continue
			}
		}
		out = append(out, d)
	}
	return out
}

// load is the state of one Load call.
type load struct {
	*Loader
	diags hcl.Diagnostics
	files map[string]*hcl.File

	stepTypes map[string]stepTypeInfo

	// loadContext is what var, local and TYPE.NAME mean where the loader
	// is: the runbook's, or a group instance's (within).
	loadContext

	autoVarFiles []string // *.auto.hcl and *.auto.hcl.age beside the runbook, by name
	secrets      []string // plain values of sensitive variables

	groups     map[string]*groupCall // by call name
	groupOrder []*groupCall
	sources    map[string][]groupSourceFile // by directory

	providers     map[string]*providerDecl // by TYPE.NAME
	providerOrder []*providerDecl
	implicit      map[string]*phases.ProviderConfig

	phases   []*phaseDecl
	phaseIdx map[string]*phaseDecl
	// phaseClosure says which phases run strictly before which.
	phaseClosure *graph.Closure
	steps        map[phases.Address]*stepDecl
	names        map[phases.Address]phases.Address // interned step addresses
	allSteps     []*stepDecl                       // declaration order, including rejected duplicates

	suggested      int // "Did you mean" hints given
	specs          map[string]hcldec.ObjectSpec
	sensitiveAttrs map[string][]string // by step type
}

type stepTypeInfo struct {
	provider string
	typ      phases.StepType
}

// rootBody is the top level of a runbook file.
type rootBody struct {
	Variables []*variableBlock `hcl:"variable,block"`
	Locals    []*localsBlock   `hcl:"locals,block"`
	Providers []*providerBlock `hcl:"provider,block"`
	Phases    []*phaseBlock    `hcl:"phase,block"`
	Backends  []*backendBlock  `hcl:"backend,block"`
	Roles     []*roleBlock     `hcl:"role,block"`
	Moved     []*movedBlock    `hcl:"moved,block"`
	Removed   []*removedBlock  `hcl:"removed,block"`
	Services  []*serviceBlock  `hcl:"service,block"`
}

type localsBlock struct {
	Attrs    hcl.Attributes `hcl:",remain"`
	DefRange hcl.Range      `hcl:",def_range"`
}

type providerBlock struct {
	Type      string    `hcl:"type,label"`
	Name      string    `hcl:"name,label"`
	TypeRange hcl.Range `hcl:"type,label_range"`
	NameRange hcl.Range `hcl:"name,label_range"`
	Config    hcl.Body  `hcl:",remain"`
	DefRange  hcl.Range `hcl:",def_range"`
}

type phaseBlock struct {
	Name        string         `hcl:"name,label"`
	NameRange   hcl.Range      `hcl:"name,label_range"`
	Description string         `hcl:"description,optional"`
	After       *hcl.Attribute `hcl:"after,optional"`
	Steps       []*stepBlock   `hcl:"step,block"`
	Checks      []*stepBlock   `hcl:"check,block"`
	Groups      []*groupBlock  `hcl:"group,block"`
	DefRange    hcl.Range      `hcl:",def_range"`
}

type stepBlock struct {
	Type      string    `hcl:"type,label"`
	Name      string    `hcl:"name,label"`
	TypeRange hcl.Range `hcl:"type,label_range"`
	NameRange hcl.Range `hcl:"name,label_range"`
	Body      hcl.Body  `hcl:",remain"`
	DefRange  hcl.Range `hcl:",def_range"`
}

func (ld *load) run() *phases.Runbook {
	roots := ld.parseFiles()
	ld.checkLinks()
	ld.indexStepTypes()

	var (
		varBlocks   []*variableBlock
		localBlocks []*localsBlock
		provBlocks  []*providerBlock
		phaseBlocks []*phaseBlock
		backends    []*backendBlock
		roleBlocks  []*roleBlock
		moved       []*movedBlock
		removed     []*removedBlock
		services    []*serviceBlock
	)
	for _, r := range roots {
		varBlocks = append(varBlocks, r.Variables...)
		localBlocks = append(localBlocks, r.Locals...)
		provBlocks = append(provBlocks, r.Providers...)
		phaseBlocks = append(phaseBlocks, r.Phases...)
		backends = append(backends, r.Backends...)
		roleBlocks = append(roleBlocks, r.Roles...)
		moved = append(moved, r.Moved...)
		removed = append(removed, r.Removed...)
		services = append(services, r.Services...)
	}

	ld.scope = &scope{stepTypes: ld.stepTypes, vars: cty.EmptyObjectVal, locals: cty.EmptyObjectVal, unknown: map[string]cty.Value{}}
	for name, st := range ld.stepTypes {
		if st.typ.Outputs != nil {
			ld.scope.unknown[name] = cty.UnknownVal(cty.Object(st.typ.Outputs))
		}
	}
	ld.scope.funcs = ld.functions()

	ld.declareVariables(varBlocks)
	ld.assignVariables()
	ld.evalLocals(localBlocks)
	ld.validateVariables()
	backend := ld.declareBackend(backends)

	ld.declareProviders(provBlocks)
	ld.declarePhases(phaseBlocks)
	ld.resolveGroups()
	ld.resolveProviders()
	ld.resolveSteps()
	ld.orderPhases()
	ld.checkStepGraph()
	ld.resolveDiscards()

	rb := ld.build()
	rb.Backend = backend
	rb.Roles = ld.declareRoles(roleBlocks)
	rb.Moved = ld.declareMoved(moved)
	rb.Removed = ld.declareRemoved(removed, rb.Moved)
	rb.Services = ld.declareServices(services)
	return rb
}

// parseFiles reads and parses every *.hcl file at the root of the fs.FS, in
// name order, and decodes the top-level blocks.
func (ld *load) parseFiles() []*rootBody {
	if ld.fsys == nil {
		ld.diags = append(ld.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "No Runbook Directory",
			Detail:   "The runbook loader was given no file system to read; this is a bug in the caller.",
		})
		return nil
	}
	entries, err := fs.ReadDir(ld.fsys, ".")
	if err != nil {
		ld.diags = append(ld.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Cannot Read Runbook Directory",
			Detail:   fmt.Sprintf("The runbook directory %s cannot be read: %s.", ld.dirName(), err),
		})
		return nil
	}
	var roots []*rootBody
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || strings.HasPrefix(name, ".") {
			continue
		}
		// Terraform's convention: variables files beside the runbook are
		// read automatically, before --var-file.
		if strings.HasSuffix(name, ".auto.hcl") || strings.HasSuffix(name, ".auto.hcl.age") {
			ld.autoVarFiles = append(ld.autoVarFiles, name)
			continue
		}
		if !strings.HasSuffix(name, ".hcl") {
			continue
		}
		src, err := fs.ReadFile(ld.fsys, name)
		if err != nil {
			ld.diags = append(ld.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Cannot Read Runbook File",
				Detail:   fmt.Sprintf("The file %s cannot be read: %s.", name, err),
			})
			continue
		}
		if d := notText(src, name); d != nil {
			ld.diags = append(ld.diags, d)
			continue
		}
		f, diags := parseConfig(src, name)
		ld.diags = append(ld.diags, diags...)
		if f == nil || f.Body == nil {
			continue
		}
		if !isASCII(src) {
			ld.diags = append(ld.diags, normalizeNames(f)...)
		}
		ld.files[name] = f
		var root rootBody
		ld.diags = append(ld.diags, gohcl.DecodeBody(f.Body, nil, &root)...)
		roots = append(roots, &root)
	}
	if len(roots) == 0 && !ld.diags.HasErrors() {
		ld.diags = append(ld.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "No Runbook Files",
			Detail:   fmt.Sprintf("The runbook directory %s contains no .hcl files. Point --runbook at the directory that holds the runbook.", ld.dirName()),
		})
	}
	return roots
}

func (ld *load) dirName() string {
	if ld.opts.Dir != "" {
		return ld.opts.Dir
	}
	return "."
}

// indexStepTypes maps every step type to the provider type that runs it.
// A step type offered by two providers is an error naming both: which one
// runs its steps would be a guess (provider types are visited in name
// order, so the step type stays with the first and the error is the same
// at every load).
func (ld *load) indexStepTypes() {
	for _, pt := range sortedKeys(ld.opts.Schemas) {
		for _, st := range sortedKeys(ld.opts.Schemas[pt].StepTypes) {
			if first, ok := ld.stepTypes[st]; ok {
				ld.diags = append(ld.diags, &hcl.Diagnostic{
					Severity: hcl.DiagError,
					Summary:  "Step Type Of Two Providers",
					Detail:   fmt.Sprintf("The step type %q is offered by both the %q and the %q providers, so a step of that type has no one provider to run it. This is a bug in how migrate was put together: each step type must belong to one provider.", st, first.provider, pt),
				})
				continue
			}
			ld.stepTypes[st] = stepTypeInfo{provider: pt, typ: ld.opts.Schemas[pt].StepTypes[st]}
		}
	}
}

// spec builds (once) the hcldec spec of a set of attributes.
func (ld *load) spec(key string, attrs map[string]phases.Attribute) hcldec.ObjectSpec {
	if s, ok := ld.specs[key]; ok {
		return s
	}
	s := hcldec.ObjectSpec{}
	for name, a := range attrs {
		ty := a.Type
		if ty == cty.NilType {
			ty = cty.DynamicPseudoType
		}
		s[name] = &hcldec.AttrSpec{Name: name, Type: ty, Required: a.Required}
	}
	ld.specs[key] = s
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func sensitiveNames(attrs map[string]phases.Attribute) []string {
	var out []string
	for _, name := range sortedKeys(attrs) {
		if attrs[name].Sensitive {
			out = append(out, name)
		}
	}
	return out
}

// maxSuggestions bounds the "Did you mean" hints of one load: each one
// compares a name with every declared name, so thousands of mistakes in a
// big runbook would take time quadratic in its size (5,000 references to
// undeclared steps took 40 s). Only the first errors are shown anyway.
const maxSuggestions = 50

// suggest is didYouMean over options(), while the budget lasts.
func (ld *load) suggest(given string, options func() []string) string {
	if ld.suggested >= maxSuggestions {
		return ""
	}
	ld.suggested++
	return didYouMean(given, options())
}

// didYouMean returns " Did you mean "x"?" when one of the options is close
// to given, or "".
func didYouMean(given string, options []string) string {
	best, bestDist := "", 3
	for _, o := range options {
		if d := levenshtein(given, o); d < bestDist {
			best, bestDist = o, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" Did you mean %q?", best)
}

func levenshtein(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	if len(ra) > 64 || len(rb) > 64 {
		if a == b {
			return 0
		}
		return 64
	}
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

// englishList joins names as "a, b and c".
func englishList(names []string) string {
	switch len(names) {
	case 0:
		return ""
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
