package apps

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// The Samba pod speaks SMB: Debian's own smbd serves the shares of its
// SAMBA_VOLUME_CONFIG_* variables on the pod's address, port 445, so an
// SMB client (smb_check, smbclient -L) lists them as it would the real
// image's. smbd is run with samba-dcerpcd (the share list's RPC server,
// which smbd would otherwise start on demand in a session of its own) in
// one process group, killed whole when the pod stops.

const (
	smbdProgram    = "/usr/sbin/smbd"
	dcerpcdProgram = "/usr/libexec/samba/samba-dcerpcd"
)

// smbd serves the container's shares with the host's smbd; without one
// (Debian's samba not installed) it only accepts TCP on 445, saying so.
func smbd(ctx context.Context, c *Container) int {
	for _, p := range []string{smbdProgram, dcerpcdProgram} {
		if _, err := os.Stat(p); err != nil {
			c.logf("lab: %s is not installed (Debian's samba, scripts/samba-install.sh): TCP 445 only, no SMB", p)

			return serveAll(ctx, c, map[int]http.Handler{445: nil})
		}
	}

	// smbd's and samba-dcerpcd's unix sockets live in its run directories,
	// and a socket's path has 107 bytes at most: not under the pod's deep
	// root, in a short directory of its own instead.
	run, err := os.MkdirTemp("/tmp", "lab-smbd-")
	if err != nil {
		c.logf("error: %v", err)

		return 1
	}
	defer os.RemoveAll(run)

	conf, binds, err := writeSmbConf(c, run)
	if err != nil {
		c.logf("error: %v", err)

		return 1
	}
	env, err := entrypointEnv(ctx, c)
	if err != nil {
		c.logf("error: %v", err)

		return 1
	}
	users, err := importAccounts(ctx, c, conf, accounts(env))
	if err != nil {
		c.logf("error: %v", err)

		return 1
	}

	return runGroup(ctx, c, users, withMounts(binds, smbdProgram, "--foreground", "--no-process-group", "--configfile="+conf, "--debug-stdout"),
		[]string{dcerpcdProgram, "--foreground", "--no-process-group", "--libexec-rpcds", "--configfile=" + conf, "--debug-stdout"})
}

// writeSmbConf writes the smb.conf of the container's shares in run,
// smbd's run directories beside it: guests may list them (map to guest =
// Bad User), each share's path is where the container's path lives, and
// smbd binds only the pod's address (as a /8: smbd finds no interface for
// a bare loopback address). The passdb is the image's (smbpasswd) and,
// with Samba's state, in the pod's root, made afresh at each start as a
// new container's is; never the host's /etc/samba or /var/lib/samba.
// A share's path is its container path under dir/root, where smbd sees
// the mount (binds: host path, that path), as the pod's smbd sees its
// mounts: an account's uid reaches its share's files whatever the
// lab's directories above them allow (the lab's own are the lab user's
// only).
func writeSmbConf(c *Container, dir string) (string, [][2]string, error) {
	if err := os.Chmod(dir, 0o755); err != nil { // the accounts' uids pass
		return "", nil, err
	}
	var binds [][2]string
	var b strings.Builder
	fmt.Fprintf(&b, "[global]\n  server role = standalone server\n  map to guest = Bad User\n  smb ports = 445\n  interfaces = %s/8\n  bind interfaces only = yes\n  disable netbios = yes\n  server min protocol = SMB2\n  rpc start on demand helpers = no\n  log file = %s/log.%%m\n", c.Addr, dir)
	fmt.Fprintf(&b, "  passdb backend = smbpasswd\n  smb passwd file = %s\n", c.Path(smbPasswdFile))
	if err := os.RemoveAll(c.Path("/var/lib/samba")); err != nil {
		return "", nil, err
	}
	for _, d := range []struct{ param, path string }{
		{"private dir", c.Path(path.Dir(smbPasswdFile))},
		{"state directory", c.Path("/var/lib/samba")},
		{"cache directory", c.Path("/var/cache/samba")},
		// Their unix sockets' paths must be short: in run.
		{"lock directory", filepath.Join(dir, "lock")},
		{"pid directory", filepath.Join(dir, "pid")},
		{"ncalrpc dir", filepath.Join(dir, "ncalrpc")},
		{"binddns dir", filepath.Join(dir, "binddns")},
	} {
		if err := os.MkdirAll(d.path, 0o755); err != nil {
			return "", nil, err
		}
		fmt.Fprintf(&b, "  %s = %s\n", d.param, d.path)
	}
	var names []string
	for k := range c.Env {
		if strings.HasPrefix(k, "SAMBA_VOLUME_CONFIG_") {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	for _, k := range names {
		for _, part := range strings.Split(c.Env[k], ";") {
			part = strings.TrimSpace(part)
			if key, v, ok := strings.Cut(part, "="); ok && strings.TrimSpace(key) == "path" {
				seen := filepath.Join(dir, "root", path.Clean("/"+strings.TrimSpace(v)))
				if err := os.MkdirAll(seen, 0o755); err != nil {
					return "", nil, err
				}
				binds = append(binds, [2]string{c.Path(strings.TrimSpace(v)), seen})
				part = "path = " + seen
			}
			if part != "" {
				fmt.Fprintf(&b, "  %s\n", part)
			}
		}
	}
	conf := filepath.Join(dir, "smb.conf")

	return conf, binds, os.WriteFile(conf, []byte(b.String()), 0o644)
}

// withMounts is argv run in a mount namespace of its own where each
// bind's host path is mounted at its other path (gone with the
// namespace: nothing to unmount on the host).
func withMounts(binds [][2]string, argv ...string) []string {
	if len(binds) == 0 {
		return argv
	}
	script := `while [ "$1" != -- ]; do mount --bind "$1" "$2" || exit 1; shift 2; done; shift; exec "$@"`
	out := []string{"unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh"}
	for _, b := range binds {
		out = append(out, b[0], b[1])
	}
	return append(append(out, "--"), argv...)
}

// runGroup runs the commands in one new process group, their output the
// container's, until one exits (its code) or ctx ends (137); the group
// is then killed whole.
func runGroup(ctx context.Context, c *Container, env []string, argvs ...[]string) int {
	exited := make(chan int, len(argvs))
	pgid := 0
	var cmds []*exec.Cmd
	defer func() {
		if pgid != 0 {
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			stopped := time.AfterFunc(5*time.Second, func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
			for range cmds {
				<-exited
			}
			stopped.Stop()
			_ = syscall.Kill(-pgid, syscall.SIGKILL) // what they started and left
		}
	}()
	for _, argv := range argvs {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stdout, cmd.Stderr = c.Out, c.Out
		cmd.Env = append(os.Environ(), env...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: pgid, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			c.logf("error: %v", err)

			return 1
		}
		if pgid == 0 {
			pgid = cmd.Process.Pid
		}
		cmds = append(cmds, cmd)
		go func() {
			_ = cmd.Wait()
			exited <- cmd.ProcessState.ExitCode()
		}()
	}
	select {
	case code := <-exited:
		cmds = cmds[1:] // one is waited for already
		if code == 0 {
			code = 1 // a server that ends by itself has failed
		}

		return code
	case <-ctx.Done():
		return 137
	}
}
