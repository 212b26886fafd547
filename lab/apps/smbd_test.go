package apps_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hirochachacha/go-smb2"

	"github.com/homelab-migrate/migrate/lab/apps"
)

// TestSambaSpeaksSMB: the Samba pod lists its SAMBA_VOLUME_CONFIG_*
// shares to an SMB client as a guest, as the real image does, on the
// pod's address and port 445, however deep its root (a unix socket's path
// is short); stopping the pod leaves no smbd behind.
func TestSambaSpeaksSMB(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("smbd binds port 445: it needs root, as the lab does")
	}
	files, photos := t.TempDir(), t.TempDir()
	addr := "127.154.250.45"
	r := start(t, "ghcr.io/servercontainers/samba:smbd-only-a3.21.0-s4.20.6-r0", &apps.Container{
		Addr: addr,
		Env: map[string]string{
			"SAMBA_VOLUME_CONFIG_files":  "[files]; path=/shares/files; browseable = yes; read only = no",
			"SAMBA_VOLUME_CONFIG_photos": "[photos]; path=/shares/photos; browseable = yes; read only = yes",
		},
		Mounts: map[string]string{"/shares/files": files, "/shares/photos": photos},
		// As deep as a pod's root in a lab: smbd's sockets must not be under it.
		Root: filepath.Join(t.TempDir(), "demo/lab/incus/instances/talos/guest/kube/pods/62474ef2-bac8-4253-9b20-cab0dcde03b1/containers/samba"),
	})
	shares, err := awaitShares(addr + ":445")
	if err != nil {
		t.Fatalf("no share list from %s:445: %v; output:\n%s", addr, err, r.out)
	}
	for _, want := range []string{"files", "photos"} {
		if !slices.Contains(shares, want) {
			t.Errorf("the shares listed are %v, want %s among them", shares, want)
		}
	}
	r.stop()
	if code := r.exits(t); code != 137 {
		t.Errorf("stopped, the pod exited %d, want 137", code)
	}
	if c, err := net.DialTimeout("tcp", addr+":445", time.Second); err == nil {
		c.Close()
		t.Error("something still listens on port 445 after the pod stopped")
	}
}

// awaitShares lists the shares once smbd answers the listing: smbd takes
// the srvsvc pipe from samba-dcerpcd, which it starts on demand, so a
// listing right after its start may find no pipe yet ("open srvsvc: file
// does not exist"), longer on a busy machine.
func awaitShares(addr string) ([]string, error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		shares, err := listShares(addr)
		if err == nil || time.Now().After(deadline) {
			return shares, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func listShares(addr string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	s, err := (&smb2.Dialer{Initiator: &smb2.NTLMInitiator{User: "guest"}}).DialContext(ctx, conn)
	if err != nil {
		return nil, err
	}
	defer s.Logoff()
	return s.ListSharenames()
}

// TestSambaImportsAccounts: the Samba pod imports its accounts as the
// image's entrypoint does: an smbpasswd line as pdbedit -L -w prints it
// (ana's, exported as ACCOUNT_ana by the pod's own command from its
// mounted Secret, as examples/homelab's wrapper does) keeps its hash, a
// plain ACCOUNT_ben is a password; each logs in with its password and
// opens the share its valid users name, a wrong password is refused, and
// a guest lists the shares but may not open that one. The users are the
// pod's only: the host's /etc/passwd does not change. The share's host
// directory is below directories only root may pass (as the lab's are):
// the pod's smbd sees it as mounted, at its container path.
func TestSambaImportsAccounts(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("smbd binds port 445: it needs root, as the lab does")
	}
	hostPasswd, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	users, media := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(media, "movie.mkv"), []byte("frames"), 0o644); err != nil {
		t.Fatal(err)
	}
	line := smbpasswdOf(t, "ana", 1001, "ana's old password")
	if err := os.WriteFile(filepath.Join(users, "smbpasswd"), []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := "127.154.250.46"
	r := start(t, "ghcr.io/servercontainers/samba:smbd-only-a3.21.0-s4.20.6-r0", &apps.Container{
		Addr: addr,
		Args: []string{"/bin/sh", "-c", `set -e
while IFS=: read -r user uid rest; do
  export "ACCOUNT_$user=$user:$uid:$rest" "UID_$user=$uid"
done < /users/smbpasswd
exec /container/scripts/entrypoint.sh runsvdir -P /container/config/runit`},
		Env: map[string]string{
			"ACCOUNT_ben":                "ben's password",
			"SAMBA_VOLUME_CONFIG_media":  "[media]; path=/shares/media; valid users = ana ben; read only = yes",
			"SAMBA_VOLUME_CONFIG_photos": "[photos]; path=/shares/photos; guest ok = yes",
		},
		Mounts: map[string]string{"/users": users, "/shares/media": media, "/shares/photos": t.TempDir()},
	})
	if got := openShare(t, r, addr, "ana", "ana's old password", "media"); !slices.Contains(got, "movie.mkv") {
		t.Errorf("ana sees %v in media, want movie.mkv", got)
	}
	if got := openShare(t, r, addr, "ben", "ben's password", "media"); !slices.Contains(got, "movie.mkv") {
		t.Errorf("ben sees %v in media, want movie.mkv", got)
	}
	if _, err := session(addr, "ana", "not her password"); err == nil || !strings.Contains(err.Error(), "logon is invalid") {
		t.Errorf("ana with a wrong password: %v, want a logon failure", err)
	}
	shares, err := awaitShares(addr + ":445")
	if err != nil || !slices.Contains(shares, "media") {
		t.Errorf("a guest lists %v (%v), want media among them", shares, err)
	}
	if s, err := session(addr, "guest", ""); err != nil {
		t.Errorf("guest session: %v", err)
	} else {
		if fs, err := s.Mount("media"); err == nil {
			fs.Umount()
			t.Error("a guest opened media, which only ana and ben may")
		}
		s.Logoff()
	}
	if after, _ := os.ReadFile("/etc/passwd"); string(after) != string(hostPasswd) {
		t.Error("the host's /etc/passwd changed: the accounts must be the pod's only")
	}
	if strings.Contains(r.out.String(), line[strings.Index(line, ":")+1:]) {
		t.Errorf("the pod's output shows ana's hash:\n%s", r.out)
	}
}

// openShare logs in and lists the share's root, waiting for the pod to
// serve.
func openShare(t *testing.T, r *run, addr, user, password, share string) []string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		s, err := session(addr, user, password)
		if err == nil {
			defer s.Logoff()
			fs, err := s.Mount(share)
			if err != nil {
				t.Fatalf("%s opening %s: %v; output:\n%s", user, share, err, r.out)
			}
			defer fs.Umount()
			ents, err := fs.ReadDir(".")
			if err != nil {
				t.Fatalf("%s listing %s: %v", user, share, err)
			}
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			return names
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s could not log in to %s:445: %v; output:\n%s", user, addr, err, r.out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func session(addr, user, password string) (*smb2.Session, error) {
	conn, err := net.DialTimeout("tcp", addr+":445", 10*time.Second)
	if err != nil {
		return nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	s, err := (&smb2.Dialer{Initiator: &smb2.NTLMInitiator{User: user, Password: password}}).Dial(conn)
	if err != nil {
		conn.Close()
	}
	return s, err
}

// smbpasswdOf is the account's smbpasswd line as Debian's smbpasswd
// makes it (in a passdb of the test's own; the user exists for it
// through nss_wrapper): what pdbedit -L -w prints of the old Samba.
func smbpasswdOf(t *testing.T, user string, uid int, password string) string {
	t.Helper()
	dir := t.TempDir()
	passwd := filepath.Join(dir, "passwd")
	conf := filepath.Join(dir, "smb.conf")
	files := map[string]string{
		passwd:                      fmt.Sprintf("root:x:0:0::/root:/bin/sh\n%s:x:%d:%d::/nonexistent:/bin/false\n", user, uid, uid),
		filepath.Join(dir, "group"): fmt.Sprintf("root:x:0:\n%s:x:%d:\n", user, uid),
		conf:                        fmt.Sprintf("[global]\n  passdb backend = smbpasswd\n  smb passwd file = %[1]s/smbpasswd\n  private dir = %[1]s\n  lock directory = %[1]s\n  state directory = %[1]s\n  cache directory = %[1]s\n", dir),
	}
	for p, s := range files {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("smbpasswd", "-c", conf, "-a", "-s", user)
	cmd.Env = append(os.Environ(), "LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libnss_wrapper.so", "NSS_WRAPPER_PASSWD="+passwd, "NSS_WRAPPER_GROUP="+filepath.Join(dir, "group"))
	cmd.Stdin = strings.NewReader(password + "\n" + password + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("smbpasswd: %v: %s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "smbpasswd"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
