package local

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
)

// httpClients are shared by all http_check steps of a provider, so polls
// reuse connections.
type httpClients struct {
	verify, insecure *http.Client
}

func (p *Provider) clients() *httpClients {
	p.httpOnce.Do(func() {
		mk := func(insecure bool) *http.Client {
			t := http.DefaultTransport.(*http.Transport).Clone()
			if insecure {
				t.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // asked for by insecure = true
			}
			return &http.Client{
				Transport: t,
				// The check is about what the URL itself answers.
				CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
			}
		}
		p.http.Store(&httpClients{verify: mk(false), insecure: mk(true)})
	})
	return p.http.Load()
}

func (c *httpClients) close() {
	c.verify.CloseIdleConnections()
	c.insecure.CloseIdleConnections()
}

type httpConfig struct {
	url               val
	status            int
	statusV           val
	timeout, interval time.Duration
	timeoutV          val
	intervalV         val
	insecure          bool
	insecureV         val
}

func decodeHTTP(addr phases.Address, cfg cty.Value) (httpConfig, *decoder) {
	d := newDecoder(addr, cfg)
	var c httpConfig
	c.url = d.str("url")
	c.status, c.statusV = d.integer("status", http.StatusOK)
	c.timeout, c.timeoutV = d.duration("timeout", "60s", false)
	c.interval, c.intervalV = d.duration("interval", "1s", false)
	c.insecure, c.insecureV = d.boolean("insecure")
	switch {
	case c.url.null:
		d.missing("url")
	case c.url.known():
		u, err := url.Parse(c.url.s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			d.errorf("Invalid Attribute Value", "The \"url\" attribute of %s must be an http:// or https:// URL, not %q.", addr, c.url.show())
		}
	}
	if c.statusV.known() && (c.status < 100 || c.status > 599) {
		d.errorf("Invalid Attribute Value", "The \"status\" attribute of %s must be an HTTP status between 100 and 599, not %s.", addr, c.statusV.show())
	}
	if c.timeoutV.known() && c.timeout == 0 && !d.diags.HasErrors() {
		d.errorf("Invalid Attribute Value", "The \"timeout\" attribute of %s must be longer than zero.", addr)
	}
	if c.intervalV.known() && c.interval == 0 && !d.diags.HasErrors() {
		d.errorf("Invalid Attribute Value", "The \"interval\" attribute of %s must be longer than zero.", addr)
	}
	return c, d
}

func planHTTP(req providers.PlanRequest) providers.PlanResponse {
	c, d := decodeHTTP(req.Addr, req.Config)
	if d.diags.HasErrors() {
		return providers.PlanResponse{Diagnostics: d.diags}
	}
	diff := fmt.Sprintf("GET %s until it answers %s (timeout %s, every %s)", c.url.show(), c.statusV.show(), c.timeoutV.show(), c.intervalV.show())
	if c.insecure {
		diff += "\ninsecure: TLS certificates are not verified"
	}
	return providers.PlanResponse{Diff: diff}
}

func (p *Provider) applyHTTP(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
	c, d := decodeHTTP(req.Addr, req.Config)
	for _, a := range []struct {
		name string
		v    val
	}{{"url", c.url}, {"status", c.statusV}, {"timeout", c.timeoutV}, {"interval", c.intervalV}, {"insecure", c.insecureV}} {
		if a.v.unknown {
			d.errorf("Unknown Attribute Value", "The %q attribute of %s is not known; it depends on a step that has not run.", a.name, req.Addr)
		}
	}
	if d.diags.HasErrors() {
		return providers.ApplyResponse{Diagnostics: d.diags}
	}
	var sec secrets
	sec.add(c.url)
	client := p.clients().verify
	if c.insecure {
		client = p.clients().insecure
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var last string
	for {
		status, err := get(ctx, client, c.url.s, max(c.interval, 5*time.Second))
		if err == nil && status == c.status {
			return providers.ApplyResponse{
				Outputs: cty.ObjectVal(map[string]cty.Value{"status": cty.NumberIntVal(int64(status))}),
				Inverse: nothingToUndo(),
			}
		}
		seen := fmt.Sprintf("status %d", status)
		if err != nil {
			seen = "error: " + err.Error()
		}
		if err != nil && ctx.Err() != nil {
			// Cut by our own deadline or a cancel: not an answer of the
			// URL, whose last real one the error must name.
			seen = last
		}
		if seen != last {
			logf(req.Log, "%s: %s answered %s; want %d\n", req.Addr, sec.redact(c.url.show()), sec.redact(seen), c.status)
			last = seen
		}
		t := time.NewTimer(c.interval)
		select {
		case <-t.C:
			continue
		case <-ctx.Done():
			t.Stop()
		}
		if parent.Err() != nil {
			return providers.ApplyResponse{Diagnostics: interrupted(req.Addr, context.Cause(parent))}
		}
		answer := "the last answer was " + sec.redact(last)
		if last == "" {
			answer = "no request finished in that time"
		}
		return providers.ApplyResponse{Diagnostics: phases.Errorf("HTTP Check Failed",
			"%s: GET %s did not answer %d within %s; %s.", req.Addr, c.url.show(), c.status, c.timeout, answer)}
	}
}

// get makes one request and returns the status, reading and closing the
// body so the connection can be reused.
func get(ctx context.Context, client *http.Client, u string, limit time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, which may be sensitive
		}
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.StatusCode, nil
}
