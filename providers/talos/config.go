package talos

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"filippo.io/age"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/compatibility"
	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"go.yaml.in/yaml/v4"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/sdk"
	"github.com/homelab-migrate/migrate/secret/agefile"
)

// settings is the evaluated provider block, with its files loaded.
type settings struct {
	name        string
	dir         string
	stateDir    string // where files kept with the state go (etcd snapshots)
	endpoints   []string
	nodes       []string
	talosconfig *clientconfig.Config // nil: talosctl's default file
	// talosconfigPath is its file, for messages ("" for the default).
	talosconfigPath string
	contextName     string

	version     string // the pin, with a leading "v"
	k8sVersion  string
	clusterName string
	clusterURL  string
	install     installDisk // install_disk or install_disk_selector (installdisk.go)

	bundle      *secrets.Bundle
	schematic   schematic
	schematicID string // computed locally; adopted() is the factory's
	factoryURL  string // image_factory, without a trailing slash
	factoryHost string // its host: the registry of its installers

	adoptMu  sync.Mutex
	adoption *factorySchematic // the factory's answer, once asked

	identity  age.Identity
	recipient age.Recipient
	noKeyWhy  string // why there is no recipient

	scrub *scrubber // every secret loaded, for scrubbing text
}

// configure reads the provider block: it loads (and decrypts) the
// talosconfig and the secrets bundle, but connects to nothing yet.
func (p *Provider) configure(_ context.Context, req providers.ConfigureRequest) (*Provider, phases.Diagnostics) {
	s, diags := configure(req)
	p.s = s
	return p, s.scrub.Diags(diags)
}

func configure(req providers.ConfigureRequest) (*settings, phases.Diagnostics) {
	s := &settings{name: req.Name, dir: req.Dir, stateDir: req.StateDir, scrub: newScrubber()}
	if s.dir != "" {
		if abs, err := filepath.Abs(s.dir); err == nil {
			s.dir = abs
		}
	}
	var a providerAttrs
	diags := sdk.Decode(req, &a, s.scrub)
	errf := func(summary, format string, args ...any) {
		diags = append(diags, phases.Errorf(summary, format, args...)...)
	}
	if diags.HasErrors() {
		return s, diags
	}
	s.endpoints, s.nodes, s.contextName = a.Endpoints, a.Nodes, a.Context
	if a.Version == "" {
		errf("Missing Required Attribute", "The \"version\" attribute of provider talos %q is required.", req.Name)
	} else {
		s.version = "v" + strings.TrimPrefix(a.Version, "v")
		if _, err := releaseContract(s.version); err != nil {
			errf("Unsupported Talos Version", "The talos provider %q pins version = %q: %v.", req.Name, a.Version, err)
		}
	}
	s.k8sVersion = strings.TrimPrefix(or(a.KubernetesVersion, defaultKubernetes(s.version)), "v")
	s.clusterName, s.clusterURL = a.ClusterName, a.ClusterEndpoint
	s.install = parseInstallDisk(a.InstallDisk, a.InstallDiskSelector, errf)
	schematicYAML, extensions := a.Schematic, a.Extensions
	identityPath, talosconfigPath, secretsPath := a.AgeIdentity, a.Talosconfig, a.Secrets

	// The age identity first: the other files may need it.
	s.identity, s.recipient, s.noKeyWhy = loadIdentity(s.abs(identityPath), errf)
	if s.identity != nil {
		if x, ok := s.identity.(fmt.Stringer); ok {
			s.scrub.Add(x.String())
		}
	}

	if talosconfigPath != "" {
		s.loadTalosconfig(talosconfigPath, errf)
	}
	if s.clusterName == "" {
		s.clusterName = "talos"
	}
	if s.clusterURL == "" {
		if host := firstHost(s.endpoints, s.talosconfig, s.contextName); host != "" {
			s.clusterURL = "https://" + net.JoinHostPort(host, "6443")
		}
	} else if u, err := url.Parse(s.clusterURL); err != nil || u.Scheme != "https" || u.Host == "" {
		errf("Invalid Cluster Endpoint", "cluster_endpoint must be a URL such as https://10.0.0.50:6443, not %q.", s.clusterURL)
	}

	if secretsPath != "" {
		s.loadBundle(secretsPath, errf)
	}

	s.setSchematic(schematicYAML, extensions, errf)
	s.factoryURL = "https://" + FactoryHost
	if a.ImageFactory != "" {
		s.factoryURL = strings.TrimRight(a.ImageFactory, "/")
	}
	if u, err := url.Parse(s.factoryURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		errf("Invalid Image Factory", "image_factory must be the Image Factory's base URL, such as https://%s, not %q.", FactoryHost, s.factoryURL)
	} else {
		s.factoryHost = u.Host
	}

	if s.version != "" {
		if err := checkCompatibility(s.k8sVersion, s.version); err != nil {
			errf("Incompatible Versions", "Kubernetes %s cannot run on Talos %s: %v. Set kubernetes_version to a version that Talos %s supports.", s.k8sVersion, s.version, err, s.version)
		}
	}
	return s, diags
}

// errorf adds an error diagnostic, for the loading of the provider block.
type errorf = func(summary, format string, args ...any)

// loadTalosconfig reads (and decrypts) the talosconfig at path: its
// context (the cluster name defaults to its cluster), its keys learned as
// secrets.
func (s *settings) loadTalosconfig(path string, errf errorf) {
	s.talosconfigPath = s.abs(path)
	b, err := s.readSecretFile(path, "talosconfig")
	if err != nil {
		errf("Cannot Read Talosconfig", "%v", err)
	} else if tc, err := clientconfig.FromBytes(b); err != nil {
		errf("Invalid Talosconfig", "The talosconfig %s cannot be parsed: %v.", path, err)
	} else {
		s.talosconfig = tc
		for _, ctx := range tc.Contexts {
			s.scrub.Add(ctx.Key)
			if k, err := base64.StdEncoding.DecodeString(ctx.Key); err == nil {
				addPEM(s.scrub, k)
			}
		}
		name := s.contextName
		if name == "" {
			name = tc.Context
		}
		if tctx, ok := tc.Contexts[name]; !ok {
			errf("Unknown Talosconfig Context", "The talosconfig %s has no context %q; it has %s.", path, name, strings.Join(contextNames(tc), ", "))
		} else if s.clusterName == "" {
			s.clusterName = tctx.Cluster
		}
	}
}

// loadBundle reads (and decrypts) the secrets bundle at path, its
// secrets learned.
func (s *settings) loadBundle(path string, errf errorf) {
	b, err := s.readSecretFile(path, "secrets bundle")
	if err != nil {
		errf("Cannot Read Secrets Bundle", "%v", err)
	} else if bundle, err := parseBundle(b); err != nil {
		errf("Invalid Secrets Bundle", "The secrets bundle %s cannot be used: %v.", path, err)
	} else {
		s.bundle = bundle
		addBundle(s.scrub, bundle)
	}
}

// setSchematic is the Image Factory schematic: the one given as YAML, or
// one of official extensions.
func (s *settings) setSchematic(schematicYAML string, extensions []string, errf errorf) {
	switch {
	case schematicYAML != "" && len(extensions) > 0:
		errf("Conflicting Attributes", "Set schematic or extensions in the talos provider block, not both: extensions builds a schematic of official extensions.")
	case schematicYAML != "":
		sc, err := parseSchematic([]byte(schematicYAML))
		if err != nil {
			errf("Invalid Schematic", "The schematic is not a valid Image Factory schematic: %v.", err)
		}
		s.schematic = sc
	default:
		s.schematic.Customization.SystemExtensions.OfficialExtensions = extensions
	}
	if id, err := s.schematic.ID(); err == nil {
		s.schematicID = id
	}
}

// checkCompatibility asks machinery whether Kubernetes k8s runs on Talos talos.
func checkCompatibility(k8s, talos string) error {
	kv, err := compatibility.ParseKubernetesVersion(k8s)
	if err != nil {
		return err
	}
	tv, err := compatibility.ParseTalosVersion(&machineapi.VersionInfo{Tag: talos})
	if err != nil {
		return err
	}
	return kv.SupportedWith(tv)
}

// abs resolves a path against the runbook directory.
func (s *settings) abs(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(s.dir, p)
}

// installerImage is the installer of the schematic at the given version,
// on the configured factory's registry, by the ID the factory answered
// (adopt.go).
func (s *settings) installerImage(version string) string {
	return installerImage(s.factoryHost, s.adopted().id, version)
}

func contextNames(tc *clientconfig.Config) []string {
	names := make([]string, 0, len(tc.Contexts))
	for n := range tc.Contexts {
		names = append(names, fmt.Sprintf("%q", n))
	}
	if len(names) == 0 {
		return []string{"none"}
	}
	return names
}

func firstHost(endpoints []string, tc *clientconfig.Config, name string) string {
	if len(endpoints) == 0 && tc != nil {
		if name == "" {
			name = tc.Context
		}
		if c := tc.Contexts[name]; c != nil {
			endpoints = c.Endpoints
		}
	}
	if len(endpoints) == 0 {
		return ""
	}
	e := endpoints[0]
	if u, err := url.Parse(e); err == nil && u.Host != "" {
		e = u.Host
	}
	if h, _, err := net.SplitHostPort(e); err == nil {
		return h
	}
	return e
}

// parseBundle reads a secrets bundle as talosctl gen secrets writes it.
func parseBundle(b []byte) (*secrets.Bundle, error) {
	bundle := &secrets.Bundle{Clock: secrets.NewClock()}
	if err := yaml.NewDecoder(bytes.NewReader(b)).Decode(bundle); err != nil {
		return nil, err
	}
	if bundle.Certs == nil || bundle.Secrets == nil || bundle.Cluster == nil || bundle.TrustdInfo == nil {
		return nil, fmt.Errorf("it lacks cluster, secrets, trustdinfo or certs")
	}
	// The bundle's checks of the library's own release: the fields every
	// supported release needs.
	if err := bundle.Validate(coreconfig.TalosVersionCurrent); err != nil {
		return nil, err
	}
	return bundle, nil
}

// readSecretFile reads a file that may be age-encrypted, decrypting it in
// memory.
func (s *settings) readSecretFile(p, what string) ([]byte, error) {
	b, err := os.ReadFile(s.abs(p))
	if err != nil {
		return nil, fmt.Errorf("reading the %s: %w", what, err)
	}
	if !agefile.IsEncrypted(b) {
		return b, nil
	}
	if s.identity == nil {
		return nil, fmt.Errorf("the %s %s is age-encrypted and no age identity is configured: set age_identity in the provider block or MIGRATE_AGE_IDENTITY (%s)", what, p, s.noKeyWhy)
	}
	plain, err := agefile.Decrypt(b, s.identity)
	if err != nil {
		return nil, fmt.Errorf("decrypting the %s %s: %w", what, p, err)
	}
	return plain, nil
}

// or is *p, or def when the attribute is not set.
func or(p *string, def string) string {
	if p == nil {
		return def
	}
	return *p
}
