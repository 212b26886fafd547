package plugin

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/secret"
)

// Program describes a provider that runs as a plugin program.
type Program struct {
	// Name is the provider type ("talos").
	Name string
	// Command is the program's file name ("migrate-provider-talos"),
	// looked for as Find says; a path with a slash is used as it is.
	Command string
	// Sum is the sha256 (hex) the program's file must have, recorded in
	// migrate by make build. Empty in a build without sums: then a
	// program named by its file name alone is run only from
	// $MIGRATE_PLUGIN_DIR, unverified.
	Sum string
	// Schema is the provider's schema, compiled into migrate so that
	// loading and validating a runbook starts no program.
	Schema phases.Schema
	// Env names the secret-carrying variables of migrate the program
	// reads (providers.AgeIdentityEnv); it inherits no other of them.
	Env []string
}

// Factory returns a factory of providers that run p's program, one
// process per provider, started at the first call that needs it.
func Factory(p Program) providers.Factory {
	return func() providers.Interface { return &Client{prog: p} }
}

// stderr is where the programs' standard error goes, scrubbed, each line
// after the program's name.
var stderr io.Writer = os.Stderr

// handshakeTimeout bounds how long a program may take to introduce itself
// (a cold start of a 100 MB program from a slow disk takes seconds).
var handshakeTimeout = 60 * time.Second

// Client is a provider running in a plugin program.
type Client struct {
	prog Program

	startOnce sync.Once
	startErr  error
	cmd       *exec.Cmd
	stdin     io.WriteCloser
	stderr    *tailBuffer
	errLog    *secret.Writer // the program's stderr, scrubbed, to stderr
	// scrub knows the secrets the program was given (its secret-carrying
	// variables, the sensitive values of every request) and those it
	// answered (sensitive outputs): what it writes on stderr, a panic's
	// message and its errors are scrubbed of them.
	scrub secret.Scrubber

	wmu    sync.Mutex // one line at a time to the program
	enc    *json.Encoder
	mu     sync.Mutex
	nextID uint64
	calls  map[uint64]*pending
	dead   error         // set once the program is gone
	exited chan struct{} // closed when the reader has seen the end
}

var (
	_ providers.Interface     = (*Client)(nil)
	_ providers.Reverter      = (*Client)(nil)
	_ providers.InputDigester = (*Client)(nil)
	_ providers.Closer        = (*Client)(nil)
	_ providers.ProgramRunner = (*Client)(nil)
)

type pending struct {
	log     io.Writer
	done    chan reply
	intents chan reply // the call's intent lines, answered by the call's goroutine
}

// Schema is the schema compiled into migrate; no program is started.
func (c *Client) Schema() phases.Schema { return c.prog.Schema }

// Program names the program the provider runs, located and checked
// (Check), without starting it.
func (c *Client) Program() (providers.Program, error) { return Check(c.prog) }

func (c *Client) start() error {
	c.startOnce.Do(func() { c.startErr = c.launch() })
	return c.startErr
}

func (c *Client) launch() error {
	found, err := Find(c.prog)
	if err != nil {
		return err
	}
	defer found.Close() // the child has its own descriptor
	path := found.Path
	cmd := found.command()
	// Not migrate's secrets (MIGRATE_VAR_*...), unless the program reads one.
	cmd.Env = providers.Environ(c.prog.Env...)
	cmd.SysProcAttr = procAttr()
	for _, name := range c.prog.Env {
		c.scrub.Add(os.Getenv(name))
	}
	c.stderr = &tailBuffer{w: stderr, prefix: c.prog.Command + ": "}
	c.errLog = secret.NewWriter(c.stderr, &c.scrub)
	cmd.Stderr = c.errLog
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", path, err)
	}
	c.cmd, c.stdin, c.enc = cmd, stdin, json.NewEncoder(stdin)
	c.calls = map[uint64]*pending{}
	c.exited = make(chan struct{})

	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	firstLine := func() ([]byte, bool) {
		ok := sc.Scan()
		return sc.Bytes(), ok
	}
	if err := handshake(firstLine, c.prog, path, c.stderr.tail, c.kill); err != nil {
		return err
	}
	go c.read(sc)
	return nil
}

// handshake reads the program's first line and checks that it is p's
// provider, of this protocol and of this build's schema. A program that
// says nothing within handshakeTimeout is refused; a program refused is
// killed (kill).
func handshake(line func() ([]byte, bool), p Program, path string, tail func() string, kill func()) error {
	err := readHello(line, p, path, tail, kill)
	if err != nil {
		kill()
	}
	return err
}

func readHello(line func() ([]byte, bool), p Program, path string, tail func() string, kill func()) error {
	var h hello
	said := make(chan bool, 1)
	go func() {
		b, ok := line()
		said <- ok && json.Unmarshal(b, &h) == nil
	}()
	select {
	case ok := <-said:
		if !ok {
			return fmt.Errorf("%s did not answer like a migrate provider program%s", path, tail())
		}
	case <-time.After(handshakeTimeout):
		kill()
		<-said // the scanner is ours again
		return fmt.Errorf("%s said nothing for %s: it is not a migrate provider program, or it hangs%s", path, handshakeTimeout, tail())
	}
	switch {
	case h.Protocol != protocolVersion:
		return fmt.Errorf("%s speaks plugin protocol %d, this migrate speaks %d: install the provider programs of the same migrate version", path, h.Protocol, protocolVersion)
	case h.Provider != p.Name:
		return fmt.Errorf("%s is the %q provider, not %q", path, h.Provider, p.Name)
	case h.Schema != SchemaDigest(p.Schema): // only when a program starts, not at every migrate start
		return fmt.Errorf("%s is from another build of migrate (its schema of %q differs): install the provider programs built with this migrate", path, h.Provider)
	}
	return nil
}

// read dispatches the program's lines until it closes its output.
func (c *Client) read(sc *bufio.Scanner) {
	for sc.Scan() {
		var r reply
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			continue // not ours; the program's own stderr says more
		}
		c.mu.Lock()
		if r.Intent != 0 {
			p := c.calls[r.Intent]
			c.mu.Unlock()
			if p != nil {
				p.intents <- r // the call takes it until its answer, which comes after
			}
			continue
		}
		if r.Log != 0 {
			p := c.calls[r.Log]
			c.mu.Unlock()
			if p != nil && p.log != nil {
				_, _ = io.WriteString(p.log, r.Data) // in order: this goroutine alone writes
			}
			continue
		}
		p := c.calls[r.ID]
		delete(c.calls, r.ID)
		c.mu.Unlock()
		if p != nil {
			p.done <- r
		}
	}
	if sc.Err() != nil {
		_ = c.cmd.Process.Kill() // a line too long to read: the program would block writing it
	}
	err := c.cmd.Wait()
	c.mu.Lock()
	c.dead = fmt.Errorf("the %s provider's program (%s, pid %d) exited: %v%s", c.prog.Name, c.prog.Command, c.cmd.Process.Pid, err, c.lastWords())
	if err == nil {
		c.dead = fmt.Errorf("the %s provider's program (%s) has ended", c.prog.Name, c.prog.Command)
	}
	for id, p := range c.calls {
		delete(c.calls, id)
		p.done <- reply{ID: id, Error: c.dead.Error()}
	}
	c.mu.Unlock()
	close(c.exited)
}

// call sends one request and decodes its answer into out; a cancelled
// ctx is passed on, as is the closing of the request's stop channel, and
// the answer still awaited. What the provider
// writes to the request's io.Writer (its Log) arrives there; its calls of
// the request's Intent are made here, on the caller's goroutine, and
// answered, even after a cancel (the engine then still saves them).
func (c *Client) call(ctx context.Context, method string, params any, out any) error {
	if err := c.start(); err != nil {
		return err
	}
	b, st, err := encode(params)
	if err != nil {
		return err
	}
	for _, v := range st.secrets {
		c.scrub.AddMarked(v)
	}
	p := &pending{log: st.log, done: make(chan reply, 1), intents: make(chan reply, 1)}
	c.mu.Lock()
	if c.dead != nil {
		c.mu.Unlock()
		return c.dead
	}
	c.nextID++
	id := c.nextID
	c.calls[id] = p
	c.mu.Unlock()
	if err := c.send(request{ID: id, Method: method, Params: b}); err != nil {
		c.mu.Lock()
		delete(c.calls, id)
		c.mu.Unlock()
		return fmt.Errorf("sending to the %s provider's program: %w", c.prog.Name, err)
	}
	var r reply
	stop := st.stop // nil when the call has none: never ready
	cancelled := ctx.Done()
	for answered := false; !answered; {
		select {
		case r = <-p.done:
			answered = true
		case in := <-p.intents:
			_ = c.send(request{Intended: id, IntentError: c.intend(st.intent, in.Revert)})
		case <-stop:
			stop = nil // once
			_ = c.send(request{Stop: id})
		case <-cancelled:
			cancelled = nil // once; the answer is still awaited
			_ = c.send(request{Cancel: id})
		}
	}
	if r.Error != "" {
		return errors.New(c.scrub.Text(r.Error)) // a panic's message may quote anything
	}
	learned, err := decodeSecrets(r.Result, out, nil)
	for _, v := range learned { // what it made secret, it may print later
		c.scrub.AddMarked(v)
	}
	return err
}

// intend saves the revert data of an intent line with the request's
// Intent; it returns why it could not ("" when saved).
func (c *Client) intend(intent intentFunc, data json.RawMessage) string {
	if intent == nil {
		return "migrate saves no revert data for this call" // the program was given none: a bug
	}
	var inv providers.RevertData
	if err := decode(data, &inv, nil); err != nil {
		return "the revert data did not cross: " + err.Error()
	}
	if err := intent(inv); err != nil {
		return err.Error()
	}
	return ""
}

func (c *Client) send(r request) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.enc.Encode(r)
}

func (c *Client) kill() {
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
}

// Close ends the program: its input is closed, it finishes its calls and
// exits; one that does not within 10 s is killed.
func (c *Client) Close() error {
	if c.cmd == nil || c.startErr != nil {
		return nil
	}
	c.wmu.Lock()
	_ = c.stdin.Close()
	c.wmu.Unlock()
	select {
	case <-c.exited:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
	return nil
}

// roundTrip is every method of Client: req crosses, Resp comes back;
// a transport error becomes Resp's diagnostics.
func roundTrip[Resp any](c *Client, ctx context.Context, method string, req any) Resp {
	var resp Resp
	if err := c.call(ctx, method, req, &resp); err != nil {
		resp = *new(Resp)
		d := reflect.ValueOf(&resp).Elem().FieldByName("Diagnostics") // every response has them (TestCodecCarriesEveryField)
		d.Set(reflect.ValueOf(phases.Errorf("Provider Program Failed", "The %s provider could not answer: %v.", c.prog.Name, err)))
	}
	return resp
}

func (c *Client) Configure(ctx context.Context, req providers.ConfigureRequest) providers.ConfigureResponse {
	return roundTrip[providers.ConfigureResponse](c, ctx, "configure", req)
}

func (c *Client) Read(ctx context.Context, req providers.ReadRequest) providers.ReadResponse {
	return roundTrip[providers.ReadResponse](c, ctx, "read", req)
}

func (c *Client) Plan(ctx context.Context, req providers.PlanRequest) providers.PlanResponse {
	return roundTrip[providers.PlanResponse](c, ctx, "plan", req)
}

func (c *Client) Apply(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
	return roundTrip[providers.ApplyResponse](c, ctx, "apply", req)
}

func (c *Client) Revert(ctx context.Context, req providers.RevertRequest) providers.RevertResponse {
	return roundTrip[providers.RevertResponse](c, ctx, "revert", req)
}

func (c *Client) InputDigest(ctx context.Context, req providers.DigestRequest) providers.DigestResponse {
	return roundTrip[providers.DigestResponse](c, ctx, "digest", req)
}

// tailBuffer passes the program's stderr on, line by line with a prefix,
// and keeps its last lines for the message when it dies. Its lines come
// scrubbed and bounded from the Client's errLog.
type tailBuffer struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
	line   []byte
	last   []string
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, b := range p {
		if b != '\n' {
			t.line = append(t.line, b)
			continue
		}
		l := string(t.line)
		t.line = t.line[:0]
		fmt.Fprintln(t.w, t.prefix+l)
		t.last = append(t.last, l)
		if len(t.last) > 10 {
			t.last = t.last[1:]
		}
	}
	return len(p), nil
}

// lastWords are the last lines the program wrote on stderr, for the
// message that says it ended; only once its stderr is closed.
func (c *Client) lastWords() string {
	_ = c.errLog.Flush()
	return c.stderr.tail()
}

func (t *tailBuffer) tail() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := t.last
	if len(t.line) > 0 {
		lines = append(lines[:len(lines):len(lines)], string(t.line))
	}
	if len(lines) == 0 {
		return ""
	}
	return "; its last output:\n  " + strings.Join(lines, "\n  ")
}

// procAttr: its own process group (a Ctrl-C is migrate's alone) and, on
// Linux, killed when migrate dies.
var procAttr = func() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
