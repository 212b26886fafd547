package state

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

const (
	// LogsDir is the directory, in the state directory, of event logs.
	LogsDir = "logs"
	// KeepLogs is how many logs OpenLog keeps, the newest.
	KeepLogs = 20
	// MaxErrorBytes is the most of an error kept in a record's LastError
	// and shown on the terminal; the rest is in the log.
	MaxErrorBytes = 4 << 10
	// maxRecordErrorBytes bounds LastError at the record write: an error
	// CutError already cut (MaxErrorBytes plus its pointer to the log)
	// passes as it is.
	maxRecordErrorBytes = MaxErrorBytes + 1<<10
)

// Log is the event log of one writing command (run, rollback):
// logs/<UTC time>-<command>.log in the state directory, mode 0600, with
// every event in full, errors whole. What it is given must already be
// free of secrets. It is safe for concurrent use.
type Log struct {
	mu      sync.Mutex
	dir     string // the state directory
	command string
	f       *os.File // nil until Open
	buf     *bufio.Writer
	flushed time.Time
	written time.Time // the last Write
	path    string
	err     error // the first write error; later writes are dropped
	// timer flushes what a write left in buf once logFlushEvery has
	// passed, when no later write did (nil: none pending).
	timer  *time.Timer
	closed bool
}

// logFlushEvery bounds what a migrate killed outright (SIGKILL) leaves
// out of its log: the state's journal, not the log, is what resumes a
// run, so the log is written in blocks rather than one write per event
// (10,000 steps make some 30,000 events). What a write leaves buffered is
// flushed at the latest logFlushEvery later, even when no event follows
// (a run killed during a long step still has that step's start in its
// log, which the report draws).
const logFlushEvery = 200 * time.Millisecond

// OpenLog creates a new log for command in the state directory dir and
// removes the oldest logs beyond KeepLogs.
func OpenLog(dir, command string) (*Log, error) {
	l := NewLog(dir, command)
	if err := l.Open(); err != nil {
		return nil, err
	}
	return l, nil
}

// NewLog is the log of command in dir, not yet created: a command hands
// it to the engine before it knows whether it will change anything, and
// opens it only once it does, so that a command that refuses leaves no
// file behind. Until Open, writes are dropped and Close does nothing.
func NewLog(dir, command string) *Log {
	return &Log{dir: dir, command: command}
}

// Open creates the log's file and removes the oldest logs beyond
// KeepLogs. It does nothing the second time.
func (l *Log) Open() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		return nil
	}
	ldir := filepath.Join(l.dir, LogsDir)
	if err := os.MkdirAll(ldir, 0o700); err != nil {
		return fmt.Errorf("event log: %w", err)
	}
	// The name sorts by time; the nanoseconds keep two commands of the
	// same second apart.
	name := time.Now().UTC().Format("20060102T150405.000000000Z") + "-" + l.command + ".log"
	path := filepath.Join(ldir, name)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("event log: %w", err)
	}
	pruneLogs(ldir)
	l.f, l.buf, l.flushed, l.path = f, bufio.NewWriterSize(f, 64<<10), time.Now(), path
	return nil
}

// pruneLogs removes all but the KeepLogs newest logs.
func pruneLogs(ldir string) {
	logs, _ := filepath.Glob(filepath.Join(ldir, "*.log"))
	slices.Sort(logs)
	for len(logs) > KeepLogs {
		os.Remove(logs[0])
		logs = logs[1:]
	}
}

// Path is the log's file, empty before Open.
func (l *Log) Path() string {
	if l == nil {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.path
}

// Write appends p. A failure is kept for Close: a log that cannot be
// written must not stop a migration.
func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil || l.closed {
		return len(p), nil
	}
	l.written = time.Now()
	if l.err == nil {
		_, l.err = l.buf.Write(p)
	}
	if l.err == nil && time.Since(l.flushed) >= logFlushEvery {
		l.err = l.buf.Flush()
		l.flushed = time.Now()
	}
	if l.err == nil && l.buf.Buffered() > 0 && l.timer == nil {
		l.timer = time.AfterFunc(logFlushEvery, l.flushLate)
	}
	return len(p), nil
}

// Idle is how long ago the last write was (since Open when none was);
// 0 before Open and after Close.
func (l *Log) Idle() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil || l.closed {
		return 0
	}
	if l.written.IsZero() {
		return time.Since(l.flushed)
	}
	return time.Since(l.written)
}

// flushLate flushes what writes left buffered (the timer's).
func (l *Log) flushLate() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.timer = nil
	if l.closed || l.err != nil || l.buf.Buffered() == 0 {
		return
	}
	l.err = l.buf.Flush()
	l.flushed = time.Now()
}

// Close closes the log and reports the first failed write.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil || l.closed {
		return nil
	}
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	l.closed = true
	if l.err == nil {
		l.err = l.buf.Flush()
	}
	err := errors.Join(l.err, l.f.Close())
	if err != nil {
		return fmt.Errorf("event log %s: %w", l.path, err)
	}
	return nil
}

// CutError keeps the head and the tail of msg, MaxErrorBytes in all (cut
// on UTF-8 boundaries), and says how much is left out and where the whole
// of it is: logPath, when not empty. The tail stays because that is where
// a command's error says why it failed ("argument list too long"). Every
// error a record keeps or the terminal shows goes through it, so that a
// huge one (an argument of 50 MB in a command that failed) costs neither
// the state file nor the terminal its size.
func CutError(msg, logPath string) string {
	if len(msg) <= MaxErrorBytes {
		return msg
	}
	head := MaxErrorBytes * 3 / 4
	for head > 0 && !utf8.RuneStart(msg[head]) {
		head--
	}
	tail := len(msg) - MaxErrorBytes/4
	for tail < len(msg) && !utf8.RuneStart(msg[tail]) {
		tail++
	}
	where := ""
	if logPath != "" {
		where = "; full error in " + logPath
	}
	return fmt.Sprintf("%s… (%d bytes cut%s) …%s", strings.ToValidUTF8(msg[:head], "\uFFFD"), tail-head, where, strings.ToValidUTF8(msg[tail:], "\uFFFD"))
}
