package talos

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/validation"
	"gopkg.in/yaml.v3"

	"github.com/homelab-migrate/migrate/phases"
)

// metalMode is the runtime mode of a node installed on metal (or a VM):
// configs are validated as such a node would before anything is sent.
type metalMode struct{}

func (metalMode) String() string        { return "metal" }
func (metalMode) RequiresInstall() bool { return true }
func (metalMode) InContainer() bool     { return false }

var _ validation.RuntimeMode = metalMode{}

// patchFile is one patch as the runbook names it, with its YAML documents
// kept for locating problems.
type patchFile struct {
	name string // as written in the runbook
	data []byte
	docs []*yaml.Node
}

// rendered is a machine config ready to send.
type rendered struct {
	cfg   coreconfig.Provider
	bytes []byte // what is sent: comments off
	hash  string // canonical hash
	image string
	files []*patchFile // the patches, to name a file and line
}

// render builds the machine config of a step: the base from the secrets
// bundle for the pinned version, then the patches, then strict metal
// validation. Problems are diagnostics naming patch files and lines.
func (c *call) render(role string, patchNames []string) (*rendered, phases.Diagnostics) {
	s := c.s
	var diags phases.Diagnostics
	if s.bundle == nil {
		return nil, phases.Errorf("No Secrets Bundle", "%s renders the machine config from the cluster's secrets bundle: set secrets = \"PATH\" in the talos provider block (talosctl gen secrets writes one; it may be age-encrypted).", c.addr)
	}
	typ, err := machine.ParseType(role)
	if err != nil || (typ != machine.TypeControlPlane && typ != machine.TypeWorker) {
		return nil, phases.Errorf("Invalid Attribute Value", "The \"role\" attribute of %s must be \"controlplane\" or \"worker\", not %q.", c.addr, role)
	}
	if s.clusterURL == "" {
		return nil, phases.Errorf("No Cluster Endpoint", "Set cluster_endpoint (https://IP:6443) or endpoints in the talos provider block: %s needs the Kubernetes API endpoint.", c.addr)
	}
	// The config of the release the cluster runs, in that release's
	// shape: 1.13's v1alpha1 sections, 1.14's multi-document Kubernetes
	// config and UnattendedInstallConfig (release.go).
	contract, err := releaseContract(s.version)
	if err != nil {
		return nil, phases.Errorf("Unsupported Talos Version", "%s cannot be rendered: the talos provider pins version = %q: %v.", c.addr, s.version, err)
	}
	image := s.installerImage(s.version)
	in, err := generate.NewInput(s.clusterName, s.clusterURL, s.k8sVersion,
		generate.WithSecretsBundle(s.bundle),
		generate.WithVersionContract(contract),
		generate.WithInstallDisk(s.install.generated()),
		generate.WithInstallImage(image),
	)
	if err != nil {
		return nil, phases.FromError("Cannot Render Machine Config", err)
	}
	base, err := in.Config(typ)
	if err != nil {
		return nil, phases.FromError("Cannot Render Machine Config", err)
	}
	if base, err = s.install.render(base); err != nil {
		return nil, phases.Errorf("Cannot Render Install Disk", "%s: %v.", c.addr, err)
	}

	var files []*patchFile
	var patches []configpatcher.Patch
	for _, name := range patchNames {
		data, err := os.ReadFile(s.abs(name))
		if err != nil {
			diags = append(diags, phases.Diagnostics{{Severity: phases.Error, Summary: "Cannot Read Patch",
				Detail: fmt.Sprintf("The patch %s of %s cannot be read: %v.", name, c.addr, errors.Unwrap(err)), Subject: &phases.Range{Filename: name}}}...)
			continue
		}
		pf := &patchFile{name: name, data: data, docs: yamlDocs(data)}
		p, err := configpatcher.LoadPatch(data)
		if err != nil {
			diags = append(diags, phases.Diagnostics{{Severity: phases.Error, Summary: "Invalid Patch",
				Detail:  fmt.Sprintf("The patch %s is neither a strategic merge patch (machine config documents) nor a JSON patch: %v.", name, err),
				Subject: pf.errorRange(err)}}...)
			continue
		}
		files = append(files, pf)
		patches = append(patches, p)
	}
	if diags.HasErrors() {
		return nil, diags
	}
	if diags := c.patchRelease(files); diags.HasErrors() {
		return nil, diags
	}
	out, err := configpatcher.Apply(configpatcher.WithConfig(base), patches)
	if err != nil {
		return nil, phases.Errorf("Cannot Apply Patches", "Applying the patches of %s (%s) failed: %v.", c.addr, strings.Join(patchNames, ", "), err)
	}
	cfg, err := out.Config()
	if err != nil {
		return nil, phases.Errorf("Cannot Apply Patches", "The patched config of %s cannot be loaded: %v.", c.addr, err)
	}
	if _, err := cfg.Validate(metalMode{}, validation.WithStrict()); err != nil {
		return nil, validationDiags(c.addr, err, files)
	}
	b, err := cfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		return nil, phases.FromError("Cannot Encode Machine Config", err)
	}
	return &rendered{cfg: cfg, bytes: b, hash: hashConfig(cfg), image: image, files: files}, nil
}

// hashConfig is the hash of a config's canonical encoding, so that the
// same config hashes the same whatever its comments and layout.
func hashConfig(cfg coreconfig.Encoder) string {
	b, err := cfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// loadConfig loads a config as a node holds it.
func loadConfig(b []byte) (coreconfig.Provider, error) {
	return configloader.NewFromBytes(b)
}

func yamlDocs(data []byte) []*yaml.Node {
	var docs []*yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		if err := dec.Decode(&n); err != nil {
			if !errors.Is(err, io.EOF) {
				return docs
			}
			return docs
		}
		docs = append(docs, &n)
	}
}

var lineRE = regexp.MustCompile(`line (\d+)`)

// errorRange points at the line a loader error names, or the file.
func (pf *patchFile) errorRange(err error) *phases.Range {
	r := &phases.Range{Filename: pf.name}
	if m := lineRE.FindStringSubmatch(err.Error()); m != nil {
		var n int
		fmt.Sscan(m[1], &n)
		r.StartLine, r.StartCol, r.EndLine, r.EndCol = n, 1, n, 1
	}
	return r
}

// loc is a place in a patch file.
type loc struct {
	file string
	line int
	col  int
}

func (l loc) String() string { return fmt.Sprintf("%s:%d", l.file, l.line) }

func (l loc) rng() *phases.Range {
	return &phases.Range{Filename: l.file, StartLine: l.line, StartCol: l.col, EndLine: l.line, EndCol: l.col + 1}
}

// mapping returns the value of key in a mapping node.
func mapping(n *yaml.Node, key string) (k, v *yaml.Node) {
	if n == nil {
		return nil, nil
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	if n.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i], n.Content[i+1]
		}
	}
	return nil, nil
}

// findPath finds a key path in the documents of the patches: kind "" is
// the v1alpha1 document (no kind); name "" matches any name.
func findPath(files []*patchFile, kind, name string, path ...string) []loc {
	var out []loc
	for _, f := range files {
		for _, d := range f.docs {
			_, k := mapping(d, "kind")
			docKind := ""
			if k != nil {
				docKind = k.Value
			}
			if docKind != kind {
				continue
			}
			if name != "" {
				if _, nv := mapping(d, "name"); nv == nil || nv.Value != name {
					continue
				}
			}
			n := d
			var key *yaml.Node
			for _, p := range path {
				key, n = mapping(n, p)
				if n == nil {
					break
				}
			}
			switch {
			case len(path) == 0:
				root := d
				if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
					root = root.Content[0]
				}
				out = append(out, loc{f.name, root.Line, root.Column})
			case n != nil && key != nil:
				out = append(out, loc{f.name, key.Line, key.Column})
			}
		}
	}
	return out
}

// findKey finds the first key named key anywhere under the documents of
// a kind and name.
func findKey(files []*patchFile, kind, name, key string) []loc {
	var out []loc
	var walk func(f *patchFile, n *yaml.Node)
	walk = func(f *patchFile, n *yaml.Node) {
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == key {
					out = append(out, loc{f.name, n.Content[i].Line, n.Content[i].Column})
				}
				walk(f, n.Content[i+1])
			}
			return
		}
		for _, x := range n.Content {
			walk(f, x)
		}
	}
	for _, f := range files {
		for _, d := range f.docs {
			_, k := mapping(d, "kind")
			if k == nil || k.Value != kind {
				continue
			}
			if name != "" {
				if _, nv := mapping(d, "name"); nv == nil || nv.Value != name {
					continue
				}
			}
			walk(f, d)
		}
	}
	return out
}

func locList(ls []loc) string {
	s := make([]string, len(ls))
	for i, l := range ls {
		s[i] = l.String()
	}
	return strings.Join(s, ", ")
}

// flatten lists the single errors inside machinery's joined errors.
func flatten(err error) []error {
	if err == nil {
		return nil
	}
	if m, ok := err.(interface{ WrappedErrors() []error }); ok {
		var out []error
		for _, e := range m.WrappedErrors() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	if m, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range m.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

var docPrefixRE = regexp.MustCompile(`^([A-Z][A-Za-z0-9]+)(?:/([^:]+))?: `)

// validationDiags turns machinery's validation errors into diagnostics
// that point at the patch lines responsible.
func validationDiags(addr phases.Address, err error, files []*patchFile) phases.Diagnostics {
	var diags phases.Diagnostics
	for _, e := range flatten(err) {
		msg := e.Error()
		d := phases.Diagnostic{Severity: phases.Error, Summary: "Invalid Machine Config"}
		switch {
		case strings.Contains(msg, "hostname is already set in v1alpha1 config"):
			d.Summary = "Hostname Set Twice"
			here := findPath(files, "HostnameConfig", "", "hostname")
			if len(here) == 0 {
				here = findPath(files, "HostnameConfig", "")
			}
			legacyField := "machine.network.hostname"
			legacy := findPath(files, "", "", "machine", "network", "hostname")
			if strings.Contains(msg, "stable hostname") {
				legacyField = "machine.features.stableHostname"
				legacy = findPath(files, "", "", "machine", "features", "stableHostname")
			}
			var parts []string
			if len(here) > 0 {
				parts = append(parts, fmt.Sprintf("a HostnameConfig document sets it at %s", locList(here)))
				d.Subject = here[0].rng()
			}
			if len(legacy) > 0 {
				parts = append(parts, fmt.Sprintf("%s sets it at %s", legacyField, locList(legacy)))
				if d.Subject == nil {
					d.Subject = legacy[0].rng()
				}
			} else {
				parts = append(parts, legacyField+" is set by the base config")
			}
			d.Detail = fmt.Sprintf("The machine config of %s sets the hostname twice: %s. Since Talos 1.12 the hostname belongs in the HostnameConfig document only; remove %s. (machinery: %s)",
				addr, strings.Join(parts, ", and "), legacyField, msg)
		case strings.Contains(msg, "allowSchedulingOnControlPlanes is already set in v1alpha1 config"):
			d = scheduleKeyDiag(addr, msg, files)
		default:
			kind, name, rest := "", "", msg
			if m := docPrefixRE.FindStringSubmatch(msg); m != nil && m[1] != "v1alpha1" {
				kind, name, rest = m[1], m[2], msg[len(m[0]):]
			}
			var at []loc
			if kind != "" {
				if strings.Contains(rest, "selector") || strings.Contains(rest, "<input>") || strings.Contains(rest, "expression") {
					at = findKey(files, kind, name, "match")
				}
				if len(at) == 0 {
					at = findPath(files, kind, name)
				}
			}
			if len(at) > 0 {
				d.Subject = at[0].rng()
				if strings.Contains(rest, "<input>") {
					d.Summary = "Invalid CEL Expression"
				}
				d.Detail = fmt.Sprintf("The %s document at %s does not validate: %s", docName(kind, name), at[0], strings.TrimSpace(rest))
			} else {
				d.Detail = fmt.Sprintf("The machine config of %s does not validate (as a metal node with strict validation would check it): %s", addr, strings.TrimSpace(msg))
				if len(files) > 0 {
					names := make([]string, len(files))
					for i, f := range files {
						names[i] = f.name
					}
					d.Detail += fmt.Sprintf(" (patches: %s)", strings.Join(names, ", "))
				}
			}
		}
		diags = append(diags, d)
	}
	return diags
}

func docName(kind, name string) string {
	if name == "" {
		return kind
	}
	return kind + " " + fmt.Sprintf("%q", name)
}

// scheduleKeyDiag explains Talos 1.14's refusal of the 1.13 way to let
// pods schedule on a control plane: 1.14 renders the control-plane taint
// into the KubeNodeConfig document, which the v1alpha1 key conflicts with.
func scheduleKeyDiag(addr phases.Address, msg string, files []*patchFile) phases.Diagnostic {
	d := phases.Diagnostic{Severity: phases.Error, Summary: "Scheduling Key Of Another Release"}
	where := "the patches"
	if at := findPath(files, "", "", "cluster", "allowSchedulingOnControlPlanes"); len(at) > 0 {
		d.Subject, where = at[0].rng(), at[0].String()
	}
	d.Detail = fmt.Sprintf("The machine config of %s sets cluster.allowSchedulingOnControlPlanes (%s), the Talos 1.13 way; since Talos 1.14 the control-plane taint is in the KubeNodeConfig document, which the key conflicts with. Replace it with a patch deleting the taint:\n\n"+
		"apiVersion: v1alpha1\nkind: KubeNodeConfig\ntaints:\n  node-role.kubernetes.io/control-plane:\n    $patch: delete\n\n(machinery: %s)", addr, where, msg)
	return d
}
