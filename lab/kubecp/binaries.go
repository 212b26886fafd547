package kubecp

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

// scriptsDir is the checkout's scripts/ (this file is lab/kubecp/binaries.go).
func scriptsDir() string {
	_, file, _, _ := runtime.Caller(0) //nolint:dogsled

	return filepath.Join(filepath.Dir(file), "..", "..", "scripts")
}

var (
	binMu sync.Mutex
	// buildScript and progressEvery are variables for the tests.
	buildScript   = filepath.Join(scriptsDir(), "build-kube.sh")
	progressEvery = 30 * time.Second
)

// Binaries returns the directory of etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler and kwok, building them with
// scripts/build-kube.sh the first time (minutes on two cores; cached
// afterwards). The build's progress and how long it took go to log.
// MIGRATE_KUBE_BIN names a directory of ready binaries instead.
//
// When ctx ends first, Binaries returns but the build goes on to its end
// (a build killed half-way could leave a truncated binary in the cache);
// the next call waits for it.
func Binaries(ctx context.Context, log func(format string, args ...any)) (string, error) {
	if dir := os.Getenv("MIGRATE_KUBE_BIN"); dir != "" {
		return dir, nil
	}

	var (
		logMu     sync.Mutex
		abandoned bool
	)

	// no logging once the caller is gone (a test's t.Logf would panic)
	logf := func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()

		if !abandoned && log != nil {
			log(format, args...)
		}
	}

	type result struct {
		dir string
		err error
	}

	res := make(chan result, 1)

	go func() {
		binMu.Lock()
		defer binMu.Unlock()

		dir, err := build(logf)
		res <- result{dir, err}
	}()

	select {
	case r := <-res:
		return r.dir, r.err
	case <-ctx.Done():
		logMu.Lock()
		abandoned = true
		logMu.Unlock()

		return "", ctx.Err()
	}
}

func build(log func(format string, args ...any)) (string, error) {
	script := buildScript
	cmd := exec.Command(script) //nolint:gosec

	var stdout bytes.Buffer

	cmd.Stdout = &stdout

	stderr, err := cmd.StderrPipe()
	if err != nil {
		return "", err
	}

	start := time.Now()
	if err = cmd.Start(); err != nil {
		return "", fmt.Errorf("kubecp: %s: %w", script, err)
	}

	// The script says what it builds on stderr; while it builds, say
	// that it still does.
	building := make(chan struct{}, 1)
	done := make(chan struct{})
	every := progressEvery

	var progress sync.WaitGroup

	progress.Add(1)

	go func() {
		defer progress.Done()

		tick := time.NewTicker(every)
		defer tick.Stop()

		seen := false
		for {
			select {
			case <-done:
				return
			case <-building:
				seen = true
			case <-tick.C:
				if seen {
					log("kubecp: still building (%s so far)", time.Since(start).Round(time.Second))
				}
			}
		}
	}()

	built := false
	var lines []string

	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		line := sc.Text()
		lines = append(lines, line)

		if strings.Contains(line, "building") {
			if !built {
				log("kubecp: first run: building the control plane's binaries from the Go module proxy, once (they are cached)")
			}

			built = true

			select {
			case building <- struct{}{}:
			default:
			}
		}

		log("%s", line)
	}

	err = cmd.Wait()
	close(done)
	progress.Wait()

	if err != nil {
		return "", fmt.Errorf("kubecp: %s failed: %w\n%s", script, err, strings.Join(lines, "\n"))
	}

	dir := strings.TrimSpace(stdout.String())
	if built {
		log("kubecp: binaries built in %s, cached in %s", time.Since(start).Round(time.Second), dir)
	}

	return dir, nil
}
