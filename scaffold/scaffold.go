package scaffold

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"filippo.io/age"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/hcl/v2/hclwrite"
	wordwrap "github.com/mitchellh/go-wordwrap"
	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/inventory"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/secret/agefile"
)

// Input is what the runbook is written from.
type Input struct {
	Host     *inventory.Host
	Site     inventory.Site
	Findings []inventory.Finding
	// Remote is the incus CLI remote the host was read through (the
	// runbook's incus_remote); with Address set instead, the provider
	// block names the address and the certificates' files.
	Remote  string
	Address *Address
	// Project is the Incus project the host was read in when given
	// (migrate init --project): the provider block names it, so that the
	// run acts where the read looked.
	Project string
	// Recipients are whom the secrets are sealed to: age1... lines of
	// .age-recipients.
	Recipients []string
	// Talos holds the new cluster's secrets bundle and its
	// administrator's talosconfig, in clear (sealed here).
	Talos TalosSecrets
	// Patch, when set, rewrites each of the template's Talos patches
	// (patches/*) for Talos.Version, so that the runbook starts in that
	// release's form (migrate init: the talos program's rewrite, package
	// talospatch); nil writes them as the example has them.
	Patch func(name string, data []byte) ([]byte, error)
	Now   time.Time
}

// Address is a host reached by URL with certificates given as files.
type Address struct {
	URL, ClientCert, ClientKey, ServerCert string
}

// TalosSecrets are a new cluster's secrets, as `migrate secrets gen
// talos` makes them.
type TalosSecrets struct {
	Bundle, Talosconfig []byte
	// Version is the Talos release the bundle was made for: the runbook's
	// talos_version, so that the cluster runs what its secrets are for.
	Version string
}

// File is one file of the runbook directory, relative to it.
type File struct {
	Path string
	Data []byte
	Mode fs.FileMode
}

// Render makes the runbook's files in memory.
func Render(in Input) ([]File, error) {
	if len(in.Recipients) == 0 {
		return nil, errors.New("no age recipient to seal the secrets to")
	}
	var rs []age.Recipient
	for _, r := range in.Recipients {
		x, err := age.ParseX25519Recipient(r)
		if err != nil {
			return nil, fmt.Errorf("recipient %q: %w", r, err)
		}
		rs = append(rs, x)
	}
	if len(in.Talos.Bundle) == 0 || len(in.Talos.Talosconfig) == 0 {
		return nil, errors.New("no Talos secrets to write")
	}
	var files []File
	add := func(p string, b []byte, mode fs.FileMode) { files = append(files, File{Path: p, Data: b, Mode: mode}) }
	seal := func(p string, clear []byte) error {
		b, err := agefile.Encrypt(clear, true, rs...)
		if err != nil {
			return fmt.Errorf("sealing %s: %w", p, err)
		}
		add(p, b, 0o600)
		return nil
	}

	// The template: examples/homelab without its secrets and recipients,
	// as inventory.LoadTemplate read it.
	if in.Site.Template == nil {
		return nil, errors.New("no template: inventory.LoadTemplate's, through inventory.Choose")
	}
	tmpl := in.Site.Template.FS
	err := fs.WalkDir(tmpl, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !templateFile(p) {
			return err
		}
		b, err := fs.ReadFile(tmpl, p)
		if err != nil {
			return err
		}
		if p == "main.hcl" {
			if b, err = mainHCL(b, in); err != nil {
				return err
			}
		}
		if strings.HasPrefix(p, "patches/") && in.Patch != nil {
			if b, err = in.Patch(p, b); err != nil {
				return err
			}
		}
		add(p, b, 0o644)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("the runbook template: %w", err)
	}

	add("site.auto.hcl", siteHCL(in), 0o644)
	add(agefile.RecipientsFile, []byte("# Whom the secrets of this runbook are sealed to, one age recipient per line\n# (age-keygen -y IDENTITY prints an identity's). Add your team's; then re-seal\n# each .age file (migrate secrets edit) so that they can open it.\n"+strings.Join(in.Recipients, "\n")+"\n"), 0o644)
	if err := seal("secrets/secrets.yaml.age", in.Talos.Bundle); err != nil {
		return nil, err
	}
	if err := seal("secrets/talosconfig.age", in.Talos.Talosconfig); err != nil {
		return nil, err
	}
	if err := seal("secrets/ci-runner-token.age", []byte("TODO-the-runner-registration-token-of-your-forge\n")); err != nil {
		return nil, err
	}
	reg := make([]byte, 32)
	rand.Read(reg)
	if err := seal("secrets.auto.hcl.age", fmt.Appendf(nil, "# The new homeserver's registration shared secret (register_new_matrix_user\n# signs with it), made by migrate init. migrate secrets edit secrets.auto.hcl.age\n# opens this file in $EDITOR.\nsynapse_registration_secret = %q\n",
		base64.RawURLEncoding.EncodeToString(reg))); err != nil {
		return nil, err
	}
	add("secrets/README.md", []byte(secretsREADME), 0o644)
	add(".gitignore", []byte(gitignore), 0o644)
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	return files, nil
}

// templateFile: what of examples/homelab a new runbook starts from (its
// secrets are the demo's, sealed to the published demo identity).
func templateFile(p string) bool {
	top, _, _ := strings.Cut(p, "/")
	return p == "main.hcl" || top == "charts" || top == "manifests" || top == "patches" || top == "scripts" || top == "groups"
}

const secretsREADME = `Age-encrypted secrets, sealed to the recipients in ../.age-recipients;
set MIGRATE_AGE_IDENTITY to your identity file to open them in memory.
migrate init made them new for this host:

- secrets.yaml.age: the cluster's PKI, a Talos secrets bundle (migrate secrets gen talos);
- talosconfig.age: the Talos API client config of its administrator, made from it;
- ci-runner-token.age: a PLACEHOLDER: put your forge's runner registration token
  in a file and seal it instead (rm ci-runner-token.age; migrate secrets encrypt
  ci-runner-token --rm);
- ../secrets.auto.hcl.age: the new homeserver's registration secret.

The run adds the kubeconfigs (kubeconfig.age, rehearsal.kubeconfig.age) and
Synapse's signing key and configuration from the old matrix VM
(synapse-signing.key.age, synapse-homeserver.yaml.age). Put the homeserver's
certificate and key here too, sealed: matrix-tls.crt.age and matrix-tls.key.age
(migrate secrets encrypt FILE --rm).
`

const gitignore = `# State and what a run writes that is not for the repository.
.migrate/
rendered/
secrets/kubeconfig.age
secrets/rehearsal.kubeconfig.age
`

// mainHCL is the template's main.hcl for this host: a header saying so,
// the provider block for an address, the steps the host has nothing for
// commented out (and the role parts that name them), and a TODO before
// each step a finding concerns. Every edit is at a range the loader gave
// (the template's steps, provider blocks and roles), written with
// hclwrite: nothing is found by searching the text.
func mainHCL(b []byte, in Input) ([]byte, error) {
	t := in.Site.Template
	var edits []edit
	prov, err := incusProvider(b, t, in)
	if err != nil {
		return nil, err
	}
	edits = append(edits, prov...)
	omit, err := omitSteps(b, t, in.Site.Omit)
	if err != nil {
		return nil, err
	}
	edits = append(edits, omit...)
	todo := map[string][]string{}
	for _, f := range in.Findings {
		for _, st := range f.Steps {
			todo[st] = append(todo[st], f.Do)
		}
	}
	// Each TODO before its step's block, or before the group call that
	// makes the step (its block is in the group's file, which every call
	// shares): once there for all the call's steps it concerns.
	body, err := parseTemplate(b)
	if err != nil {
		return nil, err
	}
	dos := map[int][]string{} // block start -> what to do
	for _, st := range sortedKeys(todo) {
		start, ok := todoPlace(body, t, st)
		if !ok {
			continue // a step the template does not have: the report still says it
		}
		for _, do := range todo[st] {
			if !slices.Contains(dos[start], do) {
				dos[start] = append(dos[start], do)
			}
		}
	}
	for start, list := range dos {
		at := lineStart(b, start)
		indent := string(b[at:start])
		var c strings.Builder
		for _, do := range list {
			c.WriteString(comment(indent+"# TODO(migrate init): ", indent+"#   ", do))
		}
		edits = append(edits, edit{at, at, c.String()})
	}
	b = apply(b, edits)
	s := strings.Replace(string(b), "secrets/demo-identity.txt   # the DEMO identity", "~/.config/migrate/age.key   # your identity (age-keygen)", 1) // a comment of the header: no range names it
	header := comment("# ", "# ", fmt.Sprintf("Written by migrate init on %s from %s, examples/homelab's runbook: the host's names are in site.auto.hcl, and TODO marks what only you can decide (migrate init's report says why).", in.Now.Format(time.DateOnly), hostName(in)))
	return []byte(header + "\n" + s), nil
}

// todoPlace is where the TODO of a step goes in main.hcl: the start of
// its block, or of the group call that makes it.
func todoPlace(body *hclsyntax.Body, t *inventory.Template, step string) (int, bool) {
	r, ok := t.StepRange(step)
	if !ok {
		return 0, false
	}
	if r.Filename == "main.hcl" {
		return r.StartByte, true
	}
	a, err := phases.ParseAddress(step)
	if err != nil || a.Group == "" {
		return 0, false
	}
	for _, phase := range body.Blocks {
		for _, blk := range phase.Body.Blocks {
			if phase.Type == "phase" && blk.Type == "group" && len(blk.Labels) == 1 && blk.Labels[0] == a.Group {
				return blk.DefRange().Start.Byte, true
			}
		}
	}
	return 0, false
}

// edit replaces src[start:end] with text.
type edit struct {
	start, end int
	text       string
}

// apply makes the edits, from the last to the first so that the earlier
// offsets hold; at one offset, a replacement before an insertion, so that
// what is inserted comes first.
func apply(src []byte, edits []edit) []byte {
	slices.SortStableFunc(edits, func(a, b edit) int {
		if a.start != b.start {
			return b.start - a.start
		}
		return (b.end - b.start) - (a.end - a.start)
	})
	out := string(src)
	for _, e := range edits {
		out = out[:e.start] + e.text + out[e.end:]
	}
	return []byte(out)
}

func lineStart(b []byte, at int) int { return bytes.LastIndexByte(b[:at], '\n') + 1 }

// lineEnd is the offset after the newline that ends the line of at.
func lineEnd(b []byte, at int) int {
	if nl := bytes.IndexByte(b[at:], '\n'); nl >= 0 {
		return at + nl + 1
	}
	return len(b)
}

// blockAt is the block of src whose header starts at the loaded range's
// first byte: its whole range (the loader keeps a block's header only).
func blockAt(f *hclsyntax.Body, start int) *hclsyntax.Block {
	var found *hclsyntax.Block
	var walk func(*hclsyntax.Body)
	walk = func(b *hclsyntax.Body) {
		for _, blk := range b.Blocks {
			if blk.DefRange().Start.Byte == start {
				found = blk
			}
			walk(blk.Body)
		}
	}
	walk(f)
	return found
}

func parseTemplate(src []byte) (*hclsyntax.Body, error) {
	f, diags := hclsyntax.ParseConfig(src, "main.hcl", hcl.InitialPos)
	if diags.HasErrors() {
		return nil, fmt.Errorf("the runbook template: %s", diags.Error())
	}
	return f.Body.(*hclsyntax.Body), nil
}

// incusProvider rewrites the provider block that runs the template's
// incus steps (the one of the services role's stop step) for the host:
// an address with the certificates' files instead of the remote
// (Input.Address), the project it was read in (Input.Project).
func incusProvider(src []byte, t *inventory.Template, in Input) ([]edit, error) {
	if in.Address == nil && in.Project == "" {
		return nil, nil
	}
	stop, _ := t.StepRange(t.Step(inventory.RoleServices, "stop"))
	var key string
	for _, s := range t.Runbook.AllSteps() {
		if s.Range == stop {
			key = s.Provider
		}
	}
	var pc *phases.ProviderConfig
	for _, p := range t.Runbook.Providers {
		if p.Key() == key && p.Range.Filename == "main.hcl" {
			pc = p
		}
	}
	if pc == nil {
		return nil, fmt.Errorf("main.hcl: no provider block runs %s, whose provider migrate init sets for the host", t.Step(inventory.RoleServices, "stop"))
	}
	body, err := parseTemplate(src)
	if err != nil {
		return nil, err
	}
	blk := blockAt(body, pc.Range.StartByte)
	if blk == nil {
		return nil, fmt.Errorf("%s: the provider block %s is not where the loader read it", pc.Range, pc.Key())
	}
	start, end := lineStart(src, blk.Range().Start.Byte), lineEnd(src, blk.Range().End.Byte-1)
	f, diags := hclwrite.ParseConfig(src[start:end], "main.hcl", hcl.InitialPos)
	if diags.HasErrors() || len(f.Body().Blocks()) != 1 {
		return nil, fmt.Errorf("%s: the provider block %s: %s", pc.Range, pc.Key(), diags.Error())
	}
	pb := f.Body().Blocks()[0].Body()
	if in.Address != nil {
		pb.RemoveAttribute("remote")
		for _, kv := range [][2]string{{"address", in.Address.URL}, {"client_cert", in.Address.ClientCert}, {"client_key", in.Address.ClientKey}, {"server_cert", in.Address.ServerCert}} {
			if kv[1] != "" {
				pb.SetAttributeValue(kv[0], cty.StringVal(kv[1]))
			}
		}
	}
	if in.Project != "" {
		toks := hclwrite.TokensForValue(cty.StringVal(in.Project))
		toks = append(toks, &hclwrite.Token{Type: hclsyntax.TokenComment, Bytes: []byte("# where migrate init read the old VMs")})
		pb.SetAttributeRaw("project", toks)
	}
	return []edit{{start, end, string(hclwrite.Format(f.Bytes()))}}, nil
}

// omitSteps comments out the steps the host has nothing for (TYPE.NAME
// -> why), each under a line saying why: commented, not deleted, so that
// the user sees what was left out and can take it back. A role's part
// that names only such steps is commented out with them; one that names
// others too keeps those.
func omitSteps(src []byte, t *inventory.Template, omit map[string]string) ([]edit, error) {
	if len(omit) == 0 {
		return nil, nil
	}
	body, err := parseTemplate(src)
	if err != nil {
		return nil, err
	}
	var edits []edit
	for _, st := range sortedKeys(omit) {
		r, ok := t.StepRange(st)
		if !ok || r.Filename != "main.hcl" {
			continue
		}
		blk := blockAt(body, r.StartByte)
		if blk == nil {
			return nil, fmt.Errorf("%s: step %s is not where the loader read it", r, st)
		}
		start, end := lineStart(src, blk.Range().Start.Byte), lineEnd(src, blk.Range().End.Byte-1)
		edits = append(edits, commentOut(src, start, end, fmt.Sprintf("migrate init left out step %s: %s.", st, omit[st])))
	}
	// A service whose stop or serving check is left out measures nothing:
	// its block goes with them (the loader would refuse its references).
	for _, svc := range t.Runbook.Services {
		gone := slices.ContainsFunc(append(slices.Clone(svc.Stop), svc.Serving), func(a phases.Address) bool { _, ok := omit[a.String()]; return ok })
		if !gone || svc.Range.Filename != "main.hcl" {
			continue
		}
		blk := blockAt(body, svc.Range.StartByte)
		if blk == nil {
			return nil, fmt.Errorf("%s: service %q is not where the loader read it", svc.Range, svc.Name)
		}
		start, end := lineStart(src, blk.Range().Start.Byte), lineEnd(src, blk.Range().End.Byte-1)
		edits = append(edits, commentOut(src, start, end, fmt.Sprintf("migrate init left out service %q with its steps.", svc.Name)))
	}
	for _, name := range sortedKeys(t.Runbook.Roles) {
		role := t.Runbook.Roles[name]
		for _, pn := range sortedKeys(role.Parts) {
			p := role.Parts[pn]
			var keep []phases.RoleRef
			for _, ref := range p.Refs {
				if _, gone := omit[ref.Name]; !gone || ref.Kind != phases.RefStep {
					keep = append(keep, ref)
				}
			}
			if len(keep) == len(p.Refs) || p.Range.Filename != "main.hcl" {
				continue
			}
			start, end := lineStart(src, p.Range.StartByte), lineEnd(src, p.Range.EndByte-1)
			if len(keep) == 0 {
				edits = append(edits, commentOut(src, start, end, fmt.Sprintf("migrate init left out part %s of role %q with its steps.", pn, name)))
				continue
			}
			var elems []hclwrite.Tokens
			for _, ref := range keep {
				elems = append(elems, hclwrite.TokensForTraversal(refTraversal(ref)))
			}
			f := hclwrite.NewEmptyFile()
			f.Body().SetAttributeRaw(pn, hclwrite.TokensForTuple(elems))
			indent := string(src[start:p.Range.StartByte])
			edits = append(edits, edit{start, end, indent + string(hclwrite.Format(f.Bytes()))})
		}
	}
	return edits, nil
}

// refTraversal is a role's reference as written: var.NAME, phase.NAME,
// TYPE.NAME, group.CALL.TYPE.NAME or group.CALL["KEY"].TYPE.NAME.
func refTraversal(r phases.RoleRef) hcl.Traversal {
	if r.Kind != phases.RefStep {
		return hcl.Traversal{hcl.TraverseRoot{Name: r.Kind}, hcl.TraverseAttr{Name: r.Name}}
	}
	if r.Step.Group == "" {
		return hcl.Traversal{hcl.TraverseRoot{Name: r.Step.Type}, hcl.TraverseAttr{Name: r.Step.Name}}
	}
	tr := hcl.Traversal{hcl.TraverseRoot{Name: "group"}, hcl.TraverseAttr{Name: r.Step.Group}}
	if r.Step.GroupKey != "" {
		tr = append(tr, hcl.TraverseIndex{Key: cty.StringVal(r.Step.GroupKey)})
	}
	return append(tr, hcl.TraverseAttr{Name: r.Step.Type}, hcl.TraverseAttr{Name: r.Step.Name})
}

// commentOut is the edit that comments out src[start:end] (whole lines)
// under a line saying why.
func commentOut(src []byte, start, end int, why string) edit {
	block := string(src[start:end])
	indent := block[:len(block)-len(strings.TrimLeft(block, " \t"))]
	var c strings.Builder
	c.WriteString(comment(indent+"# ", indent+"#   ", why))
	for _, l := range strings.Split(strings.TrimSuffix(block, "\n"), "\n") {
		if rest, ok := strings.CutPrefix(l, indent); ok && strings.TrimSpace(rest) != "" {
			c.WriteString(indent + "# " + rest + "\n")
		} else {
			c.WriteString(indent + "#\n")
		}
	}
	return edit{start, end, c.String()}
}

func hostName(in Input) string {
	if in.Host == nil {
		return "the host"
	}
	if in.Host.Server.Name != "" {
		return in.Host.Server.Name + " (" + in.Host.Target + ")"
	}
	return in.Host.Target
}

// comment wraps text at 78 columns into comment lines (first before the
// first line, rest before the others).
func comment(first, rest, text string) string {
	lines := strings.Split(wordwrap.WrapString(oneLine(text), uint(78-len(first))), "\n")
	for i := range lines {
		prefix := rest
		if i == 0 {
			prefix = first
		}
		lines[i] = strings.TrimRight(prefix+lines[i], " ")
	}
	return strings.Join(lines, "\n") + "\n"
}

func hclString(s string) string {
	return strings.TrimSpace(string(hclwrite.TokensForValue(cty.StringVal(s)).Bytes()))
}

// Write writes files into dir, which must be empty or absent: each file
// is created with O_EXCL, so none is ever overwritten; on a failure the
// files and directories it made are removed again.
func Write(dir string, files []File) (err error) {
	if err := CheckEmpty(dir); err != nil {
		return err
	}
	var made []string // files and directories, in the order made
	defer func() {
		if err != nil {
			for _, p := range slices.Backward(made) {
				os.Remove(p)
			}
		}
	}()
	mkdir := func(d string) error { return mkdirAll(d, &made) }
	if err := mkdir(dir); err != nil {
		return err
	}
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.Path))
		if err := mkdir(filepath.Dir(p)); err != nil {
			return err
		}
		fh, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, f.Mode)
		if err != nil {
			return err
		}
		made = append(made, p)
		// Synced: the sealed PKI written here is the cluster's only copy
		// of its keys, and must outlive a power cut right after init.
		if _, err := fh.Write(f.Data); err != nil {
			fh.Close()
			return err
		}
		if err := fh.Sync(); err != nil {
			fh.Close()
			return err
		}
		if err := fh.Close(); err != nil {
			return err
		}
	}
	// The directory entries too, each directory once, deepest first.
	for _, d := range slices.Backward(syncOrder(dir, files)) {
		if err := syncDir(d); err != nil {
			return err
		}
	}
	return nil
}

// syncOrder lists dir and every directory the files are in, each once.
func syncOrder(dir string, files []File) []string {
	dirs := []string{dir}
	for _, f := range files {
		d := filepath.Dir(filepath.Join(dir, filepath.FromSlash(f.Path)))
		if !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// syncDir makes the entries made in d durable.
func syncDir(d string) error {
	fh, err := os.Open(d)
	if err != nil {
		return err
	}
	defer fh.Close()
	return fh.Sync()
}

func mkdirAll(d string, made *[]string) error {
	if _, err := os.Stat(d); err == nil {
		return nil
	}
	if parent := filepath.Dir(d); parent != d {
		if err := mkdirAll(parent, made); err != nil {
			return err
		}
	}
	if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	*made = append(*made, d)
	return nil
}

// CheckEmpty says whether dir can take a new runbook: absent, or an
// empty directory.
func CheckEmpty(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case len(entries) > 0:
		var names []string
		for _, e := range entries[:min(len(entries), 3)] {
			names = append(names, e.Name())
		}
		more := ""
		if len(entries) > 3 {
			more = fmt.Sprintf(" and %d more", len(entries)-3)
		}
		return fmt.Errorf("%s is not empty (it has %s%s): migrate init writes a new runbook only into an empty or new directory, and never overwrites a file; choose another directory", dir, strings.Join(names, ", "), more)
	}
	return nil
}
