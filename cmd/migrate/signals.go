package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/homelab-migrate/migrate/engine"
)

// stopSignals are the signals that stop migrate gently: Ctrl-C, SIGTERM,
// and SIGHUP (the terminal is gone: an SSH session dropped) unless it was
// ignored when migrate started (nohup), which Notify would undo.
func stopSignals() []os.Signal {
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	return sigs
}

// errSecondInterrupt is why the steps a second interrupt cancels were cut
// off, as their records say.
var errSecondInterrupt = errors.New("a second interrupt cancelled the running steps")

// interrupts turns SIGINT, SIGTERM and SIGHUP into the engine's two
// contexts: the first stops gently, the second cancels the running steps.
// A hangup never aborts: one comes from the kernel and another from the
// shell. abort cancels as the second does, for cause (the state's lock
// lost). release undoes it.
func interrupts(notify func(abort bool)) (stop, cancel context.Context, abort func(cause error), release func()) {
	cancel, cancelFn := context.WithCancelCause(context.Background())
	stop, stopFn := context.WithCancel(cancel)
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, stopSignals()...)
	// With the terminal gone, writing to it fails: with EPIPE on a pipe
	// (ssh without a terminal), which would kill migrate with SIGPIPE
	// before it saves. Caught, it is only a failed write, which the views
	// ignore. (Caught, not ignored: an ignored signal stays ignored in
	// the commands that steps run.)
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	done := make(chan struct{})
	go func() {
		n := 0
		for {
			select {
			case <-done:
				return
			case sig := <-ch:
				if sig == syscall.SIGHUP && n > 0 {
					continue
				}
				n++
				switch n {
				case 1:
					notify(false)
					stopFn()
				case 2:
					notify(true)
					cancelFn(errSecondInterrupt)
				}
			}
		}
	}()
	abort = func(cause error) {
		if cancel.Err() == nil {
			notify(true)
		}
		cancelFn(cause)
	}
	var once sync.Once
	return stop, cancel, abort, func() {
		once.Do(func() {
			// The signals stay caught (and dropped) until migrate exits:
			// a late hangup or broken pipe must not kill it while it
			// saves the state.
			close(done)
			stopFn()
			cancelFn(nil)
		})
	}
}

// interrupted turns the error of a run stopped by a signal into exit code
// 130, whatever the steps cancelled under it reported.
func interrupted(stop context.Context, err error) error {
	if err != nil && stop.Err() != nil && !errors.Is(err, engine.ErrInterrupted) {
		return &codeError{code: exitInterrupted, err: fmt.Errorf("%w (%v)", engine.ErrInterrupted, err)}
	}
	return err
}
