package local_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/providers/local"
)

// samba is a real smbd (Debian's samba, installed by
// scripts/samba-install.sh: make services) serving the shares files and
// photos to guests on a free port of 127.0.0.1, as the example's Samba
// serves them, and with accounts (newSambaWith) the share media to them
// only; started by start, stopped when the test ends.
type samba struct {
	dir, addr string
	cmd       *exec.Cmd
}

// nssWrapper (Debian's libnss-wrapper) gives smbd the accounts' Unix
// users from files of the test's own.
const nssWrapper = "/usr/lib/x86_64-linux-gnu/libnss_wrapper.so"

// sambaScript runs smbd and samba-dcerpcd (the share list's RPC server,
// which smbd would otherwise start on demand in a session of its own,
// outliving the test) in the foreground, in one process group.
const sambaScript = `smbd --foreground --no-process-group --configfile="$1" --debug-stdout &
/usr/libexec/samba/samba-dcerpcd --foreground --no-process-group --libexec-rpcds --configfile="$1" --debug-stdout &
wait`

func newSamba(t *testing.T) *samba {
	t.Helper()
	return newSambaWith(t, nil)
}

// newSambaWith is newSamba with accounts (name -> password) in its own
// passdb, and a share media only they may open.
func newSambaWith(t *testing.T, accounts map[string]string) *samba {
	t.Helper()
	smbd, err := exec.LookPath("smbd")
	if err != nil {
		if smbd, err = exec.LookPath("/usr/sbin/smbd"); err != nil {
			t.Fatalf("no smbd: install Debian's samba (scripts/samba-install.sh, run by make services): %v", err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, port, _ := net.SplitHostPort(addr)
	dir := t.TempDir()
	var conf strings.Builder
	fmt.Fprintf(&conf, "[global]\n  server role = standalone server\n  map to guest = Bad User\n  smb ports = %s\n  interfaces = 127.0.0.1\n  bind interfaces only = yes\n  disable netbios = yes\n  server min protocol = SMB2\n  rpc start on demand helpers = no\n  log file = %s/log.%%m\n", port, dir)
	for _, d := range []string{"private dir", "lock directory", "state directory", "cache directory", "pid directory", "ncalrpc dir", "binddns dir"} {
		sub := filepath.Join(dir, strings.ReplaceAll(d, " ", "-"))
		fmt.Fprintf(&conf, "  %s = %s\n", d, sub)
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, share := range []string{"files", "photos"} {
		if err := os.MkdirAll(filepath.Join(dir, share), 0o755); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&conf, "[%s]\n  path = %s\n  guest ok = yes\n", share, filepath.Join(dir, share))
	}
	env := append(os.Environ(), "PATH="+filepath.Dir(smbd)+":"+os.Getenv("PATH"))
	if len(accounts) > 0 {
		env = append(env, addAccounts(t, dir, &conf, accounts)...)
	}
	if err := os.WriteFile(filepath.Join(dir, "smb.conf"), []byte(conf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, pw := range accounts {
		cmd := exec.Command("smbpasswd", "-c", filepath.Join(dir, "smb.conf"), "-a", "-s", name)
		cmd.Env, cmd.Stdin = env, strings.NewReader(pw+"\n"+pw+"\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("smbpasswd -a %s: %v: %s", name, err, out)
		}
	}
	s := &samba{dir: dir, addr: addr, cmd: exec.Command("sh", "-c", sambaScript, "sh", filepath.Join(dir, "smb.conf"))}
	s.cmd.Env = env
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	t.Cleanup(s.stop)
	return s
}

func (s *samba) start(t *testing.T) {
	t.Helper()
	if err := s.startErr(); err != nil {
		t.Fatalf("starting smbd: %v", err)
	}
}

// startErr starts smbd; it may run on another goroutine than the test's.
func (s *samba) startErr() error {
	var out bytes.Buffer
	s.cmd.Stdout, s.cmd.Stderr = &out, &out
	return s.cmd.Start()
}

func (s *samba) stop() {
	if s.cmd.Process != nil {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		_ = s.cmd.Wait()
	}
}

func smbCfg(addr string, shares []string, timeout string) cty.Value {
	return obj(map[string]cty.Value{"address": cty.StringVal(addr), "shares": strs(shares...), "timeout": cty.StringVal(timeout), "interval": cty.StringVal("200ms")})
}

// TestSMBCheckListsShares: smb_check fails, naming the last answer, while
// nothing serves; waits for a server that starts late and passes once it
// lists the shares, as a guest; and fails naming what the server lists
// when a share is missing.
func TestSMBCheckListsShares(t *testing.T) {
	t.Parallel()
	p := configured(t, local.New(), t.TempDir())
	s := newSamba(t)

	r := apply(context.Background(), p, local.SMBCheck, "samba", smbCfg(s.addr, []string{"files"}, "1s"), &bytes.Buffer{})
	wantErr(t, r.Diagnostics, "SMB Check Failed", s.addr+" did not list the shares files to guest within 1s", "the last answer: error: ")

	contains := plan(p, local.SMBCheck, smbCfg(s.addr, []string{"files", "photos"}, "2m")).Diff
	if want := "list the SMB shares of " + s.addr + " as guest until it lists files, photos (timeout 2m, every 200ms)"; contains != want {
		t.Errorf("plan %q, want %q", contains, want)
	}

	// The server comes up while the check waits; the test joins the
	// starter before it reads or stops s.cmd (the race detector's rule).
	started := make(chan error, 1)
	go func() {
		time.Sleep(time.Second)
		started <- s.startErr()
	}()
	var log bytes.Buffer
	ok := mustApply(t, p, local.SMBCheck, smbCfg(s.addr, []string{"FILES", "photos"}, "2m"), &log)
	if err := <-started; err != nil {
		t.Fatalf("starting smbd: %v", err)
	}
	if got := ok.Outputs.GetAttr("shares"); !strings.Contains(got.GoString(), `"files"`) || !strings.Contains(got.GoString(), `"photos"`) {
		t.Errorf("outputs shares %s", got.GoString())
	}
	if !strings.Contains(log.String(), s.addr+" lists ") {
		t.Errorf("the log does not say what it listed:\n%s", log.String())
	}

	r = apply(context.Background(), p, local.SMBCheck, "samba", smbCfg(s.addr, []string{"files", "music"}, "1s"), &bytes.Buffer{})
	wantErr(t, r.Diagnostics, "did not list the shares files, music", "it lists files, IPC$, photos, not music")
}

// TestSMBCheckValidates: an address that is not one, or no share, is
// refused before anything runs.
func TestSMBCheckValidates(t *testing.T) {
	t.Parallel()
	p := configured(t, local.New(), t.TempDir())
	wantErr(t, plan(p, local.SMBCheck, smbCfg("//nas/files", []string{"files"}, "1s")).Diagnostics, `must be a host or an address`)
	wantErr(t, plan(p, local.SMBCheck, obj(map[string]cty.Value{"address": cty.StringVal("nas"), "shares": cty.ListValEmpty(cty.String)})).Diagnostics, `"shares" attribute of smb_check.x is empty`)
}

// addAccounts writes the accounts' Unix users (for smbd only, through
// nss_wrapper: the environment returned), their passdb and the share
// media to conf; the test's directory is made readable to their uids.
func addAccounts(t *testing.T, dir string, conf *strings.Builder, accounts map[string]string) []string {
	t.Helper()
	if _, err := os.Stat(nssWrapper); err != nil {
		t.Fatalf("no nss_wrapper: install Debian's libnss-wrapper (scripts/samba-install.sh, run by make services): %v", err)
	}
	passwd := "root:x:0:0::/root:/bin/sh\nnobody:x:65534:65534::/nonexistent:/bin/false\n"
	group := "root:x:0:\nnogroup:x:65534:\n"
	var names []string
	for name := range accounts {
		names = append(names, name)
	}
	slices.Sort(names)
	for i, name := range names {
		passwd += fmt.Sprintf("%s:x:%d:%d::/nonexistent:/bin/false\n", name, 1001+i, 1001+i)
		group += fmt.Sprintf("%s:x:%d:\n", name, 1001+i)
	}
	for f, text := range map[string]string{"passwd": passwd, "group": group} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	media := filepath.Join(dir, "media")
	if err := os.MkdirAll(media, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(media, "movie.mkv"), []byte("frames"), 0o644); err != nil {
		t.Fatal(err)
	}
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) { // the accounts' uids reach media
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// [global]'s last lines, then the share.
	fmt.Fprintf(conf, "[global]\n  passdb backend = smbpasswd\n  smb passwd file = %s/private-dir/smbpasswd\n", dir)
	fmt.Fprintf(conf, "[media]\n  path = %s\n  valid users = %s\n", media, strings.Join(names, " "))
	return []string{"LD_PRELOAD=" + nssWrapper, "NSS_WRAPPER_PASSWD=" + filepath.Join(dir, "passwd"), "NSS_WRAPPER_GROUP=" + filepath.Join(dir, "group")}
}

func smbUserCfg(addr, user, password, share string) cty.Value {
	return obj(map[string]cty.Value{"address": cty.StringVal(addr), "shares": strs("media"), "timeout": cty.StringVal("2m"), "interval": cty.StringVal("200ms"),
		"user": cty.StringVal(user), "password": cty.StringVal(password), "share": cty.StringVal(share)})
}

// TestSMBCheckLogsInAsUser: smb_check logs in as an account with its
// password and opens the share only it may (a tree connect, its top
// listed); a wrong password fails naming the refused session, a guest
// fails naming the share it may not open, and so does a name without an
// account (which the server lets in as its guest); the password is in
// no output.
func TestSMBCheckLogsInAsUser(t *testing.T) {
	t.Parallel()
	const password = "ana's old password"
	p := configured(t, local.New(), t.TempDir())
	s := newSambaWith(t, map[string]string{"ana": password})
	s.start(t)

	if diff := plan(p, local.SMBCheck, smbUserCfg(s.addr, "ana", password, "media")).Diff; !strings.Contains(diff, " as ana until it lists media and opens media (") {
		t.Errorf("plan %q", diff)
	}
	var log bytes.Buffer
	ok := mustApply(t, p, local.SMBCheck, smbUserCfg(s.addr, "ana", password, "media"), &log)
	if !strings.Contains(log.String(), s.addr+" opened media as ana: 1 entries at its top") {
		t.Errorf("the log does not say ana opened media:\n%s", log.String())
	}
	if got := ok.Outputs.GetAttr("shares").GoString(); !strings.Contains(got, `"media"`) {
		t.Errorf("outputs shares %s", got)
	}

	short := func(cfg cty.Value) cty.Value {
		m := cfg.AsValueMap()
		m["timeout"], m["interval"] = cty.StringVal("10s"), cty.StringVal("1s") // a few tries: smbd forks for each
		return obj(m)
	}
	r := apply(context.Background(), p, local.SMBCheck, "samba", short(smbUserCfg(s.addr, "ana", "not "+password, "media")), &log)
	wantErr(t, r.Diagnostics, "did not list the shares media (and open media) to ana within 10s", "the last answer: error: session as ana: ", "logon is invalid")
	r = apply(context.Background(), p, local.SMBCheck, "samba", short(smbUserCfg(s.addr, "", "", "media")), &log)
	wantErr(t, r.Diagnostics, "to guest within 10s", "the last answer: error: opening the share media as guest: ")
	// Samba lets a name it has no account of in as its guest: the share
	// only accounts may open tells.
	r = apply(context.Background(), p, local.SMBCheck, "samba", short(smbUserCfg(s.addr, "carol", "a password", "media")), &log)
	wantErr(t, r.Diagnostics, "to carol within 10s", "the last answer: error: opening the share media as carol: ")
	if strings.Contains(log.String(), password) || strings.Contains(fmt.Sprint(r.Diagnostics), password) {
		t.Errorf("the password is in the output:\n%s", log.String())
	}
}
