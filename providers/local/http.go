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

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/sdk"
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

type httpAttrs struct {
	URL      string `cty:"url" required:"true" doc:"The http:// or https:// URL to GET."`
	Status   *int   `cty:"status" doc:"The status expected, 200 by default."`
	Timeout  string `cty:"timeout" doc:"How long to keep trying, \"60s\" by default."`
	Interval string `cty:"interval" doc:"The pause between tries, \"1s\" by default."`
	Insecure bool   `cty:"insecure" doc:"Skip TLS certificate verification."`
}

type httpOutputs struct {
	Status int `cty:"status"`
}

var httpStep = &sdk.StepType[*Provider, httpAttrs, none, none]{
	Name:        HTTPCheck,
	Description: "Waits until a URL answers an expected HTTP status. Redirects are not followed.",
	Rollback:    "Nothing to undo.",
	Outputs:     httpOutputs{},
	CanCheck:    true,
	WaitsOnly:   true,
	Unknowns:    true, // the plan shows the check as far as it is known
	Validate: func(c *call, a *httpAttrs) phases.Diagnostics {
		_, d := decodeHTTP(c, *a)
		return d
	},
	Plan:  planHTTP,
	Apply: applyHTTP,
}

// httpCheck is an http_check step with its defaults applied.
type httpCheck struct {
	url                                   string
	status                                int
	timeout, interval                     time.Duration
	statusText, timeoutText, intervalText string
	insecure                              bool
}

func decodeHTTP(c *call, a httpAttrs) (httpCheck, phases.Diagnostics) {
	h := httpCheck{url: a.URL, status: http.StatusOK, insecure: a.Insecure, timeoutText: "60s", intervalText: "1s"}
	var d phases.Diagnostics
	if !c.Unknown("url") {
		u, err := url.Parse(a.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			d = append(d, invalid("The \"url\" attribute of %s must be an http:// or https:// URL, not %q.", c.Addr, a.URL)...)
		}
	}
	h.statusText = fmt.Sprint(h.status)
	switch {
	case c.Unknown("status"):
		h.statusText = sdk.UnknownText
	case a.Status != nil:
		h.status, h.statusText = *a.Status, fmt.Sprint(*a.Status)
		if h.status < 100 || h.status > 599 {
			d = append(d, invalid("The \"status\" attribute of %s must be an HTTP status between 100 and 599, not %d.", c.Addr, h.status)...)
		}
	}
	for _, x := range []struct {
		name string
		text *string
		dur  *time.Duration
	}{{"timeout", &h.timeoutText, &h.timeout}, {"interval", &h.intervalText, &h.interval}} {
		v := a.Timeout
		if x.name == "interval" {
			v = a.Interval
		}
		switch {
		case c.Unknown(x.name):
			*x.text = sdk.UnknownText
			continue
		case !c.Null(x.name):
			*x.text = v
		}
		dur, dd := duration(c, x.name, *x.text)
		d = append(d, dd...)
		if dd == nil && dur == 0 && !d.HasErrors() {
			d = append(d, invalid("The %q attribute of %s must be longer than zero.", x.name, c.Addr)...)
		}
		*x.dur = dur
	}
	return h, d
}

func planHTTP(_ context.Context, c *call, a httpAttrs, _ *sdk.Prior[none, none]) sdk.Plan[none] {
	h, _ := decodeHTTP(c, a)
	diff := fmt.Sprintf("GET %s until it answers %s (timeout %s, every %s)", h.url, h.statusText, h.timeoutText, h.intervalText)
	if h.insecure {
		diff += "\ninsecure: TLS certificates are not verified"
	}
	return sdk.Plan[none]{Diff: diff}
}

func applyHTTP(ctx context.Context, c *call, a httpAttrs, _ none, _ *sdk.Prior[none, none]) sdk.Apply[none, none] {
	h, _ := decodeHTTP(c, a)
	fail := func(d phases.Diagnostics) sdk.Apply[none, none] { return sdk.Apply[none, none]{Diagnostics: d} }
	client := c.Settings.clients().verify
	if h.insecure {
		client = c.Settings.clients().insecure
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	var last string
	for {
		status, err := get(ctx, client, h.url, max(h.interval, 5*time.Second))
		if err == nil && status == h.status {
			return sdk.Apply[none, none]{Outputs: httpOutputs{status}, Revert: nothingToUndo()}
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
			c.Log.Printf("%s: %s answered %s; want %d", c.Addr, h.url, seen, h.status)
			last = seen
		}
		t := time.NewTimer(h.interval)
		select {
		case <-t.C:
			continue
		case <-ctx.Done():
			t.Stop()
		}
		if parent.Err() != nil {
			return fail(sdk.Interrupted(c.Addr, context.Cause(parent)))
		}
		answer := "the last answer was " + last
		if last == "" {
			answer = "no request finished in that time"
		}
		return fail(phases.Errorf("HTTP Check Failed",
			"%s: GET %s did not answer %d within %s; %s.", c.Addr, h.url, h.status, h.timeout, answer))
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
