package local_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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
// serves them; started by start, stopped when the test ends.
type samba struct {
	dir, addr string
	cmd       *exec.Cmd
}

// sambaScript runs smbd and samba-dcerpcd (the share list's RPC server,
// which smbd would otherwise start on demand in a session of its own,
// outliving the test) in the foreground, in one process group.
const sambaScript = `smbd --foreground --no-process-group --configfile="$1" --debug-stdout &
/usr/libexec/samba/samba-dcerpcd --foreground --no-process-group --libexec-rpcds --configfile="$1" --debug-stdout &
wait`

func newSamba(t *testing.T) *samba {
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
	if err := os.WriteFile(filepath.Join(dir, "smb.conf"), []byte(conf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &samba{dir: dir, addr: addr, cmd: exec.Command("sh", "-c", sambaScript, "sh", filepath.Join(dir, "smb.conf"))}
	s.cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(smbd)+":"+os.Getenv("PATH"))
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	t.Cleanup(s.stop)
	return s
}

func (s *samba) start(t *testing.T) {
	t.Helper()
	var out bytes.Buffer
	s.cmd.Stdout, s.cmd.Stderr = &out, &out
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting smbd: %v", err)
	}
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

	go func() { time.Sleep(time.Second); s.start(t) }() // the server comes up while the check waits
	var log bytes.Buffer
	ok := mustApply(t, p, local.SMBCheck, smbCfg(s.addr, []string{"FILES", "photos"}, "2m"), &log)
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
