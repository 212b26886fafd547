package incusapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// ExecPost is the body of POST /1.0/instances/{name}/exec. This client
// runs commands in record-output mode only: no websocket, no terminal;
// stdout and stderr go to log files of the instance that ExecOutput reads
// while the command runs.
type ExecPost struct {
	Command     []string          `json:"command"`
	Environment map[string]string `json:"environment,omitempty"`
	User        uint32            `json:"user"`
	Group       uint32            `json:"group"`
	Cwd         string            `json:"cwd,omitempty"`

	WaitForWebsocket bool `json:"wait-for-websocket"`
	Interactive      bool `json:"interactive"`
	RecordOutput     bool `json:"record-output"`
}

// Exec is a command started by StartExec.
type Exec struct {
	Instance  string
	Operation string // the operation's ID
	// Stdout and Stderr are the names of its output files under
	// /1.0/instances/{name}/logs/exec-output/, known from the start.
	Stdout, Stderr string
}

// StartExec starts a command and returns at once: the daemon runs it as
// an operation (which Incus 6.0 does not let be cancelled: may_cancel is
// false) whether or not anyone waits for it, so it survives the client.
func (c *Client) StartExec(ctx context.Context, name string, post ExecPost) (*Exec, error) {
	post.WaitForWebsocket, post.Interactive, post.RecordOutput = false, false, true
	r, _, err := c.do(ctx, call{method: http.MethodPost, path: instancePath(name) + "/exec", body: post})
	if err != nil {
		return nil, err
	}
	var op Operation
	_ = json.Unmarshal(r.Metadata, &op)
	if op.ID == "" {
		op.ID = r.Operation[strings.LastIndex(r.Operation, "/")+1:]
	}
	if op.ID == "" {
		return nil, fmt.Errorf("incus: POST %s/exec: no operation in the answer", instancePath(name))
	}
	return ExecOf(name, op.ID), nil
}

// WaitExec waits for the command's end and returns its exit code. A
// command the daemon could not start (no such program, a bad cwd) is an
// error, as is ctx's end (the command keeps running).
func (c *Client) WaitExec(ctx context.Context, e *Exec) (int, error) {
	in := call{method: http.MethodPost, path: instancePath(e.Instance) + "/exec"}
	op, err := c.wait(ctx, Operation{ID: e.Operation}, in, "", false)
	if err != nil {
		return -1, err
	}
	code, ok := op.Metadata["return"].(float64)
	if !ok {
		return -1, fmt.Errorf("incus: exec operation %s ended without an exit code", e.Operation)
	}
	return int(code), nil
}

// CancelOperation is DELETE /1.0/operations/{id}. The daemon refuses it
// for an operation that cannot be cancelled (a record-output exec):
// errors.Is(err, ErrNotCancellable).
func (c *Client) CancelOperation(ctx context.Context, id string) error {
	_, _, err := c.do(ctx, call{method: http.MethodDelete, path: "/1.0/operations/" + url.PathEscape(id)})
	var se *StatusError
	if errors.As(err, &se) && strings.Contains(se.Message, "can't be cancelled") {
		return fmt.Errorf("%w: %v", ErrNotCancellable, err)
	}
	return err
}

// ErrNotCancellable: the daemon refused to cancel an operation.
var ErrNotCancellable = errors.New("incus: the operation cannot be cancelled")

func execOutputPath(name, file string) string {
	return instancePath(name) + "/logs/exec-output/" + url.PathEscape(file)
}

// ExecOutput reads an exec output file from byte offset on (a range
// request): what was written since the last read. Past the end it
// returns nothing.
func (c *Client) ExecOutput(ctx context.Context, name, file string, offset int64) ([]byte, error) {
	resp, err := c.raw(ctx, call{method: http.MethodGet, path: execOutputPath(name, file),
		headers: map[string]string{"Range": fmt.Sprintf("bytes=%d-", offset)}})
	var se *StatusError
	if errors.As(err, &se) && se.StatusCode == http.StatusRequestedRangeNotSatisfiable {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("incus: GET %s: %w", execOutputPath(name, file), err)
	}
	if resp.StatusCode == http.StatusOK && offset > 0 { // the range was ignored
		if int64(len(b)) <= offset {
			return nil, nil
		}
		b = b[offset:]
	}
	return b, nil
}

// ExecOutputs lists the exec output files the instance keeps (GET
// /1.0/instances/{name}/logs/exec-output): their names.
func (c *Client) ExecOutputs(ctx context.Context, name string) ([]string, error) {
	var urls []string
	if _, err := c.get(ctx, instancePath(name)+"/logs/exec-output", nil, &urls); err != nil {
		return nil, err
	}
	names := make([]string, len(urls))
	for i, u := range urls {
		names[i] = u[strings.LastIndex(u, "/")+1:]
	}
	return names, nil
}

// DeleteExecOutputs removes the output files of the exec e; those already
// gone are no error.
func (c *Client) DeleteExecOutputs(ctx context.Context, e *Exec) error {
	var errs []error
	for _, f := range []string{e.Stdout, e.Stderr} {
		if err := c.DeleteExecOutput(ctx, e.Instance, f); err != nil && !IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ExecOf is the exec of operation id in the instance name, for a client
// that kept only the operation's ID.
func ExecOf(name, id string) *Exec {
	return &Exec{Instance: name, Operation: id, Stdout: "exec_" + id + ".stdout", Stderr: "exec_" + id + ".stderr"}
}

// DeleteExecOutput removes an exec output file.
func (c *Client) DeleteExecOutput(ctx context.Context, name, file string) error {
	resp, err := c.raw(ctx, call{method: http.MethodDelete, path: execOutputPath(name, file)})
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// FollowExec copies the command's stdout and stderr to the writers as
// they grow, reading the output files every interval while it waits for
// the command's end, then deletes the files and returns the exit code.
// When ctx ends first, it returns ctx's error and leaves the command
// (and its files) alone.
func (c *Client) FollowExec(ctx context.Context, e *Exec, stdout, stderr io.Writer, every time.Duration) (int, error) {
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		code, err := c.WaitExec(ctx, e)
		done <- result{code, err}
	}()
	var off [2]int64
	files, outs := [2]string{e.Stdout, e.Stderr}, [2]io.Writer{stdout, stderr}
	copyNew := func() {
		for i := range files {
			b, err := c.ExecOutput(ctx, e.Instance, files[i], off[i])
			if err == nil && len(b) > 0 {
				off[i] += int64(len(b))
				_, _ = outs[i].Write(b)
			}
		}
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case r := <-done:
			if ctx.Err() != nil {
				return r.code, r.err
			}
			copyNew()
			for _, f := range files {
				_ = c.DeleteExecOutput(ctx, e.Instance, f)
			}
			return r.code, r.err
		case <-tick.C:
			copyNew()
		}
	}
}

// RunningExecs lists the record-output commands (operations of class
// "task", "Executing command") running in an instance: what a client
// killed while it waited left behind.
func (c *Client) RunningExecs(ctx context.Context, name string) ([]Exec, error) {
	var ops map[string][]Operation
	if _, err := c.get(ctx, "/1.0/operations", url.Values{"recursion": {"1"}}, &ops); err != nil {
		return nil, err
	}
	var out []Exec
	for _, op := range ops["running"] {
		if op.Class != "task" || op.Description != "Executing command" {
			continue
		}
		for _, r := range op.Resources["instances"] {
			if r == instancePath(name) || strings.HasPrefix(r, instancePath(name)+"?") {
				out = append(out, *ExecOf(name, op.ID))
				break
			}
		}
	}
	return out, nil
}
