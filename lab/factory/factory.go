package factory

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultVersions are the Talos versions the lab's factory builds: the
// two current releases' (REAL-SERVERS.md), and 1.14's current patch.
var DefaultVersions = []string{"v1.13.3", "v1.14.1", "v1.14.7"}

// DefaultExtensions are the official extensions of every version it
// builds: a few of the real list, the brief's among them.
var DefaultExtensions = []string{
	"siderolabs/amd-ucode", "siderolabs/i915", "siderolabs/intel-ucode",
	"siderolabs/iscsi-tools", "siderolabs/qemu-guest-agent", "siderolabs/util-linux-tools",
}

// Options configure a Factory.
type Options struct {
	Versions   []string // default DefaultVersions
	Extensions []string // default DefaultExtensions
	// Owner, when set, is added to every schematic registered that names
	// none, as a factory serving accounts may add fields: the schematic it
	// stores and the ID it answers are then not the ones posted. Image
	// Factory documents its answer as authoritative.
	Owner string
}

// Factory is a running lab Image Factory.
type Factory struct {
	versions   []string
	extensions []string
	owner      string
	srv        *http.Server
	url        string

	mu         sync.Mutex
	schematics map[string]Schematic
}

// Start serves the factory on addr (host:port, port 0 for any).
func Start(addr string, o Options) (*Factory, error) {
	f := New(o)
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("lab factory: %w", err)
	}
	f.srv = &http.Server{Handler: f.Handler(), ReadHeaderTimeout: 10 * time.Second}
	f.url = "http://" + l.Addr().String()
	go f.srv.Serve(l) //nolint:errcheck // ends with Close
	return f, nil
}

// New is a factory not yet serving (Handler serves it).
func New(o Options) *Factory {
	f := &Factory{versions: o.Versions, extensions: o.Extensions, owner: o.Owner, schematics: map[string]Schematic{}}
	if f.versions == nil {
		f.versions = DefaultVersions
	}
	if f.extensions == nil {
		f.extensions = DefaultExtensions
	}
	return f
}

// URL is the factory's base URL (http://host:port).
func (f *Factory) URL() string { return f.url }

// Close stops serving.
func (f *Factory) Close() error {
	if f.srv == nil {
		return nil
	}
	return f.srv.Close()
}

// Register registers a schematic given as YAML, as POST /schematics does:
// the ID of the schematic stored (with Options.Owner added).
func (f *Factory) Register(schematicYAML []byte) (string, error) {
	s, err := ParseSchematic(schematicYAML)
	if err != nil {
		return "", err
	}
	if s.Owner == "" {
		s.Owner = f.owner
	}
	id, err := s.ID()
	if err != nil {
		return "", err
	}
	f.mu.Lock()
	f.schematics[id] = s
	f.mu.Unlock()
	return id, nil
}

// Lookup is the registered schematic of that ID.
func (f *Factory) Lookup(id string) (Schematic, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.schematics[id]
	return s, ok
}

// Extensions are the official extensions of a registered schematic: what
// its installer image carries; ok is false for an unknown schematic.
func (f *Factory) Extensions(id string) (ext []string, ok bool) {
	s, ok := f.Lookup(id)
	return s.Customization.SystemExtensions.OfficialExtensions, ok
}

// Handler serves the factory's HTTP API.
func (f *Factory) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /schematics", f.createSchematic)
	mux.HandleFunc("GET /schematics/{schematic}", f.getSchematic)
	mux.HandleFunc("GET /versions", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, f.versions) })
	mux.HandleFunc("GET /version/{version}/extensions/official", f.officialExtensions)
	mux.HandleFunc("GET /image/{schematic}/{version}/{path}", f.image)
	mux.HandleFunc("HEAD /image/{schematic}/{version}/{path}", f.image)
	mux.HandleFunc("GET /v2/", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, struct{}{}) })
	mux.HandleFunc("GET /v2/{image}/{schematic}/manifests/{tag}", f.manifest)
	mux.HandleFunc("HEAD /v2/{image}/{schematic}/manifests/{tag}", f.manifest)
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v) //nolint:errcheck
}

func (f *Factory) createSchematic(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	id, err := f.Register(body)
	if err != nil {
		http.Error(w, "error parsing schematic: "+err.Error(), http.StatusBadRequest)
		return
	}
	s, _ := f.Lookup(id)
	y, _ := s.Marshal()
	writeJSON(w, http.StatusCreated, struct {
		ID        string `json:"id"`
		Schematic string `json:"schematic"`
	}{id, string(y)})
}

func (f *Factory) getSchematic(w http.ResponseWriter, r *http.Request) {
	s, ok := f.Lookup(r.PathValue("schematic"))
	if !ok {
		http.Error(w, "schematic not found", http.StatusNotFound)
		return
	}
	y, _ := s.Marshal()
	w.Header().Set("Content-Type", "application/yaml")
	w.Write(y) //nolint:errcheck
}

func (f *Factory) knownVersion(v string) bool { return slices.Contains(f.versions, v) }

func (f *Factory) officialExtensions(w http.ResponseWriter, r *http.Request) {
	v := r.PathValue("version")
	if !f.knownVersion(v) {
		http.Error(w, "version not found", http.StatusNotFound)
		return
	}
	type ext struct {
		Name    string `json:"name"`
		Ref     string `json:"ref"`
		Author  string `json:"author"`
		Version string `json:"version"`
	}
	var out []ext
	for _, e := range f.extensions {
		out = append(out, ext{Name: e, Ref: "ghcr.io/" + e, Author: "Sidero Labs", Version: v})
	}
	writeJSON(w, http.StatusOK, out)
}

// resolve checks a schematic and version as an image request needs them:
// the HTTP status and message of a refusal, 0 when fine.
func (f *Factory) resolve(id, version string) (Schematic, int, string) {
	s, ok := f.Lookup(id)
	if !ok {
		return s, http.StatusNotFound, "schematic not found"
	}
	if !f.knownVersion(version) {
		return s, http.StatusNotFound, fmt.Sprintf("version %s not found", version)
	}
	for _, e := range s.Customization.SystemExtensions.OfficialExtensions {
		if !slices.Contains(f.extensions, e) {
			return s, http.StatusBadRequest, fmt.Sprintf("official extension %q is not available for Talos version %s", e, version)
		}
	}
	return s, 0, ""
}

func (f *Factory) image(w http.ResponseWriter, r *http.Request) {
	s, code, msg := f.resolve(r.PathValue("schematic"), r.PathValue("version"))
	if code != 0 {
		http.Error(w, msg, code)
		return
	}
	platform, arch, ok := isoPath(r.PathValue("path"))
	if !ok {
		http.Error(w, fmt.Sprintf("the lab's factory builds only the ISOs <metal|nocloud>-<amd64|arm64>.iso, not %q", r.PathValue("path")), http.StatusNotFound)
		return
	}
	b, err := EncodePlatformISO(platform, r.PathValue("version"), arch, s)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	// In pieces, as a large image arrives: a client sees its progress.
	for len(b) > 0 {
		n := min(len(b), 64<<10)
		if _, err := w.Write(b[:n]); err != nil {
			return
		}
		b = b[n:]
	}
}

// isoPath reads an ISO's name: the factory's <platform>-<arch>.iso, for
// the two platforms the lab boots (nocloud reads its config from a
// cidata drive before any maintenance mode).
func isoPath(path string) (platform, arch string, ok bool) {
	base, ok := strings.CutSuffix(path, ".iso")
	platform, arch, cut := strings.Cut(base, "-")
	if !ok || !cut || (platform != "metal" && platform != "nocloud") || (arch != "amd64" && arch != "arm64") {
		return "", "", false
	}
	return platform, arch, true
}

// manifest is the registry side: an installer image's index.
func (f *Factory) manifest(w http.ResponseWriter, r *http.Request) {
	image, tag := r.PathValue("image"), r.PathValue("tag")
	if !strings.HasSuffix(image, "-installer") {
		registryError(w, http.StatusNotFound, "NAME_UNKNOWN", "repository name not known to registry")
		return
	}
	_, code, msg := f.resolve(r.PathValue("schematic"), tag)
	if code != 0 {
		registryError(w, http.StatusNotFound, "MANIFEST_UNKNOWN", msg)
		return
	}
	body, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests":     []any{},
		"annotations":   map[string]string{"org.opencontainers.image.ref.name": image + "/" + r.PathValue("schematic") + ":" + tag},
	})
	sum := sha256.Sum256(body)
	w.Header().Set("Content-Type", "application/vnd.oci.image.index.v1+json")
	w.Header().Set("Docker-Content-Digest", "sha256:"+hex.EncodeToString(sum[:]))
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(body) //nolint:errcheck
	}
}

func registryError(w http.ResponseWriter, code int, errCode, msg string) {
	writeJSON(w, code, map[string]any{"errors": []map[string]string{{"code": errCode, "message": msg}}})
}
