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
	body := "#!/bin/sh\nif [ ! -e " + dir + "/built ]; then echo 'build-kube: building etcd v3.6.9 (a minute or two, once)' >&2; sleep 1; touch " + dir + "/built; fi\necho " + dir + "\n"

	oldScript, oldEvery := buildScript, progressEvery
	buildScript, progressEvery = []byte(body), 200*time.Millisecond

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
	body := "#!/bin/sh\nif [ ! -e " + dir + "/built ]; then echo 'build-kube: building' >&2; sleep 1; touch " + dir + "/built; fi\necho " + dir + "\n"

	oldScript := buildScript
	buildScript = []byte(body)

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

// A failed build says so with what the script said.
func TestBinariesFailed(t *testing.T) {
	oldScript := buildScript
	buildScript = []byte("#!/bin/sh\necho 'build-kube: failed: go mod tidy' >&2\nexit 3\n")

	t.Cleanup(func() { buildScript = oldScript })

	_, err := Binaries(context.Background(), t.Logf)
	if err == nil || !strings.Contains(err.Error(), "build-kube.sh failed") || !strings.Contains(err.Error(), "build-kube: failed: go mod tidy") {
		t.Fatalf("a failing build: %v", err)
	}
}

// The program carries the build script and the lab's kwok stages (no
// path into a checkout), and scripts/kube-up.sh runs the same files.
func TestEmbeddedFiles(t *testing.T) {
	onDisk, err := os.ReadFile("build-kube.sh")
	if err != nil {
		t.Fatal(err)
	}

	if !strings.HasPrefix(string(buildKube), "#!/usr/bin/env bash\n") || string(buildKube) != string(onDisk) {
		t.Errorf("the embedded build script is not build-kube.sh (%d bytes)", len(buildKube))
	}

	stages, err := stageFiles()
	if err != nil || len(stages["kwok-stages/pod-fail.yaml"]) == 0 {
		t.Errorf("the embedded kwok stages: %v %v", stages, err)
	}

	up, err := os.ReadFile("../../scripts/kube-up.sh")
	if err != nil {
		t.Fatal(err)
	}

	for _, want := range []string{`kubecp=$here/../lab/kubecp`, `"$kubecp/build-kube.sh"`, `"$kubecp"/kwok-stages/*.yaml`} {
		if !strings.Contains(string(up), want) {
			t.Errorf("scripts/kube-up.sh does not use lab/kubecp's files: no %s", want)
		}
	}
}
