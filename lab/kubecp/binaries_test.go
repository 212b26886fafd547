package kubecp

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

type logBuf struct {
	mu    sync.Mutex
	lines []string
}

func (l *logBuf) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()

	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()

	return strings.Join(l.lines, "\n")
}

// The first run says it builds, shows progress and how long it took; a
// cached run says nothing. (A stand-in script: a cold build of the real
// one takes many minutes.)
func TestBinariesLog(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "build.sh")
	body := "#!/bin/sh\nif [ ! -e " + dir + "/built ]; then echo 'build-kube: building etcd v3.6.9 (a minute or two, once)' >&2; sleep 1; touch " + dir + "/built; fi\necho " + dir + "\n"

	if err := os.WriteFile(script, []byte(body), 0o755); err != nil { //nolint:gosec
		t.Fatal(err)
	}

	oldScript, oldEvery := buildScript, progressEvery
	buildScript, progressEvery = script, 200*time.Millisecond

	t.Cleanup(func() { buildScript, progressEvery = oldScript, oldEvery })

	var cold logBuf

	got, err := Binaries(context.Background(), cold.logf)
	if err != nil || got != dir {
		t.Fatalf("Binaries: %q %v", got, err)
	}

	for _, want := range []string{"first run: building", "build-kube: building etcd", "still building", "binaries built in"} {
		if !strings.Contains(cold.String(), want) {
			t.Errorf("the first run's log has no %q:\n%s", want, cold.String())
		}
	}

	var warm logBuf
	if _, err = Binaries(context.Background(), warm.logf); err != nil || warm.String() != "" {
		t.Fatalf("a cached run: %v, log %q", err, warm.String())
	}
}

// A caller gone during the build does not kill it (a half-written binary
// would stay in the cache): the next call gets what it built.
func TestBinariesCancelled(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "build.sh")
	body := "#!/bin/sh\nif [ ! -e " + dir + "/built ]; then echo 'build-kube: building' >&2; sleep 1; touch " + dir + "/built; fi\necho " + dir + "\n"

	if err := os.WriteFile(script, []byte(body), 0o755); err != nil { //nolint:gosec
		t.Fatal(err)
	}

	oldScript := buildScript
	buildScript = script

	t.Cleanup(func() { buildScript = oldScript })

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()

	if _, err := Binaries(ctx, t.Logf); err != context.DeadlineExceeded {
		t.Fatalf("cancelled: %v", err)
	}

	got, err := Binaries(context.Background(), t.Logf)
	if _, statErr := os.Stat(filepath.Join(dir, "built")); err != nil || got != dir || statErr != nil {
		t.Fatalf("after a cancelled call: %q %v %v", got, err, statErr)
	}
}

// The real script: every binary Start runs is there.
func TestBinaries(t *testing.T) {
	dir, err := Binaries(context.Background(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}

	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"} {
		if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.Mode()&0o100 == 0 {
			t.Errorf("%s: %v", b, err)
		}
	}
}

func TestStartBadInput(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Addr: "lab-node"}, `Addr "lab-node" is not an IPv4 address`},
		{Config{Addr: "127.0.0.9"}, "no cluster CA or service account key"},
	} {
		if _, err := Start(context.Background(), tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Start(%+v): %v, want %q", tc.cfg, err, tc.want)
		}
	}
}
