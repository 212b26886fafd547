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
		var w wConfigure
		if err = json.Unmarshal(req.Params, &w); err == nil {
			var cfg = w.Config
			var r providers.ConfigureRequest
			r.Name, r.Dir = w.Name, w.Dir
			if r.Config, err = decodeValue(cfg); err == nil {
				resp = wDiags{Diagnostics: s.p.Configure(ctx, r).Diagnostics}
			}
		}
	case "read":
		var w wRead
		if err = json.Unmarshal(req.Params, &w); err == nil {
			r := providers.ReadRequest{Type: w.Type, Addr: w.Addr}
			if r.Config, err = decodeValue(w.Config); err == nil {
				if r.Prior, err = decodePrior(w.Prior); err == nil {
					out := s.p.Read(ctx, r)
					var o value
					if o, err = encodeValue(out.Outputs); err == nil {
						resp = wReadResponse{Observation: out.Observation, Detail: out.Detail, Outputs: o, Inverse: out.Inverse, Diagnostics: out.Diagnostics}
					}
				}
			}
		}
	case "plan":
		var w wPlan
		if err = json.Unmarshal(req.Params, &w); err == nil {
			r := providers.PlanRequest{Type: w.Type, Addr: w.Addr, Action: w.Action}
			if r.Config, err = decodeValue(w.Config); err == nil {
				if r.Prior, err = decodePrior(w.Prior); err == nil {
					out := s.p.Plan(ctx, r)
					resp = wPlanResponse{Diff: out.Diff, Private: out.Private, Diagnostics: out.Diagnostics}
				}
			}
		}
	case "apply":
		var w wApply
		if err = json.Unmarshal(req.Params, &w); err == nil {
			r := providers.ApplyRequest{Type: w.Type, Addr: w.Addr, Planned: w.Planned,
				Approval: providers.Approval{By: w.ApprovedBy}, Log: logWriter{s, req.ID}}
			if r.Config, err = decodeValue(w.Config); err == nil {
				if r.Prior, err = decodePrior(w.Prior); err == nil {
					out := s.p.Apply(ctx, r)
					var o value
					if o, err = encodeValue(out.Outputs); err == nil {
						resp = wApplyResponse{Outputs: o, Private: out.Private, Inverse: out.Inverse, Record: out.Record, Diagnostics: out.Diagnostics}
					}
				}
			}
		}
	case "revert":
		var w wRevert
		if err = json.Unmarshal(req.Params, &w); err == nil {
			rv, ok := s.p.(providers.Reverter)
			if !ok {
				resp = wDiags{Diagnostics: phases.Errorf("Cannot Revert", "The provider cannot revert %s: it has no way to undo what it does.", w.Addr)}
				break
			}
			r := providers.RevertRequest{Type: w.Type, Addr: w.Addr, Inverse: w.Inverse, Log: logWriter{s, req.ID}}
			if r.Config, err = decodeValue(w.Config); err == nil {
				if r.Outputs, err = decodeValue(w.Outputs); err == nil {
					resp = wDiags{Diagnostics: rv.Revert(ctx, r).Diagnostics}
				}
			}
		}
	case "digest":
		var w wDigest
		if err = json.Unmarshal(req.Params, &w); err == nil {
			d, ok := s.p.(providers.InputDigester)
			if !ok {
				resp = wDigestResponse{} // no digest: the attributes alone decide
				break
			}
			r := providers.DigestRequest{Type: w.Type, Addr: w.Addr}
			if r.Config, err = decodeValue(w.Config); err == nil {
				out := d.InputDigest(ctx, r)
				resp = wDigestResponse{Digest: out.Digest, Unknown: out.Unknown, Diagnostics: out.Diagnostics}
			}
		}
	default:
		err = fmt.Errorf("unknown method %q", req.Method)
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(resp)
}
