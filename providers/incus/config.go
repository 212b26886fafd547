package incus

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// block is the provider block's attributes.
type block struct {
	Remote     string `cty:"remote" doc:"A remote of the incus CLI's configuration (config.yml, servercerts/, client.crt/key in config_dir), such as \"myhost\"; \"local\" is the unix socket. Without remote, address and socket: the incus CLI's default remote (default-remote in config.yml; the local socket when none is chosen)."`
	ConfigDir  string `cty:"config_dir" doc:"The incus CLI's configuration directory, ~/.config/incus by default."`
	Address    string `cty:"address" doc:"The daemon's HTTPS URL, such as https://192.168.1.10:8443, instead of a remote."`
	Socket     string `cty:"socket" doc:"The daemon's unix socket, /var/lib/incus/unix.socket by default."`
	ClientCert string `cty:"client_cert" doc:"With address: the client certificate (PEM), relative to the runbook; default config_dir's client.crt."`
	ClientKey  string `cty:"client_key" doc:"With address: the client key (PEM), relative to the runbook; default config_dir's client.key."`
	ServerCert string `cty:"server_cert" doc:"With address: the server's own certificate (PEM), pinned; without it the system's roots verify the server."`
	Project    string `cty:"project" doc:"The Incus project, the daemon's default when unset."`
}

// settings is the evaluated provider block.
type settings struct {
	opts incusapi.Options
	// where names the daemon in messages: a socket, a URL or a remote.
	where string
	// clientCert is the client certificate's path, for advice on trusting it.
	clientCert string
	// dir is the runbook directory: relative paths of steps start there.
	dir string
}

// configure turns the provider block into client options. Nothing is
// contacted yet: an unreachable daemon is reported by the first step.
func configure(req providers.ConfigureRequest) (*settings, phases.Diagnostics) {
	var b block
	if diags := sdk.Decode(req, &b, nil); diags.HasErrors() {
		return nil, diags
	}
	what := fmt.Sprintf("provider incus %q", req.Name)
	s := &settings{dir: req.Dir}
	if s.dir != "" {
		if abs, err := filepath.Abs(s.dir); err == nil {
			s.dir = abs
		}
	}
	configDir := defaultConfigDir()
	if b.ConfigDir != "" {
		configDir = s.abs(b.ConfigDir)
	}
	count := 0
	for _, x := range []string{b.Remote, b.Address, b.Socket} {
		if x != "" {
			count++
		}
	}
	if count > 1 {
		return nil, phases.Errorf("Conflicting Attributes", "Set one of remote, address and socket in %s: remote names a remote of the incus CLI's config, address an HTTPS URL, socket the local unix socket.", what)
	}
	var diags phases.Diagnostics
	switch {
	case b.Address != "":
		diags = s.byAddress(b, configDir, what)
	case b.Socket != "":
		s.opts.Socket = s.abs(b.Socket)
		s.where = "unix://" + s.opts.Socket
	case b.Remote != "" && b.Remote != "local":
		diags = s.byRemote(b, configDir, what)
	default:
		// As the incus CLI: its default remote (`incus remote switch`),
		// the local socket unless one was chosen.
		remote, err := incusapi.DefaultRemote(configDir)
		if err != nil {
			return nil, phases.Errorf("Unreadable Incus Configuration", "%s names no remote, so it uses the incus CLI's default remote, but %v. Fix the file, or set remote, address or socket.", what, err)
		}
		if remote != "local" {
			b.Remote = remote
			diags = s.byRemote(b, configDir, what)
			break
		}
		s.where = "the local unix socket"
		if sock := os.Getenv("INCUS_SOCKET"); sock != "" {
			s.where = "unix://" + sock
		}
	}
	if b.Project != "" {
		s.opts.Project = b.Project
	}
	if diags.HasErrors() {
		return nil, diags
	}
	return s, nil
}

// abs resolves a path of the provider block: relative to the runbook, or
// to the home directory with ~/.
func (s *settings) abs(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	if strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, p[2:])
		}
	}
	return filepath.Join(s.dir, p)
}

// byAddress points s at an HTTPS address, with the block's certificates or
// else the incus CLI's own client certificate.
func (s *settings) byAddress(b block, configDir, what string) phases.Diagnostics {
	var diags phases.Diagnostics
	s.opts.URL = b.Address
	s.where = b.Address
	clientCert, clientKey := b.ClientCert, b.ClientKey
	if clientCert == "" && clientKey == "" {
		// The incus CLI's own client certificate, as `incus remote add` uses.
		if _, err := os.Stat(filepath.Join(configDir, "client.crt")); err == nil {
			clientCert, clientKey = filepath.Join(configDir, "client.crt"), filepath.Join(configDir, "client.key")
		}
	}
	if (clientCert == "") != (clientKey == "") {
		diags = append(diags, phases.Errorf("Incomplete Client Certificate", "Set both client_cert and client_key in %s, or neither.", what)...)
	}
	read := func(attr, p string) []byte {
		if p == "" {
			return nil
		}
		b, err := os.ReadFile(s.abs(p))
		if err != nil {
			diags = append(diags, phases.Errorf("Cannot Read "+attrTitle(attr), "The %s of %s cannot be read: %v.", attr, what, err)...)
		}
		return b
	}
	s.opts.ClientCert = read("client_cert", clientCert)
	s.opts.ClientKey = read("client_key", clientKey)
	s.opts.ServerCert = read("server_cert", b.ServerCert)
	s.clientCert = s.abs(clientCert)
	return diags
}

// byRemote points s at a remote of the incus CLI's configuration, whose
// certificates come with it.
func (s *settings) byRemote(b block, configDir, what string) phases.Diagnostics {
	o, err := incusapi.RemoteOptions(configDir, b.Remote)
	if err != nil {
		return phases.Errorf("Unknown Incus Remote", "The remote %q of %s cannot be used with the incus CLI's configuration in %s: %v. List the remotes with `incus remote list`, or set address, client_cert, client_key and server_cert instead.", b.Remote, what, configDir, err)
	}
	s.opts = o
	s.where = fmt.Sprintf("remote %q (%s)", b.Remote, firstNonEmpty(o.URL, "unix://"+o.Socket))
	s.clientCert = filepath.Join(configDir, "client.crt")
	if b.ClientCert != "" || b.ClientKey != "" || b.ServerCert != "" {
		return phases.Errorf("Conflicting Attributes", "%s names the remote %q, whose certificates come from %s; client_cert, client_key and server_cert go with address instead.", what, b.Remote, configDir)
	}
	return nil
}

func attrTitle(a string) string {
	parts := strings.Split(a, "_")
	for i, p := range parts {
		if p != "" {
			parts[i] = strings.ToUpper(p[:1]) + p[1:]
		}
	}
	return strings.Join(parts, " ")
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" && x != "unix://" {
			return x
		}
	}
	return ""
}

// defaultConfigDir is the incus CLI's configuration directory.
func defaultConfigDir() string {
	if d, err := incusapi.DefaultConfigDir(); err == nil {
		return d
	}
	return filepath.Join(os.Getenv("HOME"), ".config", "incus")
}
