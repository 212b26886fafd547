package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/homelab-migrate/migrate/lab/home"
	"github.com/homelab-migrate/migrate/lab/incushost"
	"github.com/homelab-migrate/migrate/lab/kubecp"
	"github.com/homelab-migrate/migrate/lab/labenv"
	"github.com/homelab-migrate/migrate/views"
)

func (a *app) serveCommand() *cobra.Command {
	var dir string
	var block int
	var debian bool
	var host incushost.OldHost
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the lab home server until Ctrl-C or SIGTERM",
		Long: `Run the lab home server until Ctrl-C or SIGTERM: an Incus host holding the
old VMs (services, matrix, k3s), as an IncusOS host: HTTPS only, pools
local and tank (its data volume), the NAT bridge incusbr0 and a bridge to
the LAN, whose router leases addresses by MAC. Its VMs booted from the
Talos ISO become Talos nodes, installed from their config drive (a nocloud
ISO and the instance's cloud-init.user-data) or in maintenance mode (a
real Kubernetes after their bootstrap); the Image Factory (the ISO) and the homeserver's public address of
examples/homelab (the router's forward of 443 to the node's ingress, NodePort 30443) are there too. In another shell,
eval "$(migrate-lab env)" points migrate at it.

SIGUSR1 makes the homeserver's federation API fail (503), SIGUSR2 heals it.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			var oldHost *incushost.OldHost
			if debian {
				oldHost = &host
			}
			return a.serve(c.Context(), dir, block, oldHost)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", labenv.DefaultDir(), "the lab's directory `D`")
	cmd.Flags().IntVar(&block, "address-block", 0, "the VMs get addresses 127.`B`.1.N, on the LAN 127.B.200.N (0: 127.0.1.N); another block lets two labs run side by side")
	cmd.Flags().BoolVar(&debian, "debian", true, "the old VMs are Debian 12 hosts (a debootstrap root, built once as root) with the apps as their packaging installs them; --debian=false: busybox VMs with the apps' files only")
	cmd.Flags().StringVar(&host.SynapseDB, "synapse-db", "sqlite3", "with --debian: Synapse's database, `sqlite3` or psycopg2 (PostgreSQL 15 in the matrix VM)")
	cmd.Flags().StringVar(&host.SynapseVersion, "synapse-version", incushost.DefaultSynapseVersion, "with --debian: the old Synapse's `version`")
	cmd.Flags().StringVar(&host.JellyfinVersion, "jellyfin-version", incushost.DefaultJellyfinVersion, "with --debian: the old Jellyfin's `version`")
	cmd.Flags().StringVar(&host.FrigateVersion, "frigate-version", incushost.DefaultFrigateVersion, "with --debian: the old Frigate's `version` (its Compose image tag)")
	cmd.Flags().BoolVar(&host.FrigateService, "frigate-service", false, "with --debian: the old Frigate runs as its own frigate.service (docker run) instead of a Docker Compose project")
	cmd.Flags().BoolVar(&host.HWAccel, "hwaccel", false, "with --debian: hardware decoding on in the old Jellyfin and Frigate (off: as on a VM without a GPU)")
	return cmd
}

func (a *app) serve(ctx context.Context, dir string, block int, oldHost *incushost.OldHost) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := labenv.Read(dir); err == nil {
		return fmt.Errorf("a lab already runs in %s: stop it first, or give another --dir", dir)
	}
	h, err := home.Start(ctx, home.Options{Dir: dir, Log: logWriter{}, AddressBlock: block, OldHost: oldHost})
	if err != nil {
		return err
	}
	defer h.Close()
	// The first bootstrap needs the Kubernetes binaries: build them now
	// (once, cached) rather than while a phase waits for them.
	go func() {
		if dir, err := kubecp.Binaries(ctx, logf); err != nil && ctx.Err() == nil {
			logf("the Kubernetes binaries could not be built: %v (a Talos VM's bootstrap will try again)", err)
		} else if err == nil {
			logf("the Kubernetes binaries are ready in %s", dir) // migrate-lab demo waits for this line
		}
	}()
	faults := make(chan os.Signal, 1)
	signal.Notify(faults, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		for sig := range faults {
			h.FailFederation(sig == syscall.SIGUSR1)
			if sig == syscall.SIGUSR1 {
				logf("the federation endpoint %s now fails (SIGUSR1)", h.MatrixURL()+home.FederationPath)
			} else {
				logf("the federation endpoint %s answers again (SIGUSR2)", h.MatrixURL()+home.FederationPath)
			}
		}
	}()
	up := views.LabUp{Dir: h.Dir(), Incus: "https://" + h.HTTPSAddr(), DataDir: h.DataDir()}
	if dir != labenv.DefaultDir() {
		up.EnvFlag = " --dir " + dir
	}
	a.view().LabServing(up)
	<-ctx.Done()
	a.view().LabStopping()
	return h.Close()
}

// logWriter writes the lab's log lines to stderr.
type logWriter struct{}

func (logWriter) Write(p []byte) (int, error) {
	for _, l := range strings.SplitAfter(string(p), "\n") {
		if l != "" {
			fmt.Fprint(os.Stderr, "lab: "+l)
		}
	}
	return len(p), nil
}
