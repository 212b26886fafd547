package inventory

import (
	"fmt"
	"slices"
	"strings"
)

// checkApps turns the applications' facts into findings: how each is
// installed, and what the move does about what is a risk.
func checkApps(h *Host, s Site) []Finding {
	var fs []Finding
	add := func(code, severity, subject, seen, do string) {
		fs = append(fs, Finding{Code: code, Severity: severity, Subject: subject, Seen: seen, Do: do})
	}
	for _, app := range appsIn(h, s.ServicesVM, s.MatrixVM) {
		f, subject := app.Facts, "app "+app.Name
		held := slices.Contains(apps, app.Name)
		version, image := "", ""
		if held {
			version, image = s.Template.Name(AppVar(app.Name, "version")), s.Template.Name(AppVar(app.Name, "image"))
		}
		do := "Nothing: site.auto.hcl says what the move needs of it."
		if held {
			do = fmt.Sprintf("Nothing: site.auto.hcl's %s and %s follow it, and the plan refuses an image older than %s.", version, image, version)
		}
		add(CodeAppInstall, Info, subject, describe(app.Name, f), do)
		for _, u := range f.Unread {
			what, _, _ := strings.Cut(u, ":")
			sev, do := Info, "Nothing needs it; check by hand if it matters to you."
			if what == "version" && held {
				sev, do = Warning, fmt.Sprintf("Set %s in site.auto.hcl to the release the old VM runs: until then nothing stops the move from copying its database into an older image.", version)
			}
			add(CodeAppUnread, sev, subject, app.Name+": "+u, do)
		}
		if site := s.appSite(app.Name); site != nil && site.Raised {
			add(CodeImageNewer, Info, subject, fmt.Sprintf("the old VM runs %s %s, newer than the example's %s", app.Name, f.Version, s.Template.ExampleImage(app.Name)),
				fmt.Sprintf("Nothing: site.auto.hcl's %s is %s, so the database is not moved into an older release (its migrations run one way).", image, site.Image))
		}
		fs = append(fs, appRisks(app.Name, f)...)
	}
	return fs
}

// appRisks are the findings of an application's install that the move
// handles in a way of its own.
func appRisks(name string, f *AppFacts) []Finding {
	var fs []Finding
	add := func(code, severity, seen, do string) {
		fs = append(fs, Finding{Code: code, Severity: severity, Subject: "app " + name, Seen: seen, Do: do})
	}
	if name == "Synapse" && f.Database != nil {
		switch d := f.Database; {
		case d.Engine == EnginePostgreSQL && (d.Host == "" || d.Host == "localhost" || strings.HasPrefix(d.Host, "127.") || d.Host == "::1" || strings.HasPrefix(d.Host, "/")):
			add(CodeSynapsePostgres, Warning, fmt.Sprintf("Synapse on PostgreSQL (database %s in the VM)", d.Name),
				"Synapse on PostgreSQL: the move runs pg_dump inside the VM while Synapse is stopped and restores the dump where the chart's database reads it (site.auto.hcl: synapse_database = \"psycopg2\"); check that the VM's postgres user can dump "+d.Name+".")
		case d.Engine == EnginePostgreSQL:
			add(CodeSynapsePostgres, Blocker, fmt.Sprintf("Synapse on PostgreSQL at %s, outside the VM (database %s)", d.Host, d.Name),
				"The move dumps the database inside the old VM: dump it from "+d.Host+" by hand (pg_dump) before the ingress-matrix phase, or move that server too.")
		case d.Engine == EngineSQLite && !slices.Contains(f.Tools, "sqlite3"):
			switch {
			case slices.Contains(f.Tools, synapsePython):
				add(CodeNoSQLite3, Info, "no sqlite3 in the VM (Debian only suggests it)", "Nothing: the export uses Synapse's own Python ("+synapsePython+", with its sqlite3 module) to take a consistent copy of "+d.Path+".")
			case slices.Contains(f.Tools, "python3"):
				add(CodeNoSQLite3, Info, "no sqlite3 in the VM", "Nothing: the export uses python3's sqlite3 module to take a consistent copy of "+d.Path+".")
			default:
				add(CodeNoSQLite3, Warning, "no sqlite3 and no Python in the VM", "The export copies "+d.Path+" while Synapse is stopped (the copy is consistent only so); do not start Synapse by hand during the move.")
			}
		}
		if len(f.ConfigFiles) > 1 {
			add(CodeConfD, Info, "Synapse's configuration is split over "+strings.Join(f.ConfigFiles, ", "),
				"Nothing: the move merges them, in the order Synapse reads them, into the one configuration the pod reads.")
		}
	}
	if (name == "Jellyfin" || name == "Frigate") && f.HWAccel == "" {
		add(CodeHWAccelOff, Info, name+" decodes video on the CPU: hardware decoding off",
			"Nothing: the move switches it on (VA-API) in the moved settings when the node has /dev/dri/renderD128, which the rehearsal proves.")
	}
	if name == "Frigate" && f.Kind == KindService {
		add(CodeService, Info, fmt.Sprintf("Frigate runs as the systemd unit %s (%s), not in Compose", f.Package, f.ConfigFiles[0]),
			"Nothing: the move stops it with systemctl stop frigate, and rollback starts it so (site.auto.hcl: frigate_install = \"service\").")
	}
	if name == "Frigate" && f.Kind == KindCompose {
		add(CodeCompose, Info, fmt.Sprintf("Frigate runs as the Docker Compose project %s (%s); there is no frigate.service", f.Package, f.ConfigFiles[0]),
			"Nothing: the move stops it with docker compose -p "+f.Package+" stop, and rollback starts it so (site.auto.hcl: frigate_install = \"compose\").")
	}
	return fs
}

// describe says an application's install in one line.
func describe(name string, f *AppFacts) string {
	parts := []string{name + " " + orUnknown(f.Version)}
	switch f.Kind {
	case KindDebian:
		parts = append(parts, "Debian package "+f.Package)
	case KindCompose:
		parts = append(parts, "Compose project "+f.Package)
	case KindService:
		parts = append(parts, "systemd unit "+f.Package)
	default:
		parts = append(parts, "installed by hand")
	}
	if d := f.Database; d != nil {
		if d.Engine == EngineSQLite {
			parts = append(parts, "database SQLite "+d.Path)
		} else {
			parts = append(parts, fmt.Sprintf("database PostgreSQL %s on %s", d.Name, orDefault(d.Host, "localhost")))
		}
	}
	if len(f.ConfigFiles) > 0 {
		parts = append(parts, "config "+strings.Join(f.ConfigFiles, ", "))
	}
	if len(f.LibraryPaths) > 0 {
		parts = append(parts, "paths "+strings.Join(f.LibraryPaths, ", "))
	}
	if len(f.Users) > 0 {
		parts = append(parts, "users "+strings.Join(f.Users, ", "))
	}
	if name == "Jellyfin" || name == "Frigate" {
		parts = append(parts, "hardware decoding "+orDefault(f.HWAccel, "off"))
	}
	return strings.Join(parts, "; ")
}

func (s *Site) appSite(app string) *AppSite {
	switch app {
	case "Jellyfin":
		return &s.Apps.Jellyfin
	case "Synapse":
		return &s.Apps.Synapse
	case "Frigate":
		return &s.Apps.Frigate
	}
	return nil
}

func orUnknown(v string) string { return orDefault(v, "(version unknown)") }

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
