// Command migrate-lab is the lab home server (package lab/home) as a
// program of its own: `migrate lab serve` runs it, found like the provider
// programs (beside migrate, or in PATH), so that migrate itself does not
// link the lab's Talos and Kubernetes libraries.
//
//	migrate-lab --dir D [--address-block B]     # serves until SIGINT/SIGTERM
//
// SIGUSR1 makes the Matrix federation endpoint fail (503), as a homeserver
// unreachable from the internet; SIGUSR2 heals it. `migrate demo` injects
// its failure so; a person can too (kill -USR1 PID).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/homelab-migrate/migrate/lab/home"
	"github.com/homelab-migrate/migrate/lab/kubecp"
	"github.com/homelab-migrate/migrate/lab/labenv"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}

func run() error {
	dir := flag.String("dir", "", "the lab's directory; required")
	block := flag.Int("address-block", 0, "the VMs get addresses 127.B.1.N (0: 127.0.1.N)")
	flag.Parse()
	if *dir == "" || flag.NArg() > 0 {
		return errors.New("usage: migrate-lab --dir D [--address-block B]")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := labenv.Read(*dir); err == nil {
		return fmt.Errorf("a lab already runs in %s: stop it first, or give another --dir", *dir)
	}
	h, err := home.Start(ctx, home.Options{Dir: *dir, Log: logWriter{}, AddressBlock: *block})
	if err != nil {
		return err
	}
	defer h.Close()
	// The first bootstrap needs the Kubernetes binaries: build them now
	// (once, cached) rather than while a phase waits for them.
	go func() {
		logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "lab: "+format+"\n", args...) }
		if dir, err := kubecp.Binaries(ctx, logf); err != nil && ctx.Err() == nil {
			logf("the Kubernetes binaries could not be built: %v (a Talos VM's bootstrap will try again)", err)
		} else if err == nil {
			logf("the Kubernetes binaries are ready in %s", dir) // migrate demo waits for this line
		}
	}()
	faults := make(chan os.Signal, 1)
	signal.Notify(faults, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		for sig := range faults {
			h.FailFederation(sig == syscall.SIGUSR1)
			if sig == syscall.SIGUSR1 {
				fmt.Fprintf(os.Stderr, "lab: the federation endpoint %s now fails (SIGUSR1)\n", h.MatrixURL()+home.FederationPath)
			} else {
				fmt.Fprintf(os.Stderr, "lab: the federation endpoint %s answers again (SIGUSR2)\n", h.MatrixURL()+home.FederationPath)
			}
		}
	}()
	envFlag := ""
	if *dir != labenv.DefaultDir() {
		envFlag = " --dir " + *dir
	}
	fmt.Printf("The lab is up in %s: the Incus host on %s (old VMs services, matrix, k3s), data in %s.\n", h.Dir(), h.Socket(), h.DataDir())
	fmt.Printf("In another shell, to drive examples/homelab against it:\n\n  eval \"$(migrate lab env%s)\"\n\nCtrl-C stops it.\n", envFlag)
	<-ctx.Done()
	fmt.Println("Stopping the lab: the Talos VMs, then the Incus host.")
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
