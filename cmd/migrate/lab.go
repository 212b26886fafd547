package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/homelab-migrate/migrate/lab/home"
	"github.com/homelab-migrate/migrate/lab/kubecp"
)

// defaultLabDir is where `lab serve` and `lab env` meet without --dir:
// the user's runtime directory, else the temporary one.
func defaultLabDir() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "migrate-lab")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("migrate-lab-%d", os.Getuid()))
}

func (a *app) labCommand() *cobra.Command {
	lab := &cobra.Command{
		Use:   "lab",
		Short: "The lab home server: an Incus host with the old VMs, Talos VMs and their Kubernetes, in one process",
	}
	var dir string
	var block int
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Run the lab home server until Ctrl-C or SIGTERM",
		Long: `Run the lab home server until Ctrl-C or SIGTERM: an Incus host holding the
old VMs (services, matrix, k3s) on a unix socket, whose VMs booted from the
Talos ISO become Talos nodes in maintenance mode (a real Kubernetes after
their bootstrap), the host's data directory, the Talos ISO and the Matrix
federation endpoint of examples/homelab. In another shell,
eval "$(migrate lab env)" points migrate at it.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return a.labServe(dir, block) },
	}
	serve.Flags().IntVar(&block, "address-block", 0, "the VMs get addresses 127.`B`.1.N (0: 127.0.1.N); another block lets two labs run side by side")
	env := &cobra.Command{
		Use:   "env",
		Short: "Print the export lines that point migrate and examples/homelab at a running lab",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			vars, err := home.ReadEnv(dir)
			if err != nil {
				return err
			}
			for _, kv := range vars {
				k, v, _ := strings.Cut(kv, "=")
				fmt.Printf("export %s=%s\n", k, shellQuote(v))
			}
			return nil
		},
	}
	for _, c := range []*cobra.Command{serve, env} {
		c.Flags().StringVar(&dir, "dir", defaultLabDir(), "the lab's directory `D`")
	}
	lab.AddCommand(serve, env)
	return lab
}

func (a *app) labServe(dir string, block int) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := home.ReadEnv(dir); err == nil {
		return fmt.Errorf("a lab already runs in %s: stop it first, or give another --dir", dir)
	}
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "lab: "+format+"\n", args...) }
	h, err := home.Start(ctx, home.Options{Dir: dir, Log: prefixWriter{}, AddressBlock: block})
	if err != nil {
		return err
	}
	defer h.Close()
	// The first bootstrap needs the Kubernetes binaries: build them now
	// (once, cached) rather than when a phase waits for them.
	go func() {
		start := time.Now()
		if _, err := kubecp.Binaries(ctx, logf); err != nil && ctx.Err() == nil {
			logf("the Kubernetes binaries could not be built: %v (a Talos VM's bootstrap will try again)", err)
		} else if err == nil && time.Since(start) > time.Second {
			logf("the Kubernetes binaries are ready")
		}
	}()
	envFlag := ""
	if dir != defaultLabDir() {
		envFlag = " --dir " + shellQuote(dir)
	}
	fmt.Printf("The lab is up in %s: the Incus host on %s (old VMs services, matrix, k3s), data in %s.\n", h.Dir(), h.Socket(), h.DataDir())
	fmt.Printf("In another shell, to drive examples/homelab against it:\n\n  eval \"$(migrate lab env%s)\"\n\nCtrl-C stops it.\n", envFlag)
	<-ctx.Done()
	fmt.Println("Stopping the lab: the Talos VMs, then the Incus host.")
	return h.Close()
}

// prefixWriter writes the lab's log lines to stderr.
type prefixWriter struct{}

func (prefixWriter) Write(p []byte) (int, error) {
	for _, l := range strings.SplitAfter(string(p), "\n") {
		if l != "" {
			fmt.Fprint(os.Stderr, "lab: "+l)
		}
	}
	return len(p), nil
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-:=,+@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
