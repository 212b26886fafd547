package incushost

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/gorilla/websocket"
	"golang.org/x/sys/unix"
)

// An exec with wait-for-websocket, as `incus exec` asks: the operation's
// metadata names a secret for each stream ("0", "1", "2"; interactive:
// "0" alone, a terminal) and for "control"; the client connects a
// websocket to /1.0/operations/ID/websocket?secret=S for each, and the
// command starts once they are all there. Interactive commands get a
// terminal (a pty, their controlling one) whose size follows the
// control channel's window-resize messages; signals sent there are not
// forwarded (the lab does not know the command's host PID).

type execSockets struct {
	mu      sync.Mutex
	secrets map[string]string // secret -> fd name
	conns   map[string]*websocket.Conn
	all     chan struct{} // closed when every fd has its websocket
}

func newSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// attach takes a websocket for secret; false when it names no stream.
func (e *execSockets) attach(secret string, c *websocket.Conn) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	fd, ok := e.secrets[secret]
	if !ok || e.conns[fd] != nil {
		return false
	}
	e.conns[fd] = c
	if len(e.conns) == len(e.secrets) {
		close(e.all)
	}
	return true
}

type execWSPost struct {
	execPost
	WaitForWS   bool `json:"wait-for-websocket"`
	Interactive bool `json:"interactive"`
	Width       int  `json:"width"`
	Height      int  `json:"height"`
}

// execWebsocket starts an exec whose streams are websockets.
func (s *Server) execWebsocket(w http.ResponseWriter, in *instance, init *initProc, req execWSPost) {
	names := []string{"0", "1", "2", "control"}
	if req.Interactive {
		names = []string{"0", "control"}
	}
	socks := &execSockets{secrets: map[string]string{}, conns: map[string]*websocket.Conn{}, all: make(chan struct{})}
	fds := map[string]string{}
	for _, n := range names {
		sec := newSecret()
		socks.secrets[sec], fds[n] = n, sec
	}
	id := newID()
	s.mu.Lock()
	if s.execSocks == nil {
		s.execSocks = map[string]*execSockets{}
	}
	s.execSocks[id] = socks
	s.mu.Unlock()
	op := s.ops.startID(id, "websocket", "Executing command", map[string][]string{"instances": {"/1.0/instances/" + in.Name}},
		map[string]any{"fds": fds}, func(*operation) (map[string]any, error) {
			defer func() {
				s.mu.Lock()
				delete(s.execSocks, id)
				s.mu.Unlock()
			}()
			select {
			case <-socks.all:
			case <-time.After(30 * time.Second):
				return nil, errf(http.StatusBadRequest, "Timed out waiting for websockets")
			}
			code, err := s.runOverWebsockets(in, init, req, socks)
			if err != nil {
				return nil, err
			}
			return map[string]any{"return": code}, nil
		})
	s.ops.async(w, op)
}

// runOverWebsockets runs the command with its streams relayed to the
// websockets, and returns its exit code.
func (s *Server) runOverWebsockets(in *instance, init *initProc, req execWSPost, socks *execSockets) (int, error) {
	spec := execSpec{Command: req.Command, Env: execEnv(req.execPost), Cwd: req.Cwd, UID: req.User, GID: req.Group, Tty: req.Interactive}
	defer func() {
		for _, c := range socks.conns {
			_ = c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
			c.Close()
		}
	}()
	var relays sync.WaitGroup
	var proc *running
	var err error
	if req.Interactive {
		master, slave, perr := openPTY()
		if perr != nil {
			return -1, perr
		}
		defer master.Close()
		setWinsize(master, req.Width, req.Height)
		proc, err = init.execWith(spec, slave, slave, slave)
		slave.Close()
		if err != nil {
			return -1, err
		}
		go copyToFile(socks.conns["0"], master)
		relays.Add(1)
		go func() { defer relays.Done(); copyToSocket(master, socks.conns["0"]) }()
		go controlLoop(socks.conns["control"], master)
	} else {
		inR, inW, e1 := os.Pipe()
		outR, outW, e2 := os.Pipe()
		errR, errW, e3 := os.Pipe()
		if e1 != nil || e2 != nil || e3 != nil {
			return -1, errf(http.StatusInternalServerError, "pipes: %v %v %v", e1, e2, e3)
		}
		proc, err = init.execWith(spec, inR, outW, errW)
		inR.Close()
		outW.Close()
		errW.Close()
		if err != nil {
			inW.Close()
			outR.Close()
			errR.Close()
			return -1, err
		}
		go func() { copyToFile(socks.conns["0"], inW); inW.Close() }()
		relays.Add(2)
		go func() { defer relays.Done(); copyToSocket(outR, socks.conns["1"]); outR.Close() }()
		go func() { defer relays.Done(); copyToSocket(errR, socks.conns["2"]); errR.Close() }()
		go controlLoop(socks.conns["control"], nil)
	}
	if s.opts.OnExec != nil {
		s.opts.OnExec(in.Name, req.Command)
	}
	code := proc.wait()
	done := make(chan struct{})
	go func() { relays.Wait(); close(done) }()
	select { // the output the command wrote before it ended
	case <-done:
	case <-time.After(5 * time.Second): // a child holding the pty or pipe open
	}
	return code, nil
}

// copyToFile writes what the client sends to f, until it closes or sends
// an empty message (its end of input).
func copyToFile(c *websocket.Conn, f *os.File) {
	for {
		_, b, err := c.ReadMessage()
		if err != nil || len(b) == 0 {
			return
		}
		if _, err := f.Write(b); err != nil {
			return
		}
	}
}

// copyToSocket sends what r yields as binary messages, until EOF.
func copyToSocket(r io.Reader, c *websocket.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if werr := c.WriteMessage(websocket.BinaryMessage, buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// controlLoop reads the control channel: window-resize messages resize
// the terminal; the rest is read and dropped.
func controlLoop(c *websocket.Conn, tty *os.File) {
	for {
		_, b, err := c.ReadMessage()
		if err != nil {
			return
		}
		var msg struct {
			Command string            `json:"command"`
			Args    map[string]string `json:"args"`
		}
		if json.Unmarshal(b, &msg) == nil && msg.Command == "window-resize" && tty != nil {
			var w, h int
			_, _ = fmtSscan(msg.Args["width"], &w)
			_, _ = fmtSscan(msg.Args["height"], &h)
			setWinsize(tty, w, h)
		}
	}
}

// openPTY opens a pseudo-terminal pair.
func openPTY() (master, slave *os.File, err error) {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		return nil, nil, err
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		m.Close()
		return nil, nil, err
	}
	sl, err := os.OpenFile("/dev/pts/"+itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		return nil, nil, err
	}
	return m, sl, nil
}

func setWinsize(f *os.File, w, h int) {
	if w <= 0 || h <= 0 {
		return
	}
	ws := unix.Winsize{Row: uint16(h), Col: uint16(w)}
	_, _, _ = unix.Syscall(unix.SYS_IOCTL, f.Fd(), uintptr(unix.TIOCSWINSZ), uintptr(unsafe.Pointer(&ws)))
}

// opWebsocket is GET /1.0/operations/{id}/websocket?secret=S.
func (s *Server) opWebsocket(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	socks := s.execSocks[r.PathValue("id")]
	s.mu.Unlock()
	if socks == nil {
		fail(w, http.StatusNotFound, "Operation not found")
		return
	}
	secret := r.URL.Query().Get("secret")
	socks.mu.Lock()
	_, known := socks.secrets[secret]
	socks.mu.Unlock()
	if !known {
		fail(w, http.StatusForbidden, "Invalid websocket secret")
		return
	}
	c, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	if !socks.attach(secret, c) {
		c.Close()
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func fmtSscan(s string, v *int) (int, error) {
	n, err := strconv.Atoi(s)
	*v = n
	return 1, err
}
