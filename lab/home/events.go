package home

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// EventsFile is the lab's events log under Dir: one JSON Event per line,
// appended as the effects happen, never rewritten. It is what a test
// counts once-only effects from (tests/torture): the lab's own record,
// kept outside the instances, so that a snapshot restored or an instance
// deleted does not take it away.
const EventsFile = "events.jsonl"

// Event kinds.
const (
	// EventExec: a command started in an instance (Instance, Command).
	EventExec = "exec"
	// EventBootstrap: a Talos VM's etcd was bootstrapped (Instance; a
	// refused bootstrap is not an event).
	EventBootstrap = "bootstrap"
	// EventPod: a Talos VM's Kubernetes ran the commands of a Job's pod
	// (Instance, Namespace, Job, Pod).
	EventPod = "pod"
)

// Event is one effect the lab made.
type Event struct {
	Time      time.Time `json:"time"`
	Kind      string    `json:"kind"`
	Instance  string    `json:"instance"` // the Incus instance: an old VM, or the Talos VM
	Command   []string  `json:"command,omitempty"`
	Namespace string    `json:"namespace,omitempty"`
	Job       string    `json:"job,omitempty"`
	Pod       string    `json:"pod,omitempty"`
}

// events appends Events to Dir/EventsFile.
type events struct {
	mu sync.Mutex
	f  *os.File
}

func openEvents(dir string) (*events, error) {
	f, err := os.OpenFile(filepath.Join(dir, EventsFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	return &events{f: f}, nil
}

// add writes e as one line, in one write: a reader never sees half of it.
func (l *events) add(e Event) {
	e.Time = time.Now().UTC()
	b, _ := json.Marshal(e) //nolint:errcheck // strings and times only
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		_, _ = l.f.Write(append(b, '\n'))
	}
}

func (l *events) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

// ReadEvents reads the events log of the lab in dir (running or not), in
// the order the events happened; none when there is no log yet. A last
// line still being written (no newline yet) is left for the next read.
func ReadEvents(dir string) ([]Event, error) {
	path := filepath.Join(dir, EventsFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	lines := bytes.Split(b, []byte("\n"))
	var out []Event
	for i, line := range lines[:len(lines)-1] {
		var e Event
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, i+1, err)
		}
		out = append(out, e)
	}
	return out, nil
}
