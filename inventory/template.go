package inventory

import (
	"cmp"
	"fmt"
	"io/fs"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/runbooks"
)

// Template is migrate init's template (examples/homelab) as the runbook
// loader reads it: its steps, phases and roles. Everything init says of
// the runbook it writes (which steps reach into an old VM, which stop
// it and in which phase, the disks the move makes and their sizes, the
// images, the name of every variable it sets) comes from here, so that a
// template and init that disagree fail LoadTemplate, naming the role.
type Template struct {
	// FS is the template's files, rooted at its directory.
	FS      fs.FS
	Runbook *phases.Runbook
	// Files are the runbook files the loader read (main.hcl), by name.
	Files map[string][]byte
	// Disks are what the move makes in storage_pool (role host, part
	// disks), each with its size as the template's step says it.
	Disks []Disk

	defaults map[string]cty.Value // variables' defaults, by name
	steps    map[string]*phases.Step
}

// Disk is one disk the runbook makes.
type Disk struct {
	What string
	Size int64
}

// Var is a variable of the template by what it stands for: the part of a
// role that names it.
type Var struct{ Role, Part string }

func (v Var) String() string { return fmt.Sprintf("role %q part %s", v.Role, v.Part) }

// The variables migrate init sets or says something of.
var (
	VarRemote               = Var{"host", "remote"}
	VarStoragePool          = Var{"host", "storage_pool"}
	VarDataPool             = Var{"host", "data_pool"}
	VarDataVolume           = Var{"host", "data_volume"}
	VarLANBridge            = Var{"host", "lan_bridge"}
	VarLANNetwork           = Var{"host", "lan_network"}
	VarIGPUPCI              = Var{"host", "igpu_pci"}
	VarTalosVersion         = Var{"node", "talos"}
	VarNodeCPU              = Var{"node", "cpu"}
	VarNodeMemory           = Var{"node", "memory"}
	VarNodeMAC              = Var{"node", "mac"}
	VarNodeAddress          = Var{"node", "address"}
	VarRehearsalMAC         = Var{"rehearsal", "mac"}
	VarRehearsalAddress     = Var{"rehearsal", "address"}
	VarMatrixDomain         = Var{"synapse", "domain"}
	VarMatrixURL            = Var{"synapse", "url"}
	VarMatrixTLSCert        = Var{"synapse", "tls_cert"}
	VarMatrixTLSKey         = Var{"synapse", "tls_key"}
	VarSynapseDatabase      = Var{"synapse", "database"}
	VarFrigateInstall       = Var{"frigate", "install"}
	VarJellyfinHWAccel      = Var{"jellyfin", "hwaccel"}
	VarFrigateHWAccel       = Var{"frigate", "hwaccel"}
	VarJellyfinLibraryPaths = Var{"jellyfin", "library_paths"}
	VarSambaUsers           = Var{"samba", "users"}
	VarForgeURL             = Var{"forge", "url"}
	VarRetainUntil          = Var{"retention", "until"}
)

// RoleVar is the variable naming a role's old VM (services_vm...).
func RoleVar(role string) Var { return Var{role, "vm"} }

// AppVar is an application's version or image variable (part "version"
// or "image" of the role named after it, lower case).
func AppVar(app, part string) Var { return Var{strings.ToLower(app), part} }

// templateNeeds is every part init reads, and what it must name: one
// variable, one step, or steps.
var templateNeeds = func() map[Var]string {
	n := map[Var]string{}
	for _, v := range []Var{VarRemote, VarStoragePool, VarDataPool, VarDataVolume, VarLANBridge, VarLANNetwork, VarIGPUPCI,
		VarTalosVersion, VarNodeCPU, VarNodeMemory, VarNodeMAC, VarNodeAddress, VarRehearsalMAC, VarRehearsalAddress,
		VarMatrixDomain, VarMatrixURL, VarMatrixTLSCert, VarMatrixTLSKey, VarSynapseDatabase, VarFrigateInstall,
		VarJellyfinHWAccel, VarFrigateHWAccel, VarJellyfinLibraryPaths, VarSambaUsers, VarForgeURL, VarRetainUntil} {
		n[v] = "a variable"
	}
	for _, app := range []string{"Jellyfin", "Frigate", "Synapse"} {
		n[AppVar(app, "version")], n[AppVar(app, "image")] = "a variable", "a variable"
	}
	for _, role := range Roles {
		n[RoleVar(role)] = "a variable"
		n[Var{role, "stop"}] = "a step"
	}
	for _, role := range []string{RoleServices, RoleMatrix} {
		n[Var{role, "inside"}] = "steps"
		n[Var{role, "data"}] = "a step"
	}
	n[Var{"host", "disks"}] = "steps"
	n[Var{"host", "gpu"}] = "steps"
	n[Var{"node", "vm"}] = "a step"
	n[Var{"rehearsal", "vm"}] = "a step"
	n[Var{"rehearsal", "igpu_check"}] = "a step"
	return n
}()

// LoadTemplate reads the template in fsys with the runbook loader (the
// schemas are the providers' step types) and checks that it has every
// role and part migrate init reads; an error names each mistake with its
// file and line.
func LoadTemplate(fsys fs.FS, schemas map[string]phases.Schema) (*Template, error) {
	ld := runbooks.NewLoader(fsys, runbooks.Options{Dir: "/template", Schemas: schemas, UnsetVarsUnknown: true})
	rb, diags := ld.Load()
	if diags.HasErrors() {
		return nil, fmt.Errorf("migrate init's template does not load: %w", diags.Err())
	}
	t := &Template{FS: fsys, Runbook: rb, Files: ld.Files(), defaults: map[string]cty.Value{}, steps: map[string]*phases.Step{}}
	for _, s := range rb.AllSteps() {
		t.steps[s.Addr.String()] = s
	}
	var errs []string
	where := t.rolesPlace()
	for _, v := range slices.SortedFunc(maps.Keys(templateNeeds), func(a, b Var) int { return cmp.Or(strings.Compare(a.Role, b.Role), strings.Compare(a.Part, b.Part)) }) {
		want := templateNeeds[v]
		r := rb.Roles[v.Role]
		if r == nil {
			errs = append(errs, fmt.Sprintf("%s: the template declares no role %q, which migrate init needs (its part %s names %s)", where, v.Role, v.Part, want))
			continue
		}
		p := r.Parts[v.Part]
		if p == nil {
			errs = append(errs, fmt.Sprintf("%s: role %q has no part %s, which migrate init needs: it names %s", r.Range, v.Role, v.Part, want))
			continue
		}
		kind := phases.RefStep
		if want == "a variable" {
			kind = phases.RefVar
		}
		ok := len(p.Refs) > 0 && (want == "steps" || len(p.Refs) == 1)
		for _, ref := range p.Refs {
			ok = ok && ref.Kind == kind
		}
		if !ok {
			errs = append(errs, fmt.Sprintf("%s: part %s of role %q must name %s, for migrate init", p.Range, v.Part, v.Role, want))
		}
	}
	if len(errs) == 0 {
		errs = t.unlisted()
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("migrate init and its template disagree:\n  %s", strings.Join(errs, "\n  "))
	}
	t.readDefaults()
	disks, err := t.readDisks()
	if err != nil {
		return nil, err
	}
	t.Disks = disks
	return t, nil
}

// unlisted are the steps that name an old VM's variable but are not
// among its role's steps (parts inside, data, stop): init would neither
// mark them when the VM lacks the agent nor leave them out with the role.
func (t *Template) unlisted() []string {
	var errs []string
	ends := map[string]map[int]int{}
	for name, src := range t.Files {
		ends[name] = blockEnds(src)
	}
	for _, role := range Roles {
		listed := map[string]bool{t.stopStep(role): true, t.deviceStep(role): true}
		for _, st := range t.inside(role) {
			listed[st] = true
		}
		uses := regexp.MustCompile(`\bvar\.` + regexp.QuoteMeta(t.Name(RoleVar(role))) + `\b`)
		for _, s := range t.Runbook.AllSteps() {
			src, ok := t.Files[s.Range.Filename]
			if !ok || listed[s.Addr.String()] {
				continue
			}
			if end, ok := ends[s.Range.Filename][s.Range.StartByte]; ok && uses.Match(src[s.Range.StartByte:end]) {
				errs = append(errs, fmt.Sprintf("%s: step %s names var.%s, but role %q does not list it (parts inside, data, stop); see %s", s.Range, s.Addr, t.Name(RoleVar(role)), role, t.Runbook.Roles[role].Range))
			}
		}
	}
	return errs
}

// blockEnds maps the start of each block's header in src to the block's
// end (the loader keeps a block's header only).
func blockEnds(src []byte) map[int]int {
	ends := map[int]int{}
	f, diags := hclsyntax.ParseConfig(src, "", hcl.InitialPos)
	if diags.HasErrors() {
		return ends
	}
	var walk func(*hclsyntax.Body)
	walk = func(b *hclsyntax.Body) {
		for _, blk := range b.Blocks {
			ends[blk.DefRange().Start.Byte] = blk.Range().End.Byte
			walk(blk.Body)
		}
	}
	walk(f.Body.(*hclsyntax.Body))
	return ends
}

// rolesPlace is where the template's roles are declared: the first
// role's file and line.
func (t *Template) rolesPlace() string {
	var first *phases.Role
	for _, r := range t.Runbook.Roles {
		if first == nil || r.Range.Filename < first.Range.Filename || r.Range.Filename == first.Range.Filename && r.Range.StartByte < first.Range.StartByte {
			first = r
		}
	}
	if first == nil {
		return "the template (it declares no role)"
	}
	return fmt.Sprintf("%s:%d", first.Range.Filename, first.Range.StartLine)
}

// part is a part LoadTemplate checked.
func (t *Template) part(v Var) *phases.RolePart {
	r := t.Runbook.Roles[v.Role]
	if r == nil || r.Parts[v.Part] == nil {
		panic(fmt.Sprintf("inventory: %s is not among the parts LoadTemplate checks", v))
	}
	return r.Parts[v.Part]
}

// Name is the variable's name in the template.
func (t *Template) Name(v Var) string { return t.part(v).Refs[0].Name }

// Step is the one step a part names (TYPE.NAME).
func (t *Template) Step(role, part string) string { return t.part(Var{role, part}).Refs[0].Name }

// Steps are the steps a part names, in its order.
func (t *Template) Steps(role, part string) []string {
	var out []string
	for _, r := range t.part(Var{role, part}).Refs {
		out = append(out, r.Name)
	}
	return out
}

// Has says whether the template has the part (an optional one).
func (t *Template) Has(role, part string) bool {
	r := t.Runbook.Roles[role]
	return r != nil && r.Parts[part] != nil
}

// PhaseOf is the phase of a step of the template ("" when none).
func (t *Template) PhaseOf(step string) string {
	if s := t.steps[step]; s != nil {
		return s.Phase
	}
	return ""
}

// StepRange is where a step's block starts in the template.
func (t *Template) StepRange(step string) (phases.Range, bool) {
	s := t.steps[step]
	if s == nil {
		return phases.Range{}, false
	}
	return s.Range, true
}

// FilesOf names the files the steps are declared in, main.hcl first
// (a group's file for a step of a group call): "main.hcl and
// groups/talos-node/main.hcl".
func (t *Template) FilesOf(steps []string) string {
	var files []string
	for _, st := range steps {
		if r, ok := t.StepRange(st); ok && !slices.Contains(files, r.Filename) {
			files = append(files, r.Filename)
		}
	}
	slices.SortFunc(files, func(a, b string) int {
		return cmp.Or(cmp.Compare(strings.Count(a, "/"), strings.Count(b, "/")), strings.Compare(a, b))
	})
	if len(files) < 2 {
		return strings.Join(files, "")
	}
	return strings.Join(files[:len(files)-1], ", ") + " and " + files[len(files)-1]
}

// Default is a string variable's default in the template ("" when it
// has none).
func (t *Template) Default(v Var) string {
	d, ok := t.defaults[t.Name(v)]
	if !ok || !d.IsKnown() || d.IsNull() || d.Type() != cty.String {
		return ""
	}
	return d.AsString()
}

// readDefaults reads the variables' defaults (the loaded runbook keeps
// only their values, which --var and site.auto.hcl change).
func (t *Template) readDefaults() {
	for _, name := range slices.Sorted(maps.Keys(t.Files)) {
		f, diags := hclsyntax.ParseConfig(t.Files[name], name, hcl.InitialPos)
		if diags.HasErrors() {
			continue // the loader said so already
		}
		for _, b := range f.Body.(*hclsyntax.Body).Blocks {
			if b.Type != "variable" || len(b.Labels) != 1 {
				continue
			}
			if a := b.Body.Attributes["default"]; a != nil {
				if v, diags := a.Expr.Value(nil); !diags.HasErrors() {
					t.defaults[b.Labels[0]] = v
				}
			}
		}
	}
}

// isoSize is the Talos ISO's size, about: its step names a file the
// run downloads, not a size.
const isoSize = 100 << 20

// readDisks reads the sizes of the disks the move makes: a volume's
// size, an instance's root disk's.
func (t *Template) readDisks() ([]Disk, error) {
	outputs := map[phases.Address]cty.Value{}
	for _, s := range t.Runbook.AllSteps() {
		outputs[s.Addr] = cty.DynamicVal
	}
	var disks []Disk
	for _, name := range t.Steps("host", "disks") {
		s := t.steps[name]
		v, _ := s.Config.Evaluate(outputs)
		size, what := cty.NilVal, ""
		switch s.Addr.Type {
		case "incus_instance":
			size, what = attrPath(v, "devices", "root", "size"), "the root disk of "+name
		case "incus_volume":
			size, what = attrPath(v, "size"), "the volume "+name
		}
		switch {
		case size == cty.NilVal && s.Addr.Type == "incus_volume":
			disks = append(disks, Disk{fmt.Sprintf("%s (about %s, a file)", what, SizeString(isoSize)), isoSize})
		case size == cty.NilVal || size.Type() != cty.String:
			return nil, fmt.Errorf("%s: migrate init reads no size of %s (role \"host\" part disks): an incus_instance with a root disk's size, or an incus_volume", s.Range, name)
		default:
			n, err := parseSize(size.AsString())
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", s.Range, name, err)
			}
			disks = append(disks, Disk{fmt.Sprintf("%s (%s)", what, size.AsString()), n})
		}
	}
	return disks, nil
}

// attrPath is v's value at the path of attributes or map keys, NilVal
// when it is not there, unknown or null.
func attrPath(v cty.Value, path ...string) cty.Value {
	for _, p := range path {
		if v == cty.NilVal || !v.IsKnown() || v.IsNull() {
			return cty.NilVal
		}
		ty := v.Type()
		switch {
		case ty.IsObjectType() && ty.HasAttribute(p):
			v = v.GetAttr(p)
		case (ty.IsMapType() || ty.IsObjectType()) && v.CanIterateElements():
			found := cty.NilVal
			for it := v.ElementIterator(); it.Next(); {
				k, e := it.Element()
				if k.Type() == cty.String && k.AsString() == p {
					found = e
				}
			}
			v = found
		default:
			return cty.NilVal
		}
	}
	if v == cty.NilVal || !v.IsKnown() || v.IsNull() {
		return cty.NilVal
	}
	return v
}

var sizeRE = regexp.MustCompile(`^([0-9]+)(B|KiB|MiB|GiB|TiB)$`)

// parseSize reads a size as Incus writes them: 64GiB, 150GiB.
func parseSize(s string) (int64, error) {
	m := sizeRE.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("size %q: want a number of B, KiB, MiB, GiB or TiB", s)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	shift := map[string]int{"B": 0, "KiB": 10, "MiB": 20, "GiB": 30, "TiB": 40}[m[2]]
	return n << shift, err
}
