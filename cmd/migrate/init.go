package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"filippo.io/age"
	"github.com/spf13/cobra"

	"github.com/homelab-migrate/migrate/examples/homelab"
	"github.com/homelab-migrate/migrate/inventory"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
	"github.com/homelab-migrate/migrate/providers/plugin"
	"github.com/homelab-migrate/migrate/scaffold"
	"github.com/homelab-migrate/migrate/secret/agefile"
	"github.com/homelab-migrate/migrate/views"
)

// initFlags say which host to read and whom to seal the secrets to.
type initFlags struct {
	remote, configDir, project         string
	address, clientCert, clientKey     string
	serverCert, talosVersion, talosCtx string
	recipients                         []string
	json                               bool
}

func (a *app) initCommand() *cobra.Command {
	var f initFlags
	cmd := &cobra.Command{
		Use:   "init DIR",
		Short: "Read a live Incus host, report what could stop the move, and write a runbook for it into DIR",
		Long: `init reads the Incus host as the incus CLI would (its default remote, or
--remote, or --address with certificates), changing nothing on it: instances,
storage pools and volumes, networks and the hardware. It reports findings,
each with what to do, and writes a runbook into DIR (new or empty): the
rehearsal and the five phases of examples/homelab, the host's names in
site.auto.hcl, fresh secrets sealed to your age recipient, and a TODO wherever
only you can decide. It never overwrites a file.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runInit(cmd.Context(), args[0], f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.remote, "remote", "", "the incus CLI `REMOTE` to read (default: its default remote)")
	fl.StringVar(&f.configDir, "config-dir", "", "the incus CLI's configuration `DIR` (default: $INCUS_CONF, else ~/.config/incus)")
	fl.StringVar(&f.address, "address", "", "the host's HTTPS `URL` instead of a remote, such as https://192.168.1.10:8443")
	fl.StringVar(&f.clientCert, "client-cert", "", "with --address: the client certificate `FILE` (PEM) the host trusts")
	fl.StringVar(&f.clientKey, "client-key", "", "with --address: its key `FILE`")
	fl.StringVar(&f.serverCert, "server-cert", "", "with --address: the host's own certificate `FILE`, pinned")
	fl.StringVar(&f.project, "project", "", "the Incus `PROJECT` (default: the host's default)")
	fl.StringArrayVar(&f.recipients, "recipient", nil, "seal the secrets to this age `RECIPIENT` (age1..., repeatable; default: the identity's in $MIGRATE_AGE_IDENTITY or --age-identity)")
	fl.StringVar(&f.talosVersion, "talos-version", "v1.13.3", "the Talos `VERSION` the new secrets bundle is for")
	fl.StringVar(&f.talosCtx, "talosconfig-context", "home", "the talosconfig's `CONTEXT` name")
	fl.BoolVar(&f.json, "json", false, "print the report as JSON")
	return cmd
}

// initTalosVersions are the releases the written runbook accepts (its
// talos_version variable's validation).
var initTalosVersions = regexp.MustCompile(`^v1\.1[345]\.[0-9]+(-(alpha|beta|rc)\.[0-9]+)?$`)

func (a *app) runInit(ctx context.Context, dir string, f initFlags) error {
	if ctx == nil {
		ctx = context.Background()
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	// Everything that can refuse is asked before anything is written.
	if err := scaffold.CheckEmpty(dir); err != nil {
		return err
	}
	recipients, err := initRecipients(f.recipients)
	if err != nil {
		return err
	}
	if !initTalosVersions.MatchString(f.talosVersion) {
		return fmt.Errorf("--talos-version %q: the runbook runs a Talos 1.13, 1.14 or 1.15 release, such as v1.13.3, v1.14.7 or v1.15.0-beta.0", f.talosVersion)
	}
	// The template, and that it has what init reads of it.
	tmpl, err := inventory.LoadTemplate(homelab.Runbook(), schemas())
	if err != nil {
		return err
	}
	// The talos program makes the new secrets: missing, say so before the
	// host is read.
	if _, err := plugin.Check(talosPlugin()); err != nil {
		return err
	}
	opts, remote, err := initTarget(f)
	if err != nil {
		return err
	}
	c, err := incusapi.New(opts)
	if err != nil {
		return err
	}
	defer c.Close()
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	host, err := inventory.Read(rctx, c)
	if err != nil {
		return fmt.Errorf("reading the host %s: %w", c.Target(), err)
	}
	now := time.Now()
	site, findings, err := inventory.Choose(tmpl, host, now)
	if err != nil {
		return fmt.Errorf("%s: %w", c.Target(), err)
	}
	findings = append(findings, inventory.Check(host, site)...)
	inventory.Sort(findings)

	bundle, tc, err := a.genTalosSecrets(f.talosVersion, f.talosCtx)
	if err != nil {
		return err
	}
	// The example's patches, in the release's documents.
	upgrade, err := a.patchUpgrader(ctx, f.talosVersion, false)
	if err != nil {
		return err
	}
	patch := func(name string, data []byte) ([]byte, error) {
		u, err := upgrade(name, data)
		return u.New, err
	}
	in := scaffold.Input{Host: host, Site: site, Findings: findings, Remote: remote, Recipients: recipients, Project: f.project,
		Talos: scaffold.TalosSecrets{Bundle: bundle, Talosconfig: tc, Version: f.talosVersion}, Patch: patch, Now: now}
	if f.address != "" {
		in.Address = &scaffold.Address{URL: f.address, ClientCert: absOrEmpty(f.clientCert), ClientKey: absOrEmpty(f.clientKey), ServerCert: absOrEmpty(f.serverCert)}
	}
	files, err := scaffold.Render(in)
	if err != nil {
		return err
	}
	if err := scaffold.Write(dir, files); err != nil {
		return fmt.Errorf("writing the runbook: %w", err)
	}
	report := views.InitReport{Host: host, Site: site, Findings: findings, Dir: dir}
	for _, file := range files {
		report.Files = append(report.Files, file.Path)
	}
	if f.json {
		return a.view().InitJSON(report)
	}
	a.view().Init(report)
	return nil
}

// initTarget is how to reach the host, and the remote the runbook names
// ("" with --address).
func initTarget(f initFlags) (incusapi.Options, string, error) {
	if f.address != "" {
		if f.remote != "" {
			return incusapi.Options{}, "", errors.New("--remote and --address both name the host: give one")
		}
		opts := incusapi.Options{URL: f.address, Project: f.project}
		for _, x := range []struct {
			flag, path string
			to         *[]byte
		}{{"--client-cert", f.clientCert, &opts.ClientCert}, {"--client-key", f.clientKey, &opts.ClientKey}, {"--server-cert", f.serverCert, &opts.ServerCert}} {
			if x.path == "" {
				continue
			}
			b, err := os.ReadFile(x.path)
			if err != nil {
				return opts, "", fmt.Errorf("%s: %w", x.flag, err)
			}
			*x.to = b
		}
		if (opts.ClientCert == nil) != (opts.ClientKey == nil) {
			return opts, "", errors.New("--client-cert and --client-key go together")
		}
		return opts, "", nil
	}
	remote := f.remote
	if remote == "" {
		r, err := incusapi.DefaultRemote(f.configDir)
		if err != nil {
			return incusapi.Options{}, "", err
		}
		remote = r
	}
	opts, err := incusapi.RemoteOptions(f.configDir, remote)
	if err != nil {
		return opts, "", err
	}
	if f.project != "" {
		opts.Project = f.project
	}
	return opts, remote, nil
}

// initRecipients are --recipient, else the recipient of the identity
// that will open the secrets.
func initRecipients(flags []string) ([]string, error) {
	if len(flags) > 0 {
		for _, r := range flags {
			if _, err := age.ParseX25519Recipient(r); err != nil {
				return nil, fmt.Errorf("--recipient %q: %w", r, err)
			}
		}
		return flags, nil
	}
	ids, err := agefile.Identities("")
	if errors.Is(err, agefile.ErrNoIdentity) {
		return nil, errors.New("no age recipient to seal the new secrets to: pass --recipient age1..., or set MIGRATE_AGE_IDENTITY (or --age-identity) to your identity file (make one with migrate secrets gen identity, or age-keygen -o ~/.config/migrate/age.key)")
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, id := range ids {
		if x, ok := id.(*age.X25519Identity); ok {
			out = append(out, x.Recipient().String())
		}
	}
	if len(out) == 0 {
		return nil, errors.New("the age identity holds no X25519 key (AGE-SECRET-KEY-1...): pass --recipient age1...")
	}
	return out, nil
}

func absOrEmpty(p string) string {
	if p == "" {
		return ""
	}
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
