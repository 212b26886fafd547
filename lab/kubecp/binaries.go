package kubecp

import (
	"bufio"
	"bytes"
	"context"
	"embed"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// The build script and the lab's own kwok stages travel inside the
// program that links this package: a migrate-lab moved away from its
// checkout still builds and runs its cluster. scripts/kube-up.sh runs the
// same files from the checkout.
var (
	//go:embed build-kube.sh
	buildKube []byte
	//go:embed kwok-stages/*.yaml
	kwokStages embed.FS
)

var (
	binMu sync.Mutex
	// buildScript and progressEvery are variables for the tests.
	buildScript   = buildKube
	progressEvery = 30 * time.Second
)

// Binaries returns the directory of etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler and kwok, building them with
// build-kube.sh (embedded) the first time (minutes on two cores; cached
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

// build runs the build script, written to a temporary file, and returns
// the directory it prints.
func build(log func(format string, args ...any)) (string, error) {
	tmp, err := os.MkdirTemp("", "migrate-build-kube-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)

	script := filepath.Join(tmp, "build-kube.sh")
	if err = os.WriteFile(script, buildScript, 0o600); err != nil {
		return "", err
	}

	// Run by bash, not executed: a file just written cannot be executed
	// while a process forked meanwhile still holds it open (ETXTBSY).
	cmd := exec.Command("bash", script) //nolint:gosec

	var stdout bytes.Buffer

	cmd.Stdout = &stdout

	stderr, err := cmd.StderrPipe()
	if err != nil {
		return "", err
	}

	start := time.Now()
	if err = cmd.Start(); err != nil {
		return "", fmt.Errorf("kubecp: build-kube.sh: %w", err)
	}

	p := startProgress(log, start)
	lines := p.follow(stderr)
	err = cmd.Wait()

	p.stop()

	if err != nil {
		return "", fmt.Errorf("kubecp: build-kube.sh failed: %w\n%s", err, strings.Join(lines, "\n"))
	}

	dir := strings.TrimSpace(stdout.String())
	if p.built {
		log("kubecp: binaries built in %s, cached in %s", time.Since(start).Round(time.Second), dir)
	}

	return dir, nil
}

// progress says what a build does: the script's lines, that it builds
// (once), and every progressEvery that it still does.
type progress struct {
	log      func(format string, args ...any)
	start    time.Time
	building chan struct{}
	done     chan struct{}
	ticker   sync.WaitGroup
	built    bool // the script said it builds something
}

func startProgress(log func(format string, args ...any), start time.Time) *progress {
	p := &progress{log: log, start: start, building: make(chan struct{}, 1), done: make(chan struct{})}
	every := progressEvery

	p.ticker.Add(1)

	go func() {
		defer p.ticker.Done()

		tick := time.NewTicker(every)
		defer tick.Stop()

		seen := false
		for {
			select {
			case <-p.done:
				return
			case <-p.building:
				seen = true
			case <-tick.C:
				if seen {
					log("kubecp: still building (%s so far)", time.Since(start).Round(time.Second))
				}
			}
		}
	}()

	return p
}

// follow logs the script's stderr (it says there what it builds) until
// it ends, and returns its lines.
func (p *progress) follow(stderr io.Reader) []string {
	var lines []string

	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		line := sc.Text()
		lines = append(lines, line)

		if strings.Contains(line, "building") {
			if !p.built {
				p.log("kubecp: first run: building the control plane's binaries from the Go module proxy, once (they are cached)")
			}

			p.built = true

			select {
			case p.building <- struct{}{}:
			default:
			}
		}

		p.log("%s", line)
	}

	return lines
}

func (p *progress) stop() {
	close(p.done)
	p.ticker.Wait()
}

// stageFiles are the lab's own kwok stages (a pod that fails on demand),
// by their path under Config.Dir.
func stageFiles() (map[string][]byte, error) {
	files := map[string][]byte{}
	names, err := fs.Glob(kwokStages, "kwok-stages/*.yaml")
	if err != nil {
		return nil, err
	}

	for _, n := range names {
		b, err := kwokStages.ReadFile(n)
		if err != nil {
			return nil, err
		}

		files[n] = b
	}

	return files, nil
}
