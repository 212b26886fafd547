// Command incus-lab serves the lab's Incus host (package lab/incushost) on
// a unix socket and over HTTPS, with the test images the provider's suite
// uses (busybox trees); its server certificate is DIR/server.crt.
//
//	incus-lab --dir DIR [--seed] [--https 127.0.0.1:8444]              # serves until SIGINT/SIGTERM
//	incus-lab --dir DIR -- go test ./providers/incus/...               # runs the command against it
//
// With a command after --, it serves while the command runs, gives it the
// environment the Incus tests read (INCUS_CONF: an incus CLI configuration
// whose default remote is the lab over HTTPS, with a trusted client
// certificate, which the provider's suite goes through; INCUS_SOCKET,
// which the client library's own tests use; INCUS_HTTPS,
// INCUS_SERVER_CERT, INCUS_TEST_NETWORK, INCUS_LAB=1) and exits with its
// exit status. Without one, it prints that environment and serves.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/homelab-migrate/migrate/lab/incushost"
)

func main() {
	code, err := run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "incus-lab:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run() (int, error) {
	dir := flag.String("dir", "", "the lab host's directory (instances, images, volumes, certificates); required")
	socket := flag.String("socket", "", "unix socket to serve (default DIR/unix.socket)")
	https := flag.String("https", "127.0.0.1:0", "address to serve HTTPS on (port 0: any free one; empty: none)")
	cert := flag.String("server-cert", "", "where to write a copy of the server certificate (default: none; DIR/server.crt is where it is kept)")
	seed := flag.Bool("seed", false, "create the old VMs (services, matrix, k3s) when absent")
	images := flag.String("images", "migrate-busybox,migrate-busybox-dhcp", "comma-separated image aliases to make as busybox trees when absent")
	flag.Parse()
	if *dir == "" {
		return 0, errors.New("--dir is required")
	}
	if *socket == "" {
		*socket = filepath.Join(*dir, "unix.socket")
	}
	s, err := incushost.New(incushost.Options{Dir: *dir, Seed: *seed})
	if err != nil {
		return 0, err
	}
	defer s.Close()
	for _, alias := range strings.Split(*images, ",") {
		if alias == "" || s.HasImage(alias) {
			continue
		}
		tmp, err := os.MkdirTemp("", "incus-lab-image-")
		if err != nil {
			return 0, err
		}
		err = incushost.Busybox(tmp)
		if err == nil {
			err = s.ImportImage(alias, tmp)
		}
		os.RemoveAll(tmp)
		if err != nil {
			return 0, err
		}
	}
	if err := s.Listen(*socket); err != nil {
		return 0, err
	}
	env := []string{"INCUS_SOCKET=" + *socket, "INCUS_TEST_NETWORK=labbr0", "INCUS_LAB=1"}
	if *https != "" {
		addr, err := s.ServeHTTPS(*https)
		if err != nil {
			return 0, err
		}
		if *cert == "" {
			*cert = filepath.Join(*dir, "server.crt")
		} else if err := os.WriteFile(*cert, s.CertPEM(), 0o644); err != nil {
			return 0, err
		}
		env = append(env, "INCUS_HTTPS="+addr.String(), "INCUS_SERVER_CERT="+*cert)
		conf := filepath.Join(*dir, "client")
		if err := s.WriteClientConfig(conf, "lab", "https://"+addr.String()); err != nil {
			return 0, err
		}
		env = append(env, "INCUS_CONF="+conf)
	}
	if flag.NArg() > 0 {
		cmd := exec.Command(flag.Arg(0), flag.Args()[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.Env = append(os.Environ(), env...)
		if err := cmd.Run(); err != nil {
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				return exit.ExitCode(), nil
			}
			return 0, err
		}
		return 0, nil
	}
	for _, e := range env {
		fmt.Println(e)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	return 0, nil
}
