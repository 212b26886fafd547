package incusapi

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
)

func instancePath(name string) string { return "/1.0/instances/" + url.PathEscape(name) }

// Server is GET /1.0. For an HTTPS client the daemon does not trust, it
// returns the (public) server information together with an *UntrustedError.
func (c *Client) Server(ctx context.Context) (*Server, error) {
	var s Server
	if _, err := c.get(ctx, "/1.0", nil, &s); err != nil {
		return nil, err
	}
	if s.Auth != "trusted" && c.url != "" {
		return &s, &UntrustedError{URL: c.url, Fingerprint: c.certFP}
	}
	return &s, nil
}

// Instance is GET /1.0/instances/{name}; it also returns the ETag to pass
// to UpdateInstance.
func (c *Client) Instance(ctx context.Context, name string) (*Instance, string, error) {
	var inst Instance
	h, err := c.get(ctx, instancePath(name), nil, &inst)
	if err != nil {
		return nil, "", err
	}
	return &inst, h.Get("ETag"), nil
}

// Instances lists the project's instances (GET /1.0/instances?recursion=1).
func (c *Client) Instances(ctx context.Context) ([]Instance, error) {
	var list []Instance
	if _, err := c.get(ctx, "/1.0/instances", url.Values{"recursion": {"1"}}, &list); err != nil {
		return nil, err
	}
	return list, nil
}

// InstanceState is GET /1.0/instances/{name}/state.
func (c *Client) InstanceState(ctx context.Context, name string) (*InstanceState, error) {
	var st InstanceState
	if _, err := c.get(ctx, instancePath(name)+"/state", nil, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// CreateInstance is POST /1.0/instances; it waits for the operation (and
// for the start, if req.Start).
func (c *Client) CreateInstance(ctx context.Context, req InstancesPost) error {
	if req.Name == "" {
		return errors.New("incus: CreateInstance: no name")
	}
	return c.mutate(ctx, call{method: http.MethodPost, path: "/1.0/instances", body: req}, "", false)
}

// UpdateInstance is PUT /1.0/instances/{name}: it replaces the writable part
// of the instance. With an etag (from Instance), a concurrent change makes
// it fail with a *StatusError 412 (errors.Is(err, ErrConflict)) instead of
// being overwritten.
func (c *Client) UpdateInstance(ctx context.Context, name string, put InstancePut, etag string) error {
	return c.mutate(ctx, call{method: http.MethodPut, path: instancePath(name), body: put, etag: etag}, "", false)
}

// DeleteInstance is DELETE /1.0/instances/{name}. The daemon refuses to
// delete a running instance: stop it first.
func (c *Client) DeleteInstance(ctx context.Context, name string) error {
	return c.mutate(ctx, call{method: http.MethodDelete, path: instancePath(name)}, "", false)
}

// SetState is PUT /1.0/instances/{name}/state and waits for the change.
// A Timeout of 0 with Force false means the daemon's default grace period
// (not the raw API's "stop now"). Errors worth telling apart:
// IsAlreadyInState, IsShutdownTimeout (the guest ignored a graceful stop).
func (c *Client) SetState(ctx context.Context, name string, put InstanceStatePut) error {
	if put.Timeout == 0 && !put.Force {
		put.Timeout = -1
	}
	return c.mutate(ctx, call{method: http.MethodPut, path: instancePath(name) + "/state", body: put}, put.Action, put.Force)
}

// Snapshots lists an instance's snapshots (names without the "instance/" prefix).
func (c *Client) Snapshots(ctx context.Context, name string) ([]Snapshot, error) {
	var list []Snapshot
	if _, err := c.get(ctx, instancePath(name)+"/snapshots", url.Values{"recursion": {"1"}}, &list); err != nil {
		return nil, err
	}
	return list, nil
}

// CreateSnapshot is POST /1.0/instances/{name}/snapshots.
func (c *Client) CreateSnapshot(ctx context.Context, name, snap string, stateful bool) error {
	return c.mutate(ctx, call{method: http.MethodPost, path: instancePath(name) + "/snapshots",
		body: snapshotsPost{Name: snap, Stateful: stateful}}, "", false)
}

// RestoreSnapshot is PUT /1.0/instances/{name} {"restore": snap}. A running
// instance is stopped, restored and started again by the daemon.
func (c *Client) RestoreSnapshot(ctx context.Context, name, snap string) error {
	return c.mutate(ctx, call{method: http.MethodPut, path: instancePath(name),
		body: instanceRestore{Restore: snap}}, "", false)
}

// DeleteSnapshot is DELETE /1.0/instances/{name}/snapshots/{snap}.
func (c *Client) DeleteSnapshot(ctx context.Context, name, snap string) error {
	return c.mutate(ctx, call{method: http.MethodDelete,
		path: instancePath(name) + "/snapshots/" + url.PathEscape(snap)}, "", false)
}

// AddCertificate trusts a client certificate (POST /1.0/certificates, type
// "client", unrestricted): what `incus config trust add-certificate` does.
func (c *Client) AddCertificate(ctx context.Context, name string, certPEM []byte) error {
	der, err := pemCertDER(certPEM, "certificate to trust")
	if err != nil {
		return err
	}
	return c.mutate(ctx, call{method: http.MethodPost, path: "/1.0/certificates",
		body: certificatesPost{Name: name, Type: "client", Certificate: base64.StdEncoding.EncodeToString(der),
			Projects: []string{}}}, "", false)
}

// DeleteCertificate removes a trusted certificate by its SHA-256 fingerprint.
func (c *Client) DeleteCertificate(ctx context.Context, fingerprintHex string) error {
	return c.mutate(ctx, call{method: http.MethodDelete, path: "/1.0/certificates/" + url.PathEscape(fingerprintHex)}, "", false)
}

// CertificateFingerprint returns the SHA-256 fingerprint (hex) of the first
// certificate in a PEM block, as Incus names certificates.
func CertificateFingerprint(certPEM []byte) (string, error) {
	der, err := pemCertDER(certPEM, "certificate")
	if err != nil {
		return "", err
	}
	return fingerprint(der), nil
}
