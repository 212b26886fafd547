package home

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/lab/incushost"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
)

// TestDebianHome: with Options.OldHost the home's old VMs are Debian
// hosts (the root from lab/debroot's cache), reached as any lab VM is:
// over the host's HTTPS API; the old Samba admits the account Env names
// for the example's smb_check with the password Env gives it (the lab
// directory's), and refuses another.
func TestDebianHome(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	block := 100 + (os.Getpid()+7)%150
	start := time.Now()
	h, err := Start(ctx, Options{Dir: t.TempDir(), AddressBlock: block, OldHost: &incushost.OldHost{SynapseVersion: "1.121.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	t.Logf("the home with Debian old VMs started in %s", time.Since(start).Round(time.Millisecond))
	t.Setenv("INCUS_CONF", envMap(h.Env())["INCUS_CONF"])
	opts, err := incusapi.RemoteOptions("", "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := incusapi.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for vm, argv := range map[string][]string{
		"matrix":   {"dpkg-query", "-W", "-f=${Version}", "matrix-synapse-py3"},
		"services": {"systemctl", "is-active", "smbd"},
	} {
		e, err := c.StartExec(ctx, vm, incusapi.ExecPost{Command: argv})
		if err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		code, err := c.FollowExec(ctx, e, &out, &errb, 20*time.Millisecond)
		want := map[string]string{"matrix": "1.121.1+bookworm1", "services": "active"}[vm]
		if err != nil || code != 0 || strings.TrimSpace(out.String()) != want {
			t.Errorf("%s: %v: exit %d, %q %s %v; want %q", vm, argv, code, out.String(), errb.String(), err, want)
		}
	}
	env := envMap(h.Env())
	user, password := env["MIGRATE_VAR_samba_check_user"], env["MIGRATE_VAR_samba_check_password"]
	if user != SambaCheckUser || password == "" || env["MIGRATE_VAR_samba_check_share"] != SambaCheckShare {
		t.Fatalf("Env's Samba check: user %q, share %q, a password: %v", user, env["MIGRATE_VAR_samba_check_share"], password != "")
	}
	for _, pw := range []string{password, "not " + user + "'s password"} {
		// smbclient reads the password from $PASSWD: never in argv.
		e, err := c.StartExec(ctx, "services", incusapi.ExecPost{Command: []string{"smbclient", "-p", "1445", "-U", user, "//localhost/" + SambaCheckShare, "-c", "ls"},
			Environment: map[string]string{"PASSWD": pw}})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		code, err := c.FollowExec(ctx, e, &out, &out, 20*time.Millisecond)
		if right := pw == password; err != nil || (code == 0) != right {
			t.Errorf("smbclient as %s with the right password %v: exit %d, %v:\n%s", user, right, code, err, out.String())
		}
	}
}
