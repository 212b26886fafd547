package local

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
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
	CA       string `cty:"ca" doc:"A PEM file of the CA certificates (relative to the runbook) that the https:// URL's certificate must chain to, instead of the system's: a server with a certificate of its own CA. Not with insecure."`
	Contains string `cty:"contains" doc:"Text the answer's body must contain, besides the status (such as a .well-known document's delegation); the body is read up to 64 KiB and never shown."`
}

type httpOutputs struct {
	Status int `cty:"status"`
}

var httpStep = &sdk.StepType[*Provider, httpAttrs, none, none]{
	Name:        HTTPCheck,
	Description: "Waits until a URL answers an expected HTTP status (and, with contains, a body holding some text). An https:// URL's certificate is verified against the system's CAs, or those of ca. Redirects are not followed.",
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
	shownURL, shownContains               string // as they may be shown: redacted when sensitive
	status                                int
	timeout, interval                     time.Duration
	statusText, timeoutText, intervalText string
	insecure                              bool
	ca                                    string // the CA file as written
	contains                              string
}

func decodeHTTP(c *call, a httpAttrs) (httpCheck, phases.Diagnostics) {
	h := httpCheck{url: a.URL, status: http.StatusOK, insecure: a.Insecure, ca: a.CA, contains: a.Contains, timeoutText: "60s", intervalText: "1s",
		shownURL: c.Shown(a.URL, "url"), shownContains: c.Shown(strconv.Quote(a.Contains), "contains")}
	var d phases.Diagnostics
	if !c.Unknown("url") {
		u, err := url.Parse(a.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			d = append(d, invalid("The \"url\" attribute of %s must be an http:// or https:// URL, not %s.", c.Addr, c.Shown(strconv.Quote(a.URL), "url"))...)
		} else if a.CA != "" && !c.Unknown("ca") && u.Scheme != "https" {
			d = append(d, invalid("The \"ca\" attribute of %s verifies an https:// URL's certificate, and %s is not one: make the URL https://, or remove ca.", c.Addr, c.Shown(strconv.Quote(a.URL), "url"))...)
		}
	}
	if a.CA != "" && a.Insecure && !c.Unknown("ca") && !c.Unknown("insecure") {
		d = append(d, invalid("%s sets both \"ca\" and \"insecure\": verifying against a CA and not verifying at all exclude each other; remove one.", c.Addr)...)
	}
	if !c.Null("contains") && !c.Unknown("contains") && a.Contains == "" {
		d = append(d, invalid("The \"contains\" attribute of %s is empty: every body contains it; give the text to look for, or remove it.", c.Addr)...)
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
	diff := fmt.Sprintf("GET %s until it answers %s (timeout %s, every %s)", h.shownURL, h.statusText, h.timeoutText, h.intervalText)
	if h.contains != "" || c.Unknown("contains") {
		diff += " with a body containing " + h.shownContains
	}
	if h.insecure {
		diff += "\ninsecure: TLS certificates are not verified"
	}
	if c.Unknown("ca") {
		diff += "\nca: " + sdk.UnknownText
	} else if h.ca != "" {
		diff += "\nca: the certificate must chain to " + h.ca
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
	if h.ca != "" {
		var d phases.Diagnostics
		if client, d = c.Settings.caClient(c, h.ca); d != nil {
			return fail(d)
		}
		defer client.CloseIdleConnections()
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	var last string
	for {
		status, body, err := get(ctx, client, h.url, max(h.interval, 5*time.Second))
		found := h.contains == "" || bytes.Contains(body, []byte(h.contains))
		if err == nil && status == h.status && found {
			c.Log.Printf("GET %s answered %d%s", h.shownURL, status, h.containing())
			return sdk.Apply[none, none]{Outputs: httpOutputs{status}, Revert: nothingToUndo()}
		}
		seen := fmt.Sprintf("status %d", status)
		if err == nil && status == h.status {
			seen = fmt.Sprintf("status %d with a body (%d bytes) that does not contain %s", status, len(body), h.shownContains)
		}
		if err != nil {
			seen = "error: " + explainTLS(err, h.ca)
		}
		if err != nil && ctx.Err() != nil {
			// Cut by our own deadline or a cancel: not an answer of the
			// URL, whose last real one the error must name.
			seen = last
		}
		if seen != last {
			c.Log.Printf("%s: %s answered %s; want %d", c.Addr, h.shownURL, seen, h.status)
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
			"%s: GET %s did not answer %d within %s; %s.", c.Addr, h.shownURL, h.status, h.timeout, answer))
	}
}

// containing says what the body held, as it may be shown.
func (h httpCheck) containing() string {
	if h.contains == "" {
		return ""
	}
	return ", its body containing " + h.shownContains
}

// get makes one request and returns the status and the body's first 64
// KiB, reading and closing the body so the connection can be reused.
func get(ctx context.Context, client *http.Client, u string, limit time.Duration) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, which may be sensitive
		}
		return 0, nil, err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.StatusCode, body, nil
}

// caClient is a client that trusts only the CA certificates of the PEM
// file path (relative to the runbook), made for one check: the file is
// read when the check runs, so a CA written by an earlier step counts.
func (p *Provider) caClient(c *call, path string) (*http.Client, phases.Diagnostics) {
	file := under(p.dir, path)
	pemBytes, err := os.ReadFile(file)
	if err != nil {
		return nil, invalid("The \"ca\" attribute of %s names %s, which cannot be read: %v. Name a PEM file of the server's CA certificate.", c.Addr, path, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		kind := "no PEM block"
		if b, _ := pem.Decode(pemBytes); b != nil {
			kind = "a PEM block of type " + b.Type + " and no usable CERTIFICATE"
		}
		return nil, invalid("The \"ca\" attribute of %s names %s, which holds %s: name a PEM file of the server's CA certificate (-----BEGIN CERTIFICATE-----).", c.Addr, path, kind)
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return &http.Client{Transport: t, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}, nil
}

// explainTLS is a request's error, said so a person knows what to change
// when it is the server's certificate that is not trusted.
func explainTLS(err error, ca string) string {
	var unknown x509.UnknownAuthorityError
	var invalidCert x509.CertificateInvalidError
	var host x509.HostnameError
	trust := "a CA the system trusts: if the server has a certificate of its own CA, name that CA's certificate with ca = \"FILE.pem\""
	if ca != "" {
		trust = "the CA of ca = " + ca + ": is it the CA that issued the server's certificate?"
	}
	switch {
	case errors.As(err, &unknown):
		issuer := "an unknown issuer"
		if unknown.Cert != nil {
			issuer = fmt.Sprintf("%q", unknown.Cert.Issuer.String())
		}
		return fmt.Sprintf("the server's certificate is not trusted: it is issued by %s, not by %s (%v)", issuer, trust, err)
	case errors.As(err, &host):
		return fmt.Sprintf("the server's certificate is not for this host: %v", err)
	case errors.As(err, &invalidCert):
		return fmt.Sprintf("the server's certificate is not valid: %v", err)
	}
	return strings.TrimSpace(err.Error())
}
