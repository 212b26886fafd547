package plugin

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"sync"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
)

// Serve runs provider p, named name, as a plugin program on the process's
// standard input and output until the input closes. It is the whole main
// of a provider program:
//
//	func main() { os.Exit(plugin.Serve("talos", talos.New())) }
func Serve(name string, p providers.Interface) int {
	// Ctrl-C is migrate's to handle: it stops steps gently (an Apply's
	// Stop, the stop line) or cancels them.
	signal.Ignore(os.Interrupt)
	nameProcess()
	out, err := protocolOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "migrate provider %s: %v\n", name, err)
		return 1
	}
	if err := serve(context.Background(), name, p, os.Stdin, out); err != nil {
		fmt.Fprintf(os.Stderr, "migrate provider %s: %v\n", name, err)
		return 1
	}
	return 0
}

// server is one provider behind a pipe.
type server struct {
	p   providers.Interface
	enc *json.Encoder
	wmu sync.Mutex // one line at a time on the output

	mu      sync.Mutex
	cancels map[uint64]context.CancelFunc
	stops   map[uint64]chan struct{} // closed by the call's stop line
	acks    map[uint64]chan string   // the answer to a call's intent line
	calls   sync.WaitGroup
	gone    chan struct{} // closed when the host's input ends
}

func serve(ctx context.Context, name string, p providers.Interface, in io.Reader, out io.Writer) error {
	s := &server{p: p, enc: json.NewEncoder(out), cancels: map[uint64]context.CancelFunc{}, stops: map[uint64]chan struct{}{}, acks: map[uint64]chan string{}, gone: make(chan struct{})}
	if err := s.send(hello{Protocol: protocolVersion, Provider: name, Schema: SchemaDigest(p.Schema())}); err != nil {
		return err
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for sc.Scan() {
		var req request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			return fmt.Errorf("a request that is not JSON: %w", err)
		}
		if req.Cancel != 0 {
			s.mu.Lock()
			if cancel := s.cancels[req.Cancel]; cancel != nil {
				cancel()
			}
			s.mu.Unlock()
			continue
		}
		if req.Stop != 0 {
			s.mu.Lock()
			if stop := s.stops[req.Stop]; stop != nil {
				close(stop)
				delete(s.stops, req.Stop)
			}
			s.mu.Unlock()
			continue
		}
		if req.Intended != 0 {
			s.mu.Lock()
			if ack := s.acks[req.Intended]; ack != nil {
				ack <- req.IntentError // buffered: one intent line at a time
			}
			s.mu.Unlock()
			continue
		}
		callCtx, cancel := context.WithCancel(ctx)
		stop := make(chan struct{})
		s.mu.Lock()
		s.cancels[req.ID] = cancel
		s.stops[req.ID] = stop
		s.mu.Unlock()
		s.calls.Add(1)
		go func() {
			defer s.calls.Done()
			result, err := s.call(callCtx, req, stop, s.intentOf(callCtx, req.ID))
			s.mu.Lock()
			delete(s.cancels, req.ID)
			delete(s.stops, req.ID)
			s.mu.Unlock()
			cancel()
			r := reply{ID: req.ID, Result: result}
			if err != nil {
				r.Error = err.Error()
			}
			_ = s.send(r)
		}()
	}
	// The host is gone or done: let running calls see it, and finish.
	close(s.gone)
	s.mu.Lock()
	for _, cancel := range s.cancels {
		cancel()
	}
	s.mu.Unlock()
	s.calls.Wait()
	if c, ok := s.p.(providers.Closer); ok {
		_ = c.Close()
	}
	if err := sc.Err(); err != nil && !errors.Is(err, os.ErrClosed) {
		return err
	}
	return nil
}

// maxLine bounds one message: a rendered machine config or chart
// manifest diff can be large, but not this large.
const maxLine = 256 << 20

func (s *server) send(v any) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.enc.Encode(v)
}

// logWriter sends a call's output to the host as it is written.
type logWriter struct {
	s  *server
	id uint64
}

func (w logWriter) Write(p []byte) (int, error) {
	if err := w.s.send(reply{Log: w.id, Data: string(p)}); err != nil {
		return 0, err
	}
	return len(p), nil
}

// call runs one request and encodes its response. An error is a
// transport problem (a request the program cannot read); what goes wrong
// in the provider is in the response's diagnostics.
func (s *server) call(ctx context.Context, req request, stop <-chan struct{}, intent intentFunc) (_ json.RawMessage, err error) {
	defer func() {
		// A provider's bug fails its call, not every call of the run.
		if r := recover(); r != nil {
			fmt.Fprintf(os.Stderr, "panic in %s: %v\n%s", req.Method, r, debug.Stack())
			err = fmt.Errorf("the provider panicked in %s (a bug; its stack is in the log above): %v", req.Method, r)
		}
	}()
	h, ok := methods[req.Method]
	if !ok {
		return nil, fmt.Errorf("unknown method %q", req.Method)
	}
	return h(ctx, s.p, req.Params, streams{log: logWriter{s, req.ID}, stop: stop, intent: intent})
}

// intentOf is call id's Intent on the program's side: it sends the revert
// data on the call's intent line and returns when the host has saved it
// in the step's record (nil) or could not (its error). The host answers
// every intent line of a call, cancelled or not, until the call's result;
// when the host is gone first, it was not saved. A call already
// cancelled announces nothing more: its Apply is to stop, not to change
// something new. A provider calls Intent from its Apply's goroutine, one
// at a time.
func (s *server) intentOf(ctx context.Context, id uint64) intentFunc {
	var one sync.Mutex
	return func(inv providers.RevertData) error {
		one.Lock()
		defer one.Unlock()
		if err := context.Cause(ctx); err != nil {
			return fmt.Errorf("the revert data was not saved: the call was interrupted (%w)", err)
		}
		b, _, err := encode(inv)
		if err != nil {
			return err
		}
		ack := make(chan string, 1)
		s.mu.Lock()
		s.acks[id] = ack
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			delete(s.acks, id)
			s.mu.Unlock()
		}()
		if err := s.send(reply{Intent: id, Revert: b}); err != nil {
			return fmt.Errorf("sending the revert data to migrate: %w", err)
		}
		select {
		case msg := <-ack:
			if msg != "" {
				return errors.New(msg)
			}
			return nil
		case <-s.gone:
			return fmt.Errorf("the revert data was not saved: migrate is gone")
		}
	}
}

// handler decodes a call's params, runs it and encodes its response.
type handler func(ctx context.Context, p providers.Interface, params json.RawMessage, st streams) (json.RawMessage, error)

// methods are the calls a program answers, one line each: the codec
// carries every field of their requests and responses.
var methods = map[string]handler{
	"configure": serveCall(providers.Interface.Configure),
	"read":      serveCall(providers.Interface.Read),
	"plan":      serveCall(providers.Interface.Plan),
	"apply":     serveCall(providers.Interface.Apply),
	"revert":    serveCall(revert),
	"digest":    serveCall(digest),
}

func serveCall[Req, Resp any](f func(providers.Interface, context.Context, Req) Resp) handler {
	return func(ctx context.Context, p providers.Interface, params json.RawMessage, st streams) (json.RawMessage, error) {
		var req Req
		if err := decodeCall(params, &req, st); err != nil {
			return nil, err
		}
		b, _, err := encode(f(p, ctx, req))
		return b, err
	}
}

func revert(p providers.Interface, ctx context.Context, req providers.RevertRequest) providers.RevertResponse {
	rv, ok := p.(providers.Reverter)
	if !ok {
		return providers.RevertResponse{Diagnostics: phases.Errorf("Cannot Revert", "The provider cannot revert %s: it has no way to undo what it does.", req.Addr)}
	}
	return rv.Revert(ctx, req)
}

func digest(p providers.Interface, ctx context.Context, req providers.DigestRequest) providers.DigestResponse {
	d, ok := p.(providers.InputDigester)
	if !ok {
		return providers.DigestResponse{} // no digest: the attributes alone decide
	}
	return d.InputDigest(ctx, req)
}
