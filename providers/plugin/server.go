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

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
)

// Serve runs provider p, named name, as a plugin program on the process's
// standard input and output until the input closes. It is the whole main
// of a provider program:
//
//	func main() { os.Exit(plugin.Serve("talos", talos.New())) }
func Serve(name string, p providers.Interface) int {
	// Ctrl-C is migrate's to handle: it lets running steps finish.
	signal.Ignore(os.Interrupt)
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
	calls   sync.WaitGroup
}

func serve(ctx context.Context, name string, p providers.Interface, in io.Reader, out io.Writer) error {
	s := &server{p: p, enc: json.NewEncoder(out), cancels: map[uint64]context.CancelFunc{}}
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
		callCtx, cancel := context.WithCancel(ctx)
		s.mu.Lock()
		s.cancels[req.ID] = cancel
		s.mu.Unlock()
		s.calls.Add(1)
		go func() {
			defer s.calls.Done()
			result, err := s.call(callCtx, req)
			s.mu.Lock()
			delete(s.cancels, req.ID)
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
func (s *server) call(ctx context.Context, req request) (_ json.RawMessage, err error) {
	defer func() {
		// A provider's bug fails its call, not every call of the run.
		if r := recover(); r != nil {
			fmt.Fprintf(os.Stderr, "panic in %s: %v\n%s", req.Method, r, debug.Stack())
			err = fmt.Errorf("the provider panicked in %s (a bug; its stack is in the log above): %v", req.Method, r)
		}
	}()
	var resp any
	switch req.Method {
	case "configure":
		resp, err = s.configure(ctx, req)
	case "read":
		resp, err = s.read(ctx, req)
	case "plan":
		resp, err = s.plan(ctx, req)
	case "apply":
		resp, err = s.apply(ctx, req)
	case "revert":
		resp, err = s.revert(ctx, req)
	case "digest":
		resp, err = s.digest(ctx, req)
	default:
		err = fmt.Errorf("unknown method %q", req.Method)
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(resp)
}

func (s *server) configure(ctx context.Context, req request) (any, error) {
	var w wConfigure
	if err := json.Unmarshal(req.Params, &w); err != nil {
		return nil, err
	}
	cfg, err := decodeValue(w.Config)
	if err != nil {
		return nil, err
	}
	r := s.p.Configure(ctx, providers.ConfigureRequest{Name: w.Name, Config: cfg, Dir: w.Dir})
	return wDiags{Diagnostics: r.Diagnostics}, nil
}

func (s *server) read(ctx context.Context, req request) (any, error) {
	var w wRead
	if err := json.Unmarshal(req.Params, &w); err != nil {
		return nil, err
	}
	cfg, prior, err := decodeConfigPrior(w.Config, w.Prior)
	if err != nil {
		return nil, err
	}
	out := s.p.Read(ctx, providers.ReadRequest{Type: w.Type, Addr: w.Addr, Config: cfg, Prior: prior})
	o, err := encodeValue(out.Outputs)
	if err != nil {
		return nil, err
	}
	return wReadResponse{Observation: out.Observation, Detail: out.Detail, Outputs: o, Inverse: out.Inverse, Diagnostics: out.Diagnostics}, nil
}

func (s *server) plan(ctx context.Context, req request) (any, error) {
	var w wPlan
	if err := json.Unmarshal(req.Params, &w); err != nil {
		return nil, err
	}
	cfg, prior, err := decodeConfigPrior(w.Config, w.Prior)
	if err != nil {
		return nil, err
	}
	out := s.p.Plan(ctx, providers.PlanRequest{Type: w.Type, Addr: w.Addr, Config: cfg, Prior: prior, Action: w.Action})
	return wPlanResponse{Diff: out.Diff, Irreversible: out.Irreversible, Private: out.Private, Diagnostics: out.Diagnostics}, nil
}

func (s *server) apply(ctx context.Context, req request) (any, error) {
	var w wApply
	if err := json.Unmarshal(req.Params, &w); err != nil {
		return nil, err
	}
	cfg, prior, err := decodeConfigPrior(w.Config, w.Prior)
	if err != nil {
		return nil, err
	}
	out := s.p.Apply(ctx, providers.ApplyRequest{Type: w.Type, Addr: w.Addr, Config: cfg, Prior: prior, Planned: w.Planned,
		Approval: providers.Approval{By: w.ApprovedBy}, Log: logWriter{s, req.ID}})
	o, err := encodeValue(out.Outputs)
	if err != nil {
		return nil, err
	}
	return wApplyResponse{Outputs: o, Private: out.Private, Inverse: out.Inverse, Record: out.Record, Diagnostics: out.Diagnostics}, nil
}

func (s *server) revert(ctx context.Context, req request) (any, error) {
	var w wRevert
	if err := json.Unmarshal(req.Params, &w); err != nil {
		return nil, err
	}
	rv, ok := s.p.(providers.Reverter)
	if !ok {
		return wDiags{Diagnostics: phases.Errorf("Cannot Revert", "The provider cannot revert %s: it has no way to undo what it does.", w.Addr)}, nil
	}
	cfg, err := decodeValue(w.Config)
	if err != nil {
		return nil, err
	}
	outputs, err := decodeValue(w.Outputs)
	if err != nil {
		return nil, err
	}
	r := rv.Revert(ctx, providers.RevertRequest{Type: w.Type, Addr: w.Addr, Config: cfg, Inverse: w.Inverse, Outputs: outputs, Resumed: w.Resumed, Log: logWriter{s, req.ID}})
	return wDiags{Diagnostics: r.Diagnostics}, nil
}

func (s *server) digest(ctx context.Context, req request) (any, error) {
	var w wDigest
	if err := json.Unmarshal(req.Params, &w); err != nil {
		return nil, err
	}
	d, ok := s.p.(providers.InputDigester)
	if !ok {
		return wDigestResponse{}, nil // no digest: the attributes alone decide
	}
	cfg, err := decodeValue(w.Config)
	if err != nil {
		return nil, err
	}
	out := d.InputDigest(ctx, providers.DigestRequest{Type: w.Type, Addr: w.Addr, Config: cfg})
	return wDigestResponse{Digest: out.Digest, Unknown: out.Unknown, Diagnostics: out.Diagnostics}, nil
}

// decodeConfigPrior decodes the two values most requests carry.
func decodeConfigPrior(config value, prior *wPrior) (cty.Value, *providers.Prior, error) {
	cfg, err := decodeValue(config)
	if err != nil {
		return cty.NilVal, nil, err
	}
	p, err := decodePrior(prior)
	return cfg, p, err
}
