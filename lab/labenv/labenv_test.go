package labenv

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestWriteRead: what a lab writes is read back while its Incus host
// answers, and refused, saying how to start a lab, when it does not.
func TestWriteRead(t *testing.T) {
	dir := t.TempDir()
	if _, err := Read(dir); err == nil || !strings.Contains(err.Error(), "migrate-lab serve --dir "+dir) {
		t.Errorf("Read without a lab: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing answers there now
	env := []string{"A=1", "B=x=y z"}
	if err := Write(dir, addr, env); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, File)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("lab.env: %v, want mode 0600", err)
	}
	if _, err := Read(dir); err == nil || !strings.Contains(err.Error(), "its Incus host at "+addr+" does not answer") {
		t.Errorf("Read of a dead lab: %v", err)
	}
	l, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got, err := Read(dir); err != nil || !slices.Equal(got, env) {
		t.Errorf("Read = %v, %v; want %v", got, err, env)
	}
	if got, err := IncusAddr(dir); err != nil || got != addr {
		t.Errorf("IncusAddr = %q, %v", got, err)
	}
	for _, bad := range []string{"NOEQUALS", "=v", "A=1\nB=2"} {
		if err := Write(dir, addr, []string{bad}); err == nil {
			t.Errorf("Write(%q) succeeded", bad)
		}
	}
	Remove(dir)
	if _, err := Read(dir); err == nil {
		t.Error("Read after Remove succeeded")
	}
}
