package inventory

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"

	"github.com/homelab-migrate/migrate/versions"
)

// apps are the applications whose release the runbook holds: each has
// a role of its name (lower case) with parts version and image.
var apps = []string{"Jellyfin", "Synapse", "Frigate"}

// ExampleImage is the template's image of an application (the default
// of its image variable): what the runbook runs when the old VM's release
// could not be read or is older.
func (t *Template) ExampleImage(app string) string { return t.Default(AppVar(app, "image")) }

// AppSite is an application's release in the runbook: the version the
// old VM runs (the floor) and the image the node runs, never older.
type AppSite struct {
	Version string `json:"version,omitempty"` // as read: 10.10.7+deb12
	Image   string `json:"image"`
	// Raised: the image is newer than the example's, to match Version.
	Raised bool `json:"raised,omitempty"`
}

// AppsSite are the runbook's application variables, from what was read.
type AppsSite struct {
	Jellyfin, Synapse, Frigate AppSite
	SynapseDatabase            string   `json:"synapse_database,omitempty"` // sqlite3 or psycopg2
	FrigateInstall             string   `json:"frigate_install,omitempty"`  // compose or service
	JellyfinHWAccel            string   `json:"jellyfin_hwaccel,omitempty"` // none, vaapi, qsv
	FrigateHWAccel             string   `json:"frigate_hwaccel,omitempty"`
	JellyfinLibraryPaths       []string `json:"jellyfin_library_paths,omitempty"`
	SambaUsers                 []string `json:"samba_users,omitempty"`
}

// chooseApps fills the application variables from the facts read in the
// role VMs.
func chooseApps(h *Host, s *Site) {
	a := &s.Apps
	appSite := s.Template.appSite
	a.Jellyfin, a.Synapse, a.Frigate = appSite("Jellyfin", ""), appSite("Synapse", ""), appSite("Frigate", "")
	for _, app := range appsIn(h, s.ServicesVM, s.MatrixVM) {
		f := app.Facts
		switch app.Name {
		case "Jellyfin":
			a.Jellyfin = appSite(app.Name, f.Version)
			a.JellyfinHWAccel = cmp.Or(f.HWAccel, "none")
			a.JellyfinLibraryPaths = f.LibraryPaths
		case "Synapse":
			a.Synapse = appSite(app.Name, f.Version)
			a.SynapseDatabase = "sqlite3"
			if f.Database != nil && f.Database.Engine == EnginePostgreSQL {
				a.SynapseDatabase = "psycopg2"
			}
		case "Frigate":
			a.Frigate = appSite(app.Name, f.Version)
			a.FrigateHWAccel = f.HWAccel
			a.FrigateInstall = "service"
			if f.Kind == KindCompose {
				a.FrigateInstall = "compose"
			}
		case "Samba":
			a.SambaUsers = f.Users
		}
	}
}

// appsIn are the applications with facts in the named instances.
func appsIn(h *Host, names ...string) []App {
	var out []App
	for _, n := range names {
		if i := h.Instance(n); i != nil {
			for _, app := range i.Apps {
				if app.Facts != nil {
					out = append(out, app)
				}
			}
		}
	}
	return out
}

// appSite is the release of an application that runs version: the
// example's image, or one of version when the example's is older.
func (t *Template) appSite(app, version string) AppSite {
	image := t.ExampleImage(app)
	s := AppSite{Version: version, Image: image}
	read, ok := versions.Parse(version)
	if !ok || !versions.Older(versions.Tag(image), version) {
		return s
	}
	s.Image, s.Raised = versions.Repository(image)+":"+imageTag(app, read), true
	return s
}

// imageTag writes a version as the application's images tag it:
// Synapse's v1.120.2 and v1.121.0rc1, Jellyfin's and Frigate's 10.10.7
// and 0.15.0-beta2.
func imageTag(app string, v versions.Version) string {
	parts := make([]string, len(v.Numbers))
	for i, n := range v.Numbers {
		parts[i] = strconv.Itoa(n)
	}
	tag := strings.Join(parts, ".")
	if app == "Synapse" {
		tag = "v" + tag
		if v.Pre != "" {
			tag += v.Pre + strconv.Itoa(v.PreNum)
		}
		return tag
	}
	if v.Pre != "" {
		tag += fmt.Sprintf("-%s%d", v.Pre, v.PreNum)
	}
	return tag
}
