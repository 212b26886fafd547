package plugin

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
)

// Run runs p's program once with args, as a command rather than a
// provider (the talos program's gen-secrets): found and checked as Find
// says, introducing itself as a provider does (ServeCommand), stdin as
// its input; it returns the rest of its output. What it makes (a new
// cluster's keys) is as secret as what a provider receives.
func Run(ctx context.Context, p Program, stdin []byte, args ...string) ([]byte, error) {
	found, err := Find(p)
	if err != nil {
		return nil, err
	}
	defer found.Close()
	cmd := found.command(args...)
	cmd.Env = providers.Environ(p.Env...)
	cmd.SysProcAttr = procAttr()
	cmd.Stdin = bytes.NewReader(stdin)
	stderr := &tailBuffer{w: io.Discard} // its last lines, for an error
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", found.Path, err)
	}
	stop := context.AfterFunc(ctx, func() { _ = cmd.Process.Kill() })
	defer stop()
	kill := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	tail := stderr.tail
	r := bufio.NewReader(stdout)
	firstLine := func() ([]byte, bool) {
		b, err := r.ReadBytes('\n')
		return b, err == nil
	}
	if err := handshake(firstLine, p, found.Path, tail, kill); err != nil {
		return nil, err
	}
	out, err := io.ReadAll(r)
	if err != nil {
		kill()
		return nil, fmt.Errorf("reading the output of %s: %w", found.Path, err)
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("%s %s: %v%s", found.Path, strings.Join(args, " "), err, tail())
	}
	return out, nil
}

// ServeCommand is the program side of Run: it introduces the program as
// the provider name of schema, then runs run on its standard input and
// output; it returns the exit code.
func ServeCommand(name string, schema phases.Schema, run func(stdin io.Reader, stdout io.Writer) error) int {
	nameProcess()
	w := bufio.NewWriter(os.Stdout)
	err := writeHello(w, name, schema)
	if err == nil {
		err = run(os.Stdin, w)
	}
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		// The hello goes out even so: without it the caller sees a
		// stranger, not this error, which it reads from stderr once the
		// program has exited.
		_ = w.Flush()
		fmt.Fprintf(os.Stderr, "migrate provider %s: %v\n", name, err)
		return 1
	}
	return 0
}
