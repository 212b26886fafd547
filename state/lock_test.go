package state

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestSecondWriterFailsNamingHolder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	holder, err := Open(dir, writer("migrate run --all"))
	if err != nil {
		t.Fatal(err)
	}
	id := holder.LockInfo().ID
	start := time.Now()
	_, err = Open(dir, writer("migrate rollback"))
	var le *LockedError
	if !errors.As(err, &le) {
		t.Fatalf("second Open: %v, want a LockedError", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("second Open took %v: it must fail at once", d)
	}
	h := le.Holder
	if h.ID != id || h.PID != os.Getpid() || h.Command != "migrate run --all" || h.Host == "" || h.Created.IsZero() {
		t.Fatalf("holder %+v", h)
	}
	for _, want := range []string{fmt.Sprint("pid ", os.Getpid()), "migrate run --all", h.User + "@" + h.Host, "since ", "migrate state unlock " + id} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if info, err := ReadLock(dir); err != nil || info == nil || info.ID != id {
		t.Fatalf("ReadLock: %+v, %v", info, err)
	}
	// Readers are not held back.
	openR(t, dir).Close()
	// Unlock does not break a live holder's lock.
	if err := Unlock(dir, id); err == nil || !strings.Contains(err.Error(), "running process") {
		t.Fatalf("Unlock of a live lock: %v", err)
	}
	if err := holder.Close(); err != nil {
		t.Fatal(err)
	}
	if info, err := ReadLock(dir); info != nil || err != nil {
		t.Fatalf("ReadLock after Close: %+v, %v", info, err)
	}
	openW(t, dir).Close()
}

func TestUnlock(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// A lock file left by a holder on another host (nobody holds the
	// flock here).
	path := filepath.Join(dir, lockFile)
	stale := `{"id":"abc123","pid":4242,"host":"ci-runner-7","user":"ci","command":"migrate run --all","created":"2025-03-01T12:00:00Z"}` + "\n"
	writeFile(t, path, []byte(stale))
	if info, err := ReadLock(dir); info != nil || err != nil {
		t.Fatalf("ReadLock of a lock nobody holds: %+v, %v", info, err)
	}
	if err := Unlock(dir, "wrong"); err == nil || !strings.Contains(err.Error(), "abc123") {
		t.Fatalf("Unlock with the wrong ID: %v", err)
	}
	if got := readFile(t, path); string(got) != stale {
		t.Fatalf("Unlock with the wrong ID changed the lock file")
	}
	if err := Unlock(dir, "abc123"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("lock file still there: %v", err)
	}
	if err := Unlock(dir, "abc123"); err == nil || !strings.Contains(err.Error(), "not locked") {
		t.Fatalf("Unlock of an unlocked state: %v", err)
	}
}

const lockChildEnv = "STATE_TEST_LOCK_CHILD_DIR"

// TestMain turns the test binary into the child of
// TestLockReleasedWhenHolderKilled when asked to.
func TestMain(m *testing.M) {
	if dir := os.Getenv(lockChildEnv); dir != "" {
		lockChild(dir)
	}
	os.Exit(m.Run())
}

// lockChild takes the lock, says so, and waits to be killed.
func lockChild(dir string) {
	l, err := Open(dir, writer("migrate run --phase child"))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	if err := l.Checkpoint(rec("exec.child", Running)); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("locked", l.LockInfo().ID)
	time.Sleep(time.Minute)
	os.Exit(2)
}

func TestLockReleasedWhenHolderKilled(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), lockChildEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	id, ok := strings.CutPrefix(strings.TrimSpace(line), "locked ")
	if !ok {
		t.Fatalf("child said %q, %v", line, err)
	}

	_, err = Open(dir, writer("migrate run"))
	var le *LockedError
	if !errors.As(err, &le) || le.Holder.PID != cmd.Process.Pid || le.Holder.ID != id {
		t.Fatalf("Open while the child holds the lock: %v (child pid %d)", err, cmd.Process.Pid)
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	// The lock file is still there, but nobody holds the lock.
	if _, err := os.Stat(filepath.Join(dir, lockFile)); err != nil {
		t.Fatalf("the killed child's lock file: %v", err)
	}
	if info, err := ReadLock(dir); info != nil || err != nil {
		t.Fatalf("ReadLock after the holder died: %+v, %v", info, err)
	}
	l, err := Open(dir, writer("migrate run"))
	if err != nil {
		t.Fatalf("Open after the holder was killed: %v", err)
	}
	defer l.Close()
	if r, ok := l.Step(addr("exec.child")); !ok || r.Status != Running {
		t.Fatalf("the killed child's checkpoint: %+v %v", r, ok)
	}
	if info, _ := ReadLock(dir); info == nil || info.ID != l.LockInfo().ID {
		t.Fatalf("lock file does not name the new holder: %+v", info)
	}
}

// TestLockOfDeadHolderStillSharedByItsChild: a holder killed while a
// child it forked still shares the lock (it has not exec'd yet) must not
// make the next command fail; the lock is released moments later.
func TestLockOfDeadHolderStillSharedByItsChild(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	info, _ := json.Marshal(LockInfo{ID: "gone", PID: dead.Process.Pid, Host: host, Command: "migrate run"})
	path := filepath.Join(dir, lockFile)
	if err := os.WriteFile(path, info, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := flock(f, true); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(150 * time.Millisecond)
		f.Close() // the child execs or dies
	}()
	start := time.Now()
	l, err := Open(dir, Options{Lock: NewLockInfo("migrate run")})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	l.Close()
	if waited := time.Since(start); waited < 100*time.Millisecond {
		t.Errorf("took the lock after %s, while it was still held", waited)
	}
}
