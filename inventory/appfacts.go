package inventory

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
)

// How an application is installed.
const (
	KindDebian  = "debian-package" // a Debian package (dpkg-query knows it)
	KindCompose = "compose"        // a Docker Compose project
	KindService = "service"        // a systemd unit of its own (Frigate's may run its container with docker run)
	KindBinary  = "binary"         // files and a unit of its own, no package
)

// Database engines.
const (
	EngineSQLite     = "sqlite"
	EnginePostgreSQL = "postgresql"
)

// AppFacts are an application as it is installed in an old VM: what the
// move copies and what it must not run older than.
type AppFacts struct {
	Kind    string `json:"kind"`              // KindDebian, KindCompose, KindService or KindBinary
	Package string `json:"package,omitempty"` // the Debian package, the Compose project, or the unit
	// Version as the install names it: the package's (10.10.7+deb12),
	// the Compose image's tag (0.14.1); "" when it could not be read.
	Version string `json:"version,omitempty"`
	// ConfigFiles are the files of its configuration, each included one
	// (conf.d) too, in the order the application reads them.
	ConfigFiles  []string  `json:"config_files,omitempty"`
	Database     *Database `json:"database,omitempty"`
	DataPaths    []string  `json:"data_paths,omitempty"`    // where its state lives
	LibraryPaths []string  `json:"library_paths,omitempty"` // the media or shares its settings name
	Users        []string  `json:"users,omitempty"`         // names only: never a password or a hash
	// HWAccel is the hardware decoding it is set for ("" when off).
	HWAccel string `json:"hwaccel,omitempty"`
	// Tools are the programs the move's export can use in the VM:
	// "sqlite3", "python3", or the path of an application's own Python.
	Tools []string `json:"tools,omitempty"`
	// Unread says what could not be read, and why.
	Unread []string `json:"unread,omitempty"`
}

// Database is where an application keeps its database.
type Database struct {
	Engine string `json:"engine"`         // EngineSQLite or EnginePostgreSQL
	Path   string `json:"path,omitempty"` // SQLite: the file
	Name   string `json:"name,omitempty"` // PostgreSQL: the database
	Host   string `json:"host,omitempty"` // PostgreSQL: the server ("" or localhost: in the VM)
}

// vm reads inside one instance: files through the files API, and the
// read-only commands of readOnlyCommands through exec.
type vm struct {
	ctx  context.Context
	c    *incusapi.Client
	name string
}

// maxOutput bounds what a command's output may bring back.
const maxOutput = 1 << 20

// run runs a read-only command and returns its output when it exits 0;
// ok is false when the program is absent or fails. The output files the
// daemon keeps of it are deleted (FollowExec): the host is left as it was.
func (v vm) run(argv ...string) (out string, ok bool) {
	if !readOnly(argv) {
		return "", false // not one of the commands doc.go promises: never sent
	}
	ctx, cancel := context.WithTimeout(v.ctx, 60*time.Second)
	defer cancel()
	e, err := v.c.StartExec(ctx, v.name, incusapi.ExecPost{Command: argv, Environment: map[string]string{"LC_ALL": "C", "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}})
	if err != nil {
		return "", false
	}
	var stdout limited
	code, err := v.c.FollowExec(ctx, e, &stdout, io.Discard, 100*time.Millisecond)
	if err != nil || code != 0 {
		return "", false
	}
	return stdout.String(), true
}

// file is a file's bytes (up to 256 KiB); nil when absent or unreadable.
func (v vm) file(p string) []byte { return readFile(v.ctx, v.c, v.name, p) }

// exists says whether a path exists in the instance.
func (v vm) exists(p string) bool {
	_, err := v.c.StatFile(v.ctx, v.name, p)
	return err == nil
}

// dir lists a directory's entries, sorted; nil when it is none.
func (v vm) dir(p string) []string {
	fi, r, entries, err := v.c.GetFile(v.ctx, v.name, p)
	if r != nil {
		r.Close()
	}
	if err != nil || fi == nil || fi.Type != "directory" {
		return nil
	}
	slices.Sort(entries)
	return entries
}

// limited keeps at most maxOutput bytes.
type limited struct{ bytes.Buffer }

func (l *limited) Write(p []byte) (int, error) {
	if room := maxOutput - l.Len(); room > 0 {
		l.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// readOnlyCommands are the only commands init runs in an old VM, with
// the number of operands each takes after them (a package, a database);
// none of them writes (inventory/doc.go lists them).
var readOnlyCommands = []struct {
	argv     []string
	operands int
}{
	{[]string{"dpkg-query", "-W", "-f=${Version}"}, 1},
	{[]string{"docker", "compose", "ls", "--all", "--format", "json"}, 0},
	{[]string{"pdbedit", "-L"}, 0},
	{[]string{"sh", "-c", "command -v sqlite3; command -v python3"}, 0},
}

func readOnly(argv []string) bool {
	for _, c := range readOnlyCommands {
		if len(argv) == len(c.argv)+c.operands && slices.Equal(argv[:len(c.argv)], c.argv) {
			return true
		}
	}
	return false
}

// packageVersion is the version of the first of the packages installed.
func (v vm) packageVersion(pkgs ...string) (pkg, version string) {
	for _, p := range pkgs {
		if out, ok := v.run("dpkg-query", "-W", "-f=${Version}", p); ok && strings.TrimSpace(out) != "" {
			return p, strings.TrimSpace(out)
		}
	}
	return "", ""
}

// tools are which of sqlite3 and python3 the VM's PATH has.
func (v vm) tools() []string {
	out, _ := v.run("sh", "-c", "command -v sqlite3; command -v python3")
	var found []string
	for _, l := range strings.Fields(out) {
		found = append(found, path.Base(l))
	}
	return found
}

// composeProject is a project `docker compose ls` lists.
type composeProject struct {
	Name, Status, ConfigFiles string
}

func (v vm) composeProjects() ([]composeProject, bool) {
	out, ok := v.run("docker", "compose", "ls", "--all", "--format", "json")
	if !ok {
		return nil, false
	}
	var ps []composeProject
	if json.Unmarshal([]byte(out), &ps) != nil {
		return nil, false
	}
	return ps, true
}

// xmlValues are the texts of an element in an XML file (a flat look:
// the files init reads are Jellyfin's, one value per element).
func xmlValues(b []byte, element string) []string {
	re := regexp.MustCompile(`<` + regexp.QuoteMeta(element) + `>\s*([^<]*?)\s*</` + regexp.QuoteMeta(element) + `>`)
	var out []string
	for _, m := range re.FindAllSubmatch(b, -1) {
		out = append(out, string(m[1]))
	}
	return out
}

// shellVars are the NAME=value lines of a file like /etc/default/jellyfin.
func shellVars(b []byte) map[string]string {
	vars := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "export "))
		k, val, ok := strings.Cut(l, "=")
		if !ok || strings.HasPrefix(k, "#") || strings.ContainsAny(k, " \t") {
			continue
		}
		vars[k] = strings.Trim(val, `"'`)
	}
	return vars
}
