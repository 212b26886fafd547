package talos

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// Image is the talos_image step type.
const Image = "talos_image"

// imageAttrs is a talos_image step.
type imageAttrs struct {
	Path *string `cty:"path" doc:"Where to write the ISO, relative to the runbook; default <user cache dir>/migrate/talos/<schematic ID>/<version>/<platform>-<arch>.iso, outside the runbook."`
	Arch *string `cty:"arch" doc:"The image's architecture: \"amd64\" (default) or \"arm64\"."`
	// Platform: a VM whose first config goes through the Incus host's
	// API boots the nocloud image, which reads it from the config drive.
	Platform *string `cty:"platform" doc:"The image's platform: \"metal\" (default: the node waits in maintenance mode for its first config over the LAN) or \"nocloud\" (it reads its first config from the config drive Incus makes of the VM's cloud-init.user-data: talos_machine_config's first_install = \"nocloud\"); the file is <platform>-<arch>.iso."`
}

// imageOutputs are a talos_image step's outputs.
type imageOutputs struct {
	Path        string `cty:"path"`
	SHA256      string `cty:"sha256"`
	Size        int64  `cty:"size"`
	SchematicID string `cty:"schematic_id"`
	Version     string `cty:"version"`
	Installer   string `cty:"installer"`
	URL         string `cty:"url"`
}

var imageStep = &sdk.StepType[*Provider, imageAttrs, none, none]{
	Name: Image,
	Description: "Fetches the Talos ISO from the Image Factory (the provider's image_factory): registers the provider's schematic " +
		"(its extensions and kernel arguments) with POST /schematics and takes the ID the factory answers as authoritative (the factory may add fields, " +
		"such as an owner: the plan then shows both IDs and the schematic the factory stores), " +
		"checks that the installer of the pinned version exists for it on the factory's registry, then downloads the ISO of that version and schematic " +
		"with progress in the log and its SHA-256. Outputs path, sha256, size, schematic_id (the factory's, pinned in the state: a later answer of another ID is drift), version, installer and url; " +
		"a file already downloaded with the recorded checksum is not fetched again.",
	Rollback: "Nothing to undo: the ISO stays where it was downloaded, for the next run and the volume made from it.",
	Outputs:  imageOutputs{},
	Validate: func(c *handle, a *imageAttrs) phases.Diagnostics {
		if arch := or(a.Arch, "amd64"); arch != "amd64" && arch != "arm64" {
			return phases.Errorf("Invalid Attribute Value", "The \"arch\" attribute of %s must be \"amd64\" or \"arm64\", not %q.", c.Addr, arch)
		}
		if pf := or(a.Platform, "metal"); pf != "metal" && pf != "nocloud" {
			return phases.Errorf("Invalid Attribute Value", "The \"platform\" attribute of %s must be \"metal\" or \"nocloud\", not %q.", c.Addr, pf)
		}
		if a.Path != nil && *a.Path == "" {
			return phases.Errorf("Invalid Attribute Value", "The \"path\" attribute of %s is empty: leave it out for the cache directory, or name a file.", c.Addr)
		}
		return nil
	},
	Read: func(_ context.Context, c *handle, a imageAttrs, prior *sdk.Prior[none, none]) sdk.Read[none] {
		want := recordedImage(prior)
		if want == nil {
			return sdk.Read[none]{Observation: providers.Absent}
		}
		s := c.Settings.s
		answer := s.adopted()
		id := answer.id
		if answer.err != nil {
			id = want.SchematicID // the factory is silent: the file alone is checked
		}
		t, err := s.imageTarget(a, id)
		if err != nil {
			return sdk.Read[none]{Diagnostics: phases.Errorf("No Cache Directory", "%s: %v. Set path.", c.Addr, err)}
		}
		if id != want.SchematicID {
			return sdk.Read[none]{Observation: providers.Drifted, Detail: fmt.Sprintf("the Image Factory at %s now answers ID %s for this schematic; the state pins %s, the ID it answered when %s was downloaded", s.factoryURL, id, want.SchematicID, want.Path)}
		}
		sum, size, err := fileSum(t.path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return sdk.Read[none]{Observation: providers.Absent, Detail: "the ISO " + t.path + " is gone"}
		case err != nil:
			return sdk.Read[none]{Diagnostics: phases.Errorf("Cannot Read ISO", "%s: reading %s: %v.", c.Addr, t.path, err)}
		case t.path != want.Path || sum != want.SHA256 || t.version != want.Version || t.id != want.SchematicID:
			return sdk.Read[none]{Observation: providers.Drifted, Detail: fmt.Sprintf("%s holds sha256 %s (%d bytes), not the ISO of schematic %s at %s downloaded before (sha256 %s)", t.path, short(sum), size, short(t.id), t.version, short(want.SHA256))}
		}
		return sdk.Read[none]{Observation: providers.Present, Outputs: *want}
	},
	Plan: func(ctx context.Context, c *handle, a imageAttrs, prior *sdk.Prior[none, none]) sdk.Plan[none] {
		s := c.Settings.s
		answer := s.adopted()
		t, err := s.imageTarget(a, answer.id)
		if err != nil {
			return sdk.Plan[none]{Diagnostics: phases.Errorf("No Cache Directory", "%s: %v. Set path.", c.Addr, err)}
		}
		if want := recordedImage(prior); want != nil && want.Path == t.path && want.Version == t.version && want.SchematicID == t.id {
			if sum, size, err := fileSum(t.path); err == nil && sum == want.SHA256 {
				return sdk.Plan[none]{Diff: fmt.Sprintf("%s already holds the ISO of schematic %s at Talos %s (%d bytes, sha256 %s): nothing to download", t.path, t.id, t.version, size, sum)}
			}
		}
		f := s.factory()
		if d := f.checkVersion(ctx, c.Addr, t.version); d.HasErrors() {
			return sdk.Plan[none]{Diagnostics: d}
		}
		size := "its size known once the schematic is registered"
		if n, err := f.head(ctx, t.url); err == nil {
			size = fmt.Sprintf("%d bytes", n)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "register schematic %s with %s/schematics (%s)\n", t.id, s.factoryURL, s.schematicSummary())
		if n := answer.note(s.factoryURL); n != "" {
			b.WriteString("schematic: " + n + "\n")
		}
		fmt.Fprintf(&b, "check the installer %s exists (%s)\n", t.installer, f.manifestURL(t.id, t.version))
		fmt.Fprintf(&b, "download %s (%s) to %s, with its sha256", t.url, size, t.path)
		return sdk.Plan[none]{Diff: b.String()}
	},
	Apply: func(ctx context.Context, sc *handle, a imageAttrs, _ none, prior *sdk.Prior[none, none]) sdk.Apply[none, none] {
		c := newCall(sc)
		out, d := c.fetchImage(ctx, a, recordedImage(prior))
		if d.HasErrors() {
			return sdk.Apply[none, none]{Diagnostics: d}
		}
		return sdk.Apply[none, none]{Outputs: out, Identity: out.Path,
			Revert: &sdk.RevertData[none]{Description: "nothing to undo: the ISO " + out.Path + " stays"}}
	},
}

// imageTarget is what a talos_image step fetches, and where to.
type imageTarget struct {
	id, version, arch, path, url, installer string
}

// imageTarget is the image of the schematic of that ID (the factory's).
func (s *settings) imageTarget(a imageAttrs, id string) (imageTarget, error) {
	t := imageTarget{id: id, version: s.version, arch: or(a.Arch, "amd64")}
	file := or(a.Platform, "metal") + "-" + t.arch + ".iso"
	t.url = fmt.Sprintf("%s/image/%s/%s/%s", s.factoryURL, t.id, t.version, file)
	t.installer = s.installerImage(t.version)
	if a.Path != nil {
		t.path = s.abs(*a.Path)
		return t, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return t, fmt.Errorf("no user cache directory for the ISO (%v)", err)
	}
	t.path = filepath.Join(cache, "migrate", "talos", t.id, t.version, file)
	return t, nil
}

// schematicSummary says what the schematic customizes, for the plan.
func (s *settings) schematicSummary() string {
	cz := s.schematic.Customization
	ext, args := "none", "none"
	if e := cz.SystemExtensions.OfficialExtensions; len(e) > 0 {
		ext = strings.Join(e, ", ")
	}
	if len(cz.ExtraKernelArgs) > 0 {
		args = strings.Join(cz.ExtraKernelArgs, " ")
	}
	return "extensions: " + ext + "; kernel arguments: " + args
}

// recordedImage is the outputs of the step's last apply, nil when none.
func recordedImage(prior *sdk.Prior[none, none]) *imageOutputs {
	if prior == nil || prior.Outputs.IsNull() || !prior.Outputs.IsKnown() || !prior.Outputs.Type().IsObjectType() {
		return nil
	}
	get := func(name string) string {
		if !prior.Outputs.Type().HasAttribute(name) {
			return ""
		}
		v := prior.Outputs.GetAttr(name)
		if v.IsNull() || !v.IsKnown() || v.Type() != cty.String {
			return ""
		}
		return v.AsString()
	}
	o := &imageOutputs{Path: get("path"), SHA256: get("sha256"), SchematicID: get("schematic_id"), Version: get("version"), Installer: get("installer"), URL: get("url")}
	if !prior.Outputs.Type().HasAttribute("size") {
		return nil
	}
	if v := prior.Outputs.GetAttr("size"); v.IsKnown() && !v.IsNull() && v.Type() == cty.Number {
		n, _ := v.AsBigFloat().Int64()
		o.Size = n
	}
	if o.Path == "" || o.SHA256 == "" {
		return nil
	}
	return o
}

func (c *call) fetchImage(ctx context.Context, a imageAttrs, was *imageOutputs) (imageOutputs, phases.Diagnostics) {
	f := c.s.factory()
	if d := f.checkVersion(ctx, c.addr, c.s.version); d.HasErrors() {
		return imageOutputs{}, d
	}
	answer := c.s.adopted()
	if answer.err != nil {
		return imageOutputs{}, phases.Errorf("Cannot Register Schematic", "%s: the Image Factory at %s did not register the schematic: %v. Nothing was downloaded.", c.addr, c.s.factoryURL, answer.err)
	}
	t, err := c.s.imageTarget(a, answer.id)
	if err != nil {
		return imageOutputs{}, phases.Errorf("No Cache Directory", "%s: %v. Set path.", c.addr, err)
	}
	c.log.Printf("schematic %s registered with %s (%s)", t.id, c.s.factoryURL, c.s.schematicSummary())
	if n := answer.note(c.s.factoryURL); n != "" {
		c.log.Printf("schematic: %s", n)
	}
	if err := f.installerExists(ctx, t.id, t.version); err != nil {
		return imageOutputs{}, phases.Errorf("Installer Not Found", "%s: the Image Factory has no installer %s: %v. The first install would fail to pull it. Check the version pin and the schematic's extensions. Nothing was downloaded.", c.addr, t.installer, err)
	}
	c.log.Printf("installer %s exists", t.installer)
	out := imageOutputs{Path: t.path, SchematicID: t.id, Version: t.version, Installer: t.installer, URL: t.url}
	if was != nil && was.Path == t.path && was.SchematicID == t.id && was.Version == t.version {
		if sum, size, err := fileSum(t.path); err == nil && sum == was.SHA256 {
			c.log.Printf("%s already downloaded (%d bytes, sha256 %s): nothing to fetch", t.path, size, sum)
			out.SHA256, out.Size = sum, size
			return out, nil
		}
	}
	sum, size, err := f.download(ctx, t.url, t.path, c.log.Printf)
	if err != nil {
		return imageOutputs{}, phases.Errorf("Cannot Download ISO", "%s: downloading %s: %v.", c.addr, t.url, err)
	}
	out.SHA256, out.Size = sum, size
	return out, nil
}

// factoryClient speaks Image Factory's HTTP API.
type factoryClient struct {
	base string
	hc   *http.Client
}

func (s *settings) factory() factoryClient {
	return factoryClient{base: s.factoryURL, hc: &http.Client{}}
}

// call is one bounded metadata request; its body, read whole.
func (f factoryClient) call(ctx context.Context, method, url, ctype string, body []byte) (int, http.Header, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var r io.Reader
	if body != nil {
		r = strings.NewReader(string(body))
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		return 0, nil, nil, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := f.hc.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, resp.Header, b, err
}

// checkVersion refuses a version the factory does not build.
func (f factoryClient) checkVersion(ctx context.Context, addr phases.Address, version string) phases.Diagnostics {
	code, _, b, err := f.call(ctx, http.MethodGet, f.base+"/versions", "", nil)
	if err != nil {
		return phases.Errorf("Cannot Reach Image Factory", "%s: the Image Factory at %s did not answer: %v. Check image_factory in the talos provider block.", addr, f.base, err)
	}
	var versions []string
	if code != http.StatusOK || json.Unmarshal(b, &versions) != nil {
		return phases.Errorf("Not An Image Factory", "%s: GET %s/versions answered %d %q, not a list of versions. Check image_factory in the talos provider block.", addr, f.base, code, clip(string(b)))
	}
	if !slices.Contains(versions, version) {
		return phases.Errorf("Talos Version Not Offered", "%s: the Image Factory at %s builds no image of Talos %s (the provider's version): it offers %s. Pin a version it offers.", addr, f.base, version, clip(strings.Join(versions, ", ")))
	}
	return nil
}

// register posts the schematic: the ID the factory answers, and the
// schematic it stores when its answer carries it ("" otherwise).
func (f factoryClient) register(ctx context.Context, schematicYAML []byte) (id, stored string, err error) {
	code, _, b, err := f.call(ctx, http.MethodPost, f.base+"/schematics", "application/yaml", schematicYAML)
	if err != nil {
		return "", "", err
	}
	if code != http.StatusCreated && code != http.StatusOK {
		return "", "", fmt.Errorf("POST /schematics answered %d: %s", code, clip(strings.TrimSpace(string(b))))
	}
	var r struct {
		ID        string `json:"id"`
		Schematic string `json:"schematic"`
	}
	if err := json.Unmarshal(b, &r); err != nil || r.ID == "" {
		return "", "", fmt.Errorf("POST /schematics answered %q, not {\"id\": ...}", clip(string(b)))
	}
	return r.ID, r.Schematic, nil
}

func (f factoryClient) manifestURL(id, version string) string {
	return fmt.Sprintf("%s/v2/metal-installer/%s/manifests/%s", f.base, id, version)
}

// installerExists asks the factory's registry for the installer's manifest.
func (f factoryClient) installerExists(ctx context.Context, id, version string) error {
	code, _, b, err := f.call(ctx, http.MethodHead, f.manifestURL(id, version), "", nil)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("HEAD %s answered %d %s", f.manifestURL(id, version), code, clip(strings.TrimSpace(string(b))))
	}
	return nil
}

// head is an image's size (Content-Length), as the factory says.
func (f factoryClient) head(ctx context.Context, url string) (int64, error) {
	code, h, _, err := f.call(ctx, http.MethodHead, url, "", nil)
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("HEAD answered %d", code)
	}
	var n int64
	if _, err := fmt.Sscan(h.Get("Content-Length"), &n); err != nil {
		return 0, err
	}
	return n, nil
}

// download writes url to path (through a temporary file beside it),
// saying its progress every quarter, and returns its SHA-256 and size.
func (f factoryClient) download(ctx context.Context, url, path string, logf func(string, ...any)) (string, int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", 0, err
	}
	resp, err := f.hc.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return "", 0, fmt.Errorf("the factory answered %d: %s", resp.StatusCode, clip(strings.TrimSpace(string(b))))
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", 0, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return "", 0, err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o644); err != nil { // an ISO is no secret
		tmp.Close()
		return "", 0, err
	}
	total := resp.ContentLength
	logf("downloading %s (%s) to %s", url, sizeText(total), path)
	h := sha256.New()
	var done int64
	next := int64(1)
	buf := make([]byte, 256<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, err := tmp.Write(buf[:n]); err != nil {
				tmp.Close()
				return "", 0, err
			}
			h.Write(buf[:n])
			done += int64(n)
			if total > 0 && done*4 >= next*total && done < total {
				logf("downloaded %d%% (%d of %d bytes)", done*100/total, done, total)
				next = done*4/total + 1
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			tmp.Close()
			return "", 0, rerr
		}
	}
	if err := tmp.Close(); err != nil {
		return "", 0, err
	}
	if total >= 0 && done != total {
		return "", 0, fmt.Errorf("got %d bytes of %d", done, total)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if old, _, err := fileSum(path); err == nil && old == sum {
		logf("downloaded 100%% (%d bytes, sha256 %s): %s already held it", done, sum, path)
		return sum, done, nil
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", 0, err
	}
	logf("downloaded 100%% (%d bytes, sha256 %s) to %s", done, sum, path)
	return sum, done, nil
}

func sizeText(n int64) string {
	if n < 0 {
		return "size unknown"
	}
	return fmt.Sprintf("%d bytes", n)
}

// fileSum is a file's SHA-256 and size.
func fileSum(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// short is the first 12 characters of a checksum or ID.
func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}
