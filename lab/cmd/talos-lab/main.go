// Command talos-lab runs one simulated Talos node (package lab/talosnode)
// for demos: the machine API over gRPC with mTLS, a talosconfig to reach it
// and the secrets bundle its machine config was generated from.
//
//	talos-lab --dir DIR --listen 127.0.0.1:50000
//	talos-lab --dir DIR --maintenance --disk name=/dev/sda,size=32GiB,model=QEMU --disk name=/dev/sdb,size=150GiB
//
// With --maintenance a DIR without an installed config starts as a node
// booted from the Talos ISO: the maintenance API over self-signed TLS
// (talosctl --insecure), waiting for its first config; it then installs
// and serves the installed node's mTLS API. --disk (repeated) or
// --disks-file (a YAML list with the same keys) give the machine's disks.
// With --fall-back-at-next-upgrade the next upgrade installs, but its
// partition fails to boot and the node boots the other one again: it
// comes back running what it ran (talosctl get extensions, version).
//
// It runs until SIGINT or SIGTERM. The node's config, etcd state, version
// and simulated filesystem stay in DIR, so a restart keeps them. While it
// serves, DIR/ready holds its address: a script started it in the
// background waits for that file (the talosconfig is there from an earlier
// start already).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/homelab-migrate/migrate/lab/talosnode"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "talos-lab:", err)
		os.Exit(1)
	}
}

func run() error {
	opts, listen, err := parseFlags()
	if err != nil {
		return err
	}

	ready := filepath.Join(opts.Dir, "ready")
	// One left by a run that was killed says nothing about this one.
	if err := os.Remove(ready); err != nil && !os.IsNotExist(err) {
		return err
	}

	node, err := talosnode.New(opts)
	if err != nil {
		return err
	}

	if fallBack {
		node.FallBackAtNextUpgrade()
	}

	if err = node.Start(listen); err != nil {
		return err
	}

	defer node.Stop()
	defer os.Remove(ready)

	if err = os.WriteFile(ready, []byte(node.Addr()+"\n"), 0o644); err != nil {
		return err
	}

	if node.Maintenance() {
		fmt.Printf("talos-lab: Talos %s node %q in maintenance mode on %s (talosctl --insecure); waiting for its first config\n", node.Version(), opts.Hostname, node.Addr())

		go func() {
			<-node.Installed()
			fmt.Printf("talos-lab: installed Talos %s; serving the machine API with mTLS on %s\n", node.Version(), node.Addr())
			fmt.Printf("talosconfig: %s\n", node.TalosconfigPath())
		}()
	} else {
		printInstalled(node, opts.Hostname)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	<-ctx.Done()

	fmt.Println("talos-lab: stopping")

	return nil
}

// fallBack is --fall-back-at-next-upgrade.
var fallBack bool

// parseFlags reads the node's options and the address to listen on.
func parseFlags() (opts talosnode.Options, listen string, _ error) {

	listenFlag := flag.String("listen", "127.0.0.1:50000", "address to serve the Talos machine API on")
	flag.StringVar(&opts.Dir, "dir", "", "working directory (secrets.yaml, talosconfig, node state); required")
	flag.StringVar(&opts.Version, "talos-version", talosnode.DefaultVersion, "Talos version the node runs (first start only; later starts keep the installed version)")
	flag.StringVar(&opts.KubernetesVersion, "kubernetes-version", "", "Kubernetes version of the initial machine config (default: machinery's default)")
	flag.StringVar(&opts.Hostname, "hostname", talosnode.DefaultHostname, "node hostname")
	flag.StringVar(&opts.ClusterName, "cluster-name", talosnode.DefaultClusterName, "cluster name of the initial machine config")
	flag.StringVar(&opts.Endpoint, "endpoint", talosnode.DefaultEndpoint, "Kubernetes control plane endpoint of the initial machine config")
	flag.DurationVar(&opts.RebootDuration, "reboot-duration", time.Second, "how long a simulated reboot keeps the API unavailable")
	flag.BoolVar(&opts.Maintenance, "maintenance", false, "without an installed config, start in maintenance mode (booted from the ISO) and wait for the first config")
	flag.Func("disk", "a disk of the machine, repeatable: name=/dev/sdb,size=150GiB[,model=...,serial=...,wwid=...,transport=...,readonly=true,cdrom=true,rotational=true] (default: "+talosnode.DefaultDisks[0].Name+" "+talosnode.DefaultDisks[0].Size+")", func(s string) error {
		d, err := talosnode.ParseDisk(s)
		opts.Disks = append(opts.Disks, d)

		return err
	})
	flag.BoolVar(&fallBack, "fall-back-at-next-upgrade", false, "the next upgrade's partition fails to boot: the node boots the other one again, running what it ran")
	disksFile := flag.String("disks-file", "", "YAML list of disks (keys as for --disk), instead of --disk")
	flag.Parse()

	if *disksFile != "" {
		if len(opts.Disks) > 0 {
			return opts, "", fmt.Errorf("--disk and --disks-file exclude each other")
		}

		disks, err := talosnode.LoadDisks(*disksFile)
		if err != nil {
			return opts, "", err
		}

		opts.Disks = disks
	}

	if opts.Dir == "" {
		flag.Usage()

		return opts, "", fmt.Errorf("--dir is required")
	}

	return opts, *listenFlag, nil
}

func printInstalled(node *talosnode.Node, hostname string) {
	fmt.Printf("talos-lab: Talos %s node %q serving the machine API on %s\n", node.Version(), hostname, node.Addr())
	fmt.Printf("talosconfig: %s\n", node.TalosconfigPath())
	fmt.Printf("secrets:     %s\n", node.SecretsPath())
	fmt.Printf("version:     %s\n", node.Version())
	fmt.Printf("node root:   %s (Read serves files under it; virtiofs data at %s)\n", node.Root(), node.Root()+talosnode.DataMount)
}
