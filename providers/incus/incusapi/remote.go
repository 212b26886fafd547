package incusapi

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// cliConfig is the part of the incus CLI's config.yml that matters here.
type cliConfig struct {
	DefaultRemote string               `yaml:"default-remote"`
	Remotes       map[string]cliRemote `yaml:"remotes"`
}

type cliRemote struct {
	Addr     string `yaml:"addr"`
	AuthType string `yaml:"auth_type"`
	Project  string `yaml:"project"`
	Protocol string `yaml:"protocol"`
	Public   bool   `yaml:"public"`
}

// DefaultConfigDir is the incus CLI's configuration directory:
// $INCUS_CONF, else ~/.config/incus.
func DefaultConfigDir() (string, error) {
	if d := os.Getenv("INCUS_CONF"); d != "" {
		return d, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("incus: finding the incus CLI config: %w", err)
	}
	return filepath.Join(home, ".config", "incus"), nil
}

// DefaultRemote is the incus CLI's default remote in configDir (default
// DefaultConfigDir()): config.yml's default-remote, "local" when it names
// none or there is no config.
func DefaultRemote(configDir string) (string, error) {
	if configDir == "" {
		d, err := DefaultConfigDir()
		if err != nil {
			return "", err
		}
		configDir = d
	}
	cfgPath := filepath.Join(configDir, "config.yml")
	data, err := os.ReadFile(cfgPath)
	if errors.Is(err, os.ErrNotExist) {
		return "local", nil
	}
	if err != nil {
		return "", fmt.Errorf("incus: reading %s: %w", cfgPath, err)
	}
	var cfg cliConfig
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return "", fmt.Errorf("incus: reading %s: %w", cfgPath, err)
	}
	if cfg.DefaultRemote == "" {
		return "local", nil
	}
	return cfg.DefaultRemote, nil
}

// RemoteOptions builds Options for a remote of the incus CLI, read from
// configDir (default DefaultConfigDir()): config.yml (remotes: addr,
// protocol, project; default-remote when remote is ""), servercerts/<remote>.crt
// (pinned), and client.crt / client.key. "local" and unix:// remotes use the
// unix socket.
func RemoteOptions(configDir, remote string) (Options, error) {
	if configDir == "" {
		d, err := DefaultConfigDir()
		if err != nil {
			return Options{}, err
		}
		configDir = d
	}
	cfgPath := filepath.Join(configDir, "config.yml")
	var cfg cliConfig
	data, err := os.ReadFile(cfgPath)
	switch {
	case err == nil:
		if err := yaml.Unmarshal(data, &cfg); err != nil {
			return Options{}, fmt.Errorf("incus: reading %s: %w", cfgPath, err)
		}
	case errors.Is(err, os.ErrNotExist):
		// No config: only the implicit "local" remote exists.
	default:
		return Options{}, fmt.Errorf("incus: reading %s: %w", cfgPath, err)
	}
	if remote == "" {
		remote = cfg.DefaultRemote
	}
	if remote == "" {
		remote = "local"
	}
	r, ok := cfg.Remotes[remote]
	if !ok {
		if remote == "local" {
			return Options{Socket: DefaultSocket}, nil
		}
		names := make([]string, 0, len(cfg.Remotes))
		for n := range cfg.Remotes {
			names = append(names, n)
		}
		sort.Strings(names)
		return Options{}, fmt.Errorf("incus: no remote %q in %s (known: %s); add it with `incus remote add %s https://HOST:8443`",
			remote, cfgPath, strings.Join(names, ", "), remote)
	}
	if r.Protocol != "" && r.Protocol != "incus" {
		return Options{}, fmt.Errorf("incus: remote %q in %s uses protocol %q: only \"incus\" remotes can manage instances",
			remote, cfgPath, r.Protocol)
	}
	if r.AuthType != "" && r.AuthType != "tls" {
		return Options{}, fmt.Errorf("incus: remote %q in %s uses auth_type %q: only tls (client certificates) is supported",
			remote, cfgPath, r.AuthType)
	}
	opts := Options{Project: r.Project}
	if r.Addr == "" || strings.HasPrefix(r.Addr, "unix:") {
		sock := strings.TrimPrefix(strings.TrimPrefix(r.Addr, "unix:"), "//")
		if sock == "" {
			sock = DefaultSocket
		}
		opts.Socket = sock
		return opts, nil
	}
	opts.URL = r.Addr
	if b, err := os.ReadFile(filepath.Join(configDir, "servercerts", remote+".crt")); err == nil {
		opts.ServerCert = b
	} else if !errors.Is(err, os.ErrNotExist) {
		return Options{}, fmt.Errorf("incus: remote %q: %w", remote, err)
	}
	crt, errC := os.ReadFile(filepath.Join(configDir, "client.crt"))
	key, errK := os.ReadFile(filepath.Join(configDir, "client.key"))
	switch {
	case errC == nil && errK == nil:
		opts.ClientCert, opts.ClientKey = crt, key
	case errors.Is(errC, os.ErrNotExist) && errors.Is(errK, os.ErrNotExist):
		// No client certificate yet: the daemon will say "untrusted".
	case errC != nil && !errors.Is(errC, os.ErrNotExist):
		return Options{}, fmt.Errorf("incus: remote %q: %w", remote, errC)
	case errK != nil && !errors.Is(errK, os.ErrNotExist):
		return Options{}, fmt.Errorf("incus: remote %q: %w", remote, errK)
	default:
		return Options{}, fmt.Errorf("incus: remote %q: %s has client.crt or client.key but not both", remote, configDir)
	}
	return opts, nil
}
