package debroot

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

//go:embed build-debian-root.sh
var buildScript []byte

// Root returns the cached Debian root, building it the first time (about
// a minute: the log says so, and how long it took). When ctx ends first
// the build goes on to its end, keeping the cache whole; the script's
// lock makes the next caller wait for it.
func Root(ctx context.Context, log func(format string, args ...any)) (string, error) {
	if dir := os.Getenv("MIGRATE_DEBIAN_ROOT"); dir != "" {
		return dir, nil
	}
	if log == nil {
		log = func(string, ...any) {}
	}
	type result struct {
		dir string
		err error
	}
	res := make(chan result, 1)
	lines := make(chan string, 64)
	go func() {
		dir, err := build(lines)
		res <- result{dir, err}
	}()
	for {
		select {
		case line := <-lines:
			log("%s", line)
		case r := <-res:
			for len(lines) > 0 {
				log("%s", <-lines)
			}
			return r.dir, r.err
		case <-ctx.Done():
			return "", fmt.Errorf("debroot: waiting for the Debian root: %w", ctx.Err())
		}
	}
}

// build runs the script (by bash, from a temporary file) and returns the
// directory it prints; its stderr lines go to lines, dropped when no one
// reads them any more.
func build(lines chan<- string) (string, error) {
	tmp, err := os.MkdirTemp("", "migrate-debian-root-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	script := filepath.Join(tmp, "build-debian-root.sh")
	if err := os.WriteFile(script, buildScript, 0o600); err != nil {
		return "", err
	}
	cmd := exec.Command("bash", script)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return "", err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("debroot: %w", err)
	}
	var said []string
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		said = append(said, sc.Text())
		select {
		case lines <- sc.Text():
		default:
		}
	}
	if err := cmd.Wait(); err != nil {
		return "", fmt.Errorf("debroot: building the Debian root failed (%s): %w\n%s", time.Since(start).Round(time.Second), err, strings.Join(said, "\n"))
	}
	dir := strings.TrimSpace(stdout.String())
	if st, err := os.Stat(filepath.Join(dir, "usr", "bin")); err != nil || !st.IsDir() {
		return "", fmt.Errorf("debroot: the build printed %q, which is no root", dir)
	}
	return dir, nil
}
