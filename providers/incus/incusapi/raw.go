package incusapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// raw sends a request whose successful answer is not the JSON envelope
// (a file's bytes) and returns the response, its body open, for a 2xx
// status; any other answer becomes the same errors do returns.
func (c *Client) raw(ctx context.Context, in call) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, in.method, c.target(in.path, in.query), in.raw)
	if err != nil {
		return nil, fmt.Errorf("incus: %s %s: %w", in.method, in.path, err)
	}
	if in.raw != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	for k, v := range in.headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("User-Agent", "migrate-incusapi")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.transportError(ctx, in, err)
	}
	if resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var r response
	msg := http.StatusText(resp.StatusCode)
	if json.Unmarshal(b, &r) == nil && r.Error != "" {
		msg = r.Error
	} else if t := strings.TrimSpace(string(b)); t != "" && len(t) < 200 {
		msg = t
	}
	se := &StatusError{StatusCode: resp.StatusCode, Message: msg, Method: in.method, Path: in.path}
	if resp.StatusCode == http.StatusForbidden && c.url != "" {
		return nil, &UntrustedError{URL: c.url, Fingerprint: c.certFP, Message: msg, Err: se}
	}
	return nil, se
}

// query is a url.Values of one key.
func query(k, v string) url.Values { return url.Values{k: {v}} }
