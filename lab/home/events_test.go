package home

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestEvents: events are appended one line each and read back in order;
// a last line being written (no newline yet) is not read until it ends.
func TestEvents(t *testing.T) {
	dir := t.TempDir()
	if got, err := ReadEvents(dir); err != nil || got != nil {
		t.Fatalf("no log yet: %v, %v", got, err)
	}
	l, err := openEvents(dir)
	if err != nil {
		t.Fatal(err)
	}
	l.add(Event{Kind: EventExec, Instance: "matrix", Command: []string{"systemctl", "stop", "matrix-synapse"}})
	l.add(Event{Kind: EventBootstrap, Instance: "talos"})
	l.close()
	l.add(Event{Kind: EventPod, Instance: "talos"}) // after close: dropped, no panic
	f, err := os.OpenFile(filepath.Join(dir, EventsFile), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"kind":"pod","inst`)
	f.Close()
	got, err := ReadEvents(dir)
	if err != nil || len(got) != 2 || got[0].Kind != EventExec || !slices.Equal(got[0].Command, []string{"systemctl", "stop", "matrix-synapse"}) ||
		got[1].Kind != EventBootstrap || got[1].Instance != "talos" || got[1].Time.IsZero() {
		t.Fatalf("read back: %+v, %v", got, err)
	}
	f, _ = os.OpenFile(filepath.Join(dir, EventsFile), os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`ance":"talos","job":"synapse-restore"}` + "\n")
	f.Close()
	if got, err := ReadEvents(dir); err != nil || len(got) != 3 || got[2].Job != "synapse-restore" {
		t.Fatalf("the line finished: %+v, %v", got, err)
	}
}
