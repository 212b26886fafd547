package apps_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
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
	var shares []string
	deadline := time.Now().Add(60 * time.Second)
	for {
		var err error
		if shares, err = listShares(addr + ":445"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no share list from %s:445: %v; output:\n%s", addr, err, r.out)
		}
		time.Sleep(200 * time.Millisecond)
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
