package talos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/homelab-migrate/migrate/phases"
)

// dialTimeout bounds each single API call that has no deadline of its own.
const callTimeout = 30 * time.Second

// conn returns the shared client, making it on first use: the talosconfig
// context (as talosctl resolves it), its endpoints unless the provider
// block names others, and mutual TLS always.
func (p *Provider) conn(ctx context.Context) (*client.Client, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client != nil {
		return p.client, nil
	}
	s := p.s
	tc := s.talosconfig
	if tc == nil {
		path, err := clientconfig.GetDefaultPaths()
		if err != nil || len(path) == 0 {
			return nil, errors.New("no talosconfig: set talosconfig in the talos provider block")
		}
		var loaded *clientconfig.Config
		for _, pth := range path {
			if c, err := clientconfig.Open(pth.Path); err == nil && len(c.Contexts) > 0 {
				loaded = c
				break
			}
		}
		if loaded == nil {
			return nil, errors.New("no talosconfig found ($TALOSCONFIG, ~/.talos/config): set talosconfig in the talos provider block")
		}
		tc = loaded
	}
	name := s.contextName
	if name == "" {
		name = tc.Context
	}
	tctx, ok := tc.Contexts[name]
	if !ok {
		return nil, fmt.Errorf("the talosconfig has no context %q", name)
	}
	if tctx.CA == "" || tctx.Crt == "" || tctx.Key == "" {
		return nil, fmt.Errorf("the talosconfig context %q lacks a CA, a client certificate or its key: migrate speaks to Talos only over mutual TLS", name)
	}
	opts := []client.OptionFunc{client.WithConfig(tc), client.WithContextName(name)}
	if len(s.endpoints) > 0 {
		opts = append(opts, client.WithEndpoints(s.endpoints...))
	} else if len(tctx.Endpoints) == 0 {
		return nil, fmt.Errorf("no endpoints: the talosconfig context %q has none and the talos provider block sets none", name)
	}
	c, err := client.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("connecting to Talos: %w", err)
	}
	p.client = c
	return c, nil
}

// targets lists the nodes to act on: the provider's nodes, else the
// context's nodes, else the endpoints (as talosctl does).
func (p *Provider) targets() []string {
	s := p.s
	if len(s.nodes) > 0 {
		return s.nodes
	}
	if tc := s.talosconfig; tc != nil {
		name := s.contextName
		if name == "" {
			name = tc.Context
		}
		if c := tc.Contexts[name]; c != nil && len(c.Nodes) > 0 {
			return c.Nodes
		}
		if c := tc.Contexts[name]; c != nil && len(s.endpoints) == 0 {
			return c.Endpoints
		}
	}
	return s.endpoints
}

// node is one target: a client and a context addressed to it.
type node struct {
	name string
	c    *client.Client
}

// at returns ctx addressed to the node. When the node is an endpoint it
// is asked directly; otherwise the endpoint proxies (talosctl -n).
func (n node) at(ctx context.Context) context.Context {
	for _, e := range n.c.GetEndpoints() {
		if hostOf(e) == hostOf(n.name) {
			return ctx
		}
	}
	return client.WithNode(ctx, n.name)
}

func hostOf(s string) string {
	if u, err := url.Parse(s); err == nil && u.Host != "" {
		s = u.Host
	}
	if h, _, err := net.SplitHostPort(s); err == nil {
		return h
	}
	return s
}

// nodes connects and lists the targets.
func (p *Provider) nodes(ctx context.Context) ([]node, error) {
	c, err := p.conn(ctx)
	if err != nil {
		return nil, err
	}
	t := p.targets()
	if len(t) == 0 {
		t = c.GetEndpoints()
	}
	out := make([]node, len(t))
	for i, name := range t {
		out[i] = node{name: name, c: c}
	}
	return out, nil
}

// forNodes runs f on every node, joining errors with the node's name.
func (p *Provider) forNodes(ctx context.Context, f func(n node) error) error {
	ns, err := p.nodes(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range ns {
		if err := f(n); err != nil {
			if len(ns) > 1 {
				err = fmt.Errorf("node %s: %w", n.name, err)
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, callTimeout)
}

// version asks the node which Talos version it runs.
func (n node) version(ctx context.Context) (string, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := n.c.Version(n.at(ctx))
	if err != nil {
		return "", apiErr("Version", err)
	}
	for _, m := range resp.GetMessages() {
		if v := m.GetVersion(); v != nil && v.GetTag() != "" {
			return v.GetTag(), nil
		}
	}
	return "", errors.New("the node did not say its version")
}

// skewError is the version-skew guard's refusal.
type skewError struct {
	node, running, pinned, image string
}

func (e *skewError) Error() string {
	return fmt.Sprintf("node %s runs Talos %s but the talos provider pins version = %q", e.node, e.running, e.pinned)
}

func (e *skewError) diag() phases.Diagnostics {
	return phases.Errorf("Talos Version Skew",
		"Node %s runs Talos %s, but the talos provider block pins version = %q. A machine config rendered for %s carries the installer image %s, so the node's next install (an upgrade, a reinstall, a reset) would silently move it to Talos %s and its Kubernetes components with it — the trap of a talosctl newer than the cluster. Nothing was sent. Either pin the version the node runs (version = %q) to change its config without changing versions, or change versions on purpose with a talos_upgrade step first.",
		e.node, e.running, e.pinned, e.pinned, e.image, e.pinned, e.running)
}

// guarded connects, lists the targets and runs the skew guard on them.
func (c *call) guarded(ctx context.Context) ([]node, phases.Diagnostics) {
	ns, err := c.p.nodes(ctx)
	if err != nil {
		return nil, phases.FromError("Cannot Reach Talos", err)
	}
	return ns, c.p.guard(ctx, c, ns)
}

// guard is the version-skew guard: every node must run the pinned version.
func (p *Provider) guard(ctx context.Context, c *call, ns []node) phases.Diagnostics {
	if d := c.reachable(ctx); d.HasErrors() {
		return d
	}
	var diags phases.Diagnostics
	for _, n := range ns {
		v, err := n.version(ctx)
		if d := c.unreachable(err); d != nil {
			return d
		}
		if err != nil {
			diags = append(diags, phases.Errorf("Cannot Read Talos Version", "Node %s did not answer its version (the skew guard needs it before any change): %v.", n.name, err)...)
			continue
		}
		if !sameVersion(v, c.s.version) {
			diags = append(diags, (&skewError{node: n.name, running: v, pinned: c.s.version, image: c.s.installerImage(c.s.version)}).diag()...)
			continue
		}
		if err := checkCompatibility(c.s.k8sVersion, v); err != nil {
			diags = append(diags, phases.Errorf("Incompatible Versions", "Node %s runs Talos %s, which does not support Kubernetes %s: %v.", n.name, v, c.s.k8sVersion, err)...)
		}
	}
	return diags
}

func sameVersion(a, b string) bool {
	return strings.TrimPrefix(a, "v") == strings.TrimPrefix(b, "v")
}

// readFile reads a file through the API (talosctl read).
func (n node) readFile(ctx context.Context, path string) ([]byte, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	r, err := n.c.Read(n.at(ctx), path)
	if err != nil {
		return nil, apiErr("Read", err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, apiErr("Read", err)
	}
	return b, nil
}

// currentConfig reads the node's persisted machine config.
func (n node) currentConfig(ctx context.Context) ([]byte, error) {
	return n.readFile(ctx, "/system/state/config.yaml")
}

// apply sends a config with a mode.
func (n node) apply(ctx context.Context, data []byte, mode machineapi.ApplyConfigurationRequest_Mode, dryRun bool, try time.Duration) (*machineapi.ApplyConfiguration, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	req := &machineapi.ApplyConfigurationRequest{Data: data, Mode: mode, DryRun: dryRun}
	if try > 0 {
		req.TryModeTimeout = durationpb.New(try)
	}
	resp, err := n.c.ApplyConfiguration(n.at(ctx), req)
	if err != nil {
		return nil, apiErr("ApplyConfiguration", err)
	}
	for _, m := range resp.GetMessages() {
		return m, nil
	}
	return &machineapi.ApplyConfiguration{}, nil
}

// services lists the node's services.
func (n node) services(ctx context.Context) (map[string]*machineapi.ServiceInfo, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := n.c.ServiceList(n.at(ctx))
	if err != nil {
		return nil, apiErr("ServiceList", err)
	}
	out := map[string]*machineapi.ServiceInfo{}
	for _, m := range resp.GetMessages() {
		for _, s := range m.GetServices() {
			out[s.GetId()] = s
		}
	}
	return out, nil
}

// unhealthy says what is wrong with the wanted services, empty when all
// run healthy.
func unhealthy(have map[string]*machineapi.ServiceInfo, want []string) []string {
	var bad []string
	for _, id := range want {
		s, ok := have[id]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("%s: no such service", id))
		case s.GetState() != "Running":
			bad = append(bad, fmt.Sprintf("%s: %s", id, s.GetState()))
		case s.GetHealth() == nil || s.GetHealth().GetUnknown() || !s.GetHealth().GetHealthy():
			msg := "not healthy"
			if h := s.GetHealth(); h != nil && h.GetLastMessage() != "" {
				msg += " (" + h.GetLastMessage() + ")"
			}
			bad = append(bad, fmt.Sprintf("%s: %s", id, msg))
		}
	}
	return bad
}

// dmesgTail is how many kernel log lines a failure captures.
const dmesgTail = 20

// captureDmesg writes the tail of the node's kernel log into the step's
// log, so that a failure is explained without a shell.
func (c *call) captureDmesg(ctx context.Context, n node) {
	// The step's context may be what failed; the capture gets its own.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	stream, err := n.c.Dmesg(n.at(ctx), false, false)
	if err != nil {
		c.log.Printf("dmesg of %s: not available: %v", n.name, apiErr("Dmesg", err))
		return
	}
	var lines []string
	for {
		msg, err := stream.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) && len(lines) == 0 {
				c.log.Printf("dmesg of %s: not available: %v", n.name, apiErr("Dmesg", err))
				return
			}
			break
		}
		for _, l := range strings.Split(strings.TrimRight(string(bytes.ToValidUTF8(msg.GetBytes(), []byte("?"))), "\n"), "\n") {
			lines = append(lines, l)
			if len(lines) > 4*dmesgTail {
				lines = lines[len(lines)-dmesgTail:]
			}
		}
	}
	if len(lines) > dmesgTail {
		lines = lines[len(lines)-dmesgTail:]
	}
	c.log.Printf("dmesg of %s (last %d lines):", n.name, len(lines))
	for _, l := range lines {
		c.log.Printf("  %s", l)
	}
}

// apiErr names the call and keeps the node's own message.
func apiErr(method string, err error) error {
	if st, ok := status.FromError(err); ok {
		switch st.Code() {
		case codes.DeadlineExceeded, codes.Canceled:
			return fmt.Errorf("%s: %s (%w)", method, st.Message(), context.DeadlineExceeded)
		case codes.Unavailable:
			// Not a refused handshake (another cluster's certificate),
			// which is Unavailable too: only a failed dial.
			if strings.Contains(st.Message(), "while dialing") {
				return fmt.Errorf("%s: %w: %s", method, errUnavailable, st.Message())
			}
		}
		return fmt.Errorf("%s: %s: %s", method, st.Code(), st.Message())
	}
	return fmt.Errorf("%s: %w", method, err)
}
