package apps

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/homelab-migrate/migrate/lab/sandbox"
)

// The Samba image's accounts (ghcr.io/servercontainers/samba, its
// scripts/entrypoint.sh): each ACCOUNT_<name> is a password, or an
// smbpasswd line of that account ("name:uid:LM:NT:flags:LCT:", as
// pdbedit -L -w prints it) whose hashes are kept; UID_<name> is its uid.
// The entrypoint makes a Unix user (adduser), adds the account to the
// smbpasswd passdb (smbpasswd -a -n), writes the line's hashes over the
// new entry, and enables it (smbpasswd -e). The lab does the same with
// Debian's smbpasswd, in a passdb of the pod's own (under its root), and
// the Unix users exist for that pod's smbd only: their passwd and group
// files are the pod's, read through nss_wrapper (Debian's
// libnss-wrapper, as Samba's own test suite gives smbd its users).

// nssWrapper is the preloaded library that answers getpwnam and the like
// from NSS_WRAPPER_PASSWD and NSS_WRAPPER_GROUP.
const nssWrapper = "/usr/lib/x86_64-linux-gnu/libnss_wrapper.so"

// imageEntrypoint is where the image keeps its entrypoint: a command
// that wraps it ends by exec'ing it.
const imageEntrypoint = "/container/scripts/entrypoint.sh"

// smbPasswdFile is the image's passdb (passdb backend = smbpasswd), in
// the pod's root.
const smbPasswdFile = "/var/lib/samba/private/smbpasswd"

// account is one ACCOUNT_<name> of the image's environment.
type account struct {
	name     string
	uid      int    // 0: the next free one, as adduser picks
	password string // a plain password; "" when hashes is set
	hashes   string // the smbpasswd line's fields after name:uid:
}

// smbpasswdLine is how the entrypoint tells a hash line from a password.
var smbpasswdLine = regexp.MustCompile(`^([^:]+):[0-9]*:(.*:)$`)

// accounts are the ACCOUNT_* of env, sorted by name; names are lower
// case, as the entrypoint makes them.
func accounts(env map[string]string) []account {
	var out []account
	for k, v := range env {
		name, ok := strings.CutPrefix(k, "ACCOUNT_")
		if !ok || name == "" {
			continue
		}
		a := account{name: strings.ToLower(name), password: v}
		if uid, err := strconv.Atoi(env["UID_"+a.name]); err == nil && uid > 0 {
			a.uid = uid
		}
		if m := smbpasswdLine.FindStringSubmatch(v); m != nil && m[1] == a.name {
			a.hashes, a.password = m[2], ""
		}
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// entrypointEnv is the environment the image's entrypoint starts with:
// the container's, or, when the container has a command (one that ends by
// exec'ing the entrypoint, as a runbook's wrapper exporting ACCOUNT_*
// does), what that command exported. The command runs as the container
// would run it, in lab/sandbox with the pod's mounts; the entrypoint it
// execs is a stand-in that writes its environment down.
func entrypointEnv(ctx context.Context, c *Container) (map[string]string, error) {
	if len(c.Args) == 0 {
		return c.Env, nil
	}
	dump := "/.lab-entrypoint-env"
	stub := c.Path(imageEntrypoint)
	if err := os.MkdirAll(filepath.Dir(stub), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(stub, []byte("#!/bin/sh\nexec env -0 > "+dump+"\n"), 0o755); err != nil {
		return nil, err
	}
	defer os.Remove(c.Path(dump)) // it holds the accounts' hashes
	spec := sandbox.Spec{Root: c.Root, Argv: c.Args, Env: envList(c.Env)}
	for _, p := range sortedKeys(c.Mounts) {
		spec.Binds = append(spec.Binds, sandbox.Bind{Source: c.Mounts[p], Path: p, ReadOnly: true})
	}
	cmd := sandbox.Command(ctx, spec)
	cmd.Stdout, cmd.Stderr = c.Out, c.Out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("the container's command %q: %w", strings.Join(c.Args, " "), err)
	}
	b, err := os.ReadFile(c.Path(dump))
	if err != nil {
		return nil, fmt.Errorf("the container's command ended without exec'ing the image's %s: %w", imageEntrypoint, err)
	}
	env := map[string]string{}
	for _, kv := range strings.Split(string(b), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env, nil
}

func envList(env map[string]string) []string {
	list := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	for _, k := range sortedKeys(env) {
		list = append(list, k+"="+env[k])
	}
	return list
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// importAccounts makes the accounts the pod's users (its /etc/passwd and
// /etc/group) and adds them to the passdb of conf, as the entrypoint
// does; it returns the environment smbd needs to find those users (none
// without accounts: smbd then sees the host's users, root and nobody).
func importAccounts(ctx context.Context, c *Container, conf string, list []account) ([]string, error) {
	if len(list) == 0 {
		return nil, nil
	}
	if _, err := os.Stat(nssWrapper); err != nil {
		return nil, fmt.Errorf("the accounts need %s (Debian's libnss-wrapper, scripts/samba-install.sh): %w", nssWrapper, err)
	}
	passwd, group := c.Path("/etc/passwd"), c.Path("/etc/group")
	if err := writeUsers(passwd, group, list); err != nil {
		return nil, err
	}
	env := []string{"LD_PRELOAD=" + nssWrapper, "NSS_WRAPPER_PASSWD=" + passwd, "NSS_WRAPPER_GROUP=" + group}
	for _, a := range list {
		c.logf(">> ACCOUNT: adding account: %s", a.name)
		if err := addAccount(ctx, c, conf, env, a); err != nil {
			return nil, fmt.Errorf("account %s: %w", a.name, err)
		}
	}
	return env, nil
}

// writeUsers writes the pod's passwd and group: root, nobody (Samba's
// guest) and one user and group per account, uids as adduser gives them.
func writeUsers(passwd, group string, list []account) error {
	var p, g strings.Builder
	p.WriteString("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")
	g.WriteString("root:x:0:\nnogroup:x:65534:\n")
	taken := map[int]bool{}
	for _, a := range list {
		taken[a.uid] = a.uid > 0
	}
	next := 1000
	for _, a := range list {
		uid := a.uid
		for uid == 0 {
			if !taken[next] {
				uid, taken[next] = next, true
			}
			next++
		}
		fmt.Fprintf(&p, "%s:x:%d:%d::/nonexistent:/bin/false\n", a.name, uid, uid)
		fmt.Fprintf(&g, "%s:x:%d:\n", a.name, uid)
	}
	if err := os.MkdirAll(filepath.Dir(passwd), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(passwd, []byte(p.String()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(group, []byte(g.String()), 0o644)
}

// addAccount is the entrypoint's smbpasswd -a -n, the hashes written over
// the new entry (or the password set), then smbpasswd -e.
func addAccount(ctx context.Context, c *Container, conf string, env []string, a account) error {
	if err := smbpasswd(ctx, conf, env, "", "-a", "-n", a.name); err != nil {
		return err
	}
	if a.hashes != "" {
		c.logf(">> ACCOUNT: found SMB Password HASH instead of plain-text password")
		if err := keepHashes(c.Path(smbPasswdFile), a); err != nil {
			return err
		}
	} else if err := smbpasswd(ctx, conf, env, a.password+"\n"+a.password+"\n", "-s", a.name); err != nil {
		return err
	}
	return smbpasswd(ctx, conf, env, "", "-e", a.name)
}

// smbpasswd runs Debian's smbpasswd on conf's passdb; its output is kept
// for an error only (it never holds a password: those go on stdin).
func smbpasswd(ctx context.Context, conf string, env []string, stdin string, args ...string) error {
	cmd := exec.CommandContext(ctx, "smbpasswd", append([]string{"-c", conf}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("smbpasswd %s: %w: %s", args[0], err, strings.TrimSpace(out.String()))
	}
	return nil
}

// keepHashes writes the account's hashes, flags and time over its entry
// in the smbpasswd file, its uid left as the pod gave it (the
// entrypoint's sed).
func keepHashes(file string, a account) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	lines := strings.SplitAfter(string(b), "\n")
	found := false
	for i, l := range lines {
		if name, rest, ok := strings.Cut(l, ":"); ok && name == a.name {
			uid, _, _ := strings.Cut(rest, ":")
			lines[i] = a.name + ":" + uid + ":" + a.hashes + "\n"
			found = true
		}
	}
	if !found {
		return errors.New("smbpasswd -a made no entry in " + file)
	}
	return os.WriteFile(file, []byte(strings.Join(lines, "")), 0o600)
}
