package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/views"
)

// readLine reads one line from stdin, giving up when ctx ends.
func (a *app) readLine(ctx context.Context) (string, error) {
	type result struct {
		s   string
		err error
	}
	ch := make(chan result, 1)
	go func() {
		s, err := a.stdin.ReadString('\n')
		if err == io.EOF && s != "" {
			err = nil
		}
		ch <- result{strings.TrimSpace(s), err}
	}()
	select {
	case r := <-ch:
		return r.s, r.err
	case <-ctx.Done():
		return "", engine.ErrInterrupted
	}
}

// confirm asks the person at the terminal to type yes. Without a
// terminal it fails, naming the flag that skips the question.
func (a *app) confirm(ctx context.Context, w io.Writer, question, what string) error {
	if !isTerminal(os.Stdin) {
		return fmt.Errorf("cannot ask whether to %s: stdin is not a terminal; rerun with --auto-approve to %s without asking", what, what)
	}
	a.inMu.Lock()
	defer a.inMu.Unlock()
	views.Confirm(w, question)
	answer, err := a.readLine(ctx)
	fmt.Fprintln(w)
	if err != nil {
		return err
	}
	if !isYes(answer) {
		return fmt.Errorf("cancelled: nothing was changed")
	}
	return nil
}

// isYes: one convention for every question that lets migrate go on (run
// and rollback confirmations, approval steps), terraform's: only "yes".
func isYes(answer string) bool { return answer == "yes" }

// prompter returns the engine's question for approval steps when stdin is
// a terminal, and nil otherwise.
func (a *app) prompter(ctx context.Context, w io.Writer, rv views.RunView) func(string) (bool, error) {
	if !isTerminal(os.Stdin) {
		return nil
	}
	return func(q string) (bool, error) {
		a.inMu.Lock()
		defer a.inMu.Unlock()
		resume := rv.Pause()
		defer resume()
		views.Confirm(w, q)
		answer, err := a.readLine(ctx)
		fmt.Fprintln(w)
		if err != nil {
			return false, err
		}
		return isYes(answer), nil
	}
}

// approver is user@host, recorded with approvals.
func approver() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + host
}
