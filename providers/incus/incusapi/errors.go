package incusapi

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Sentinels matched with errors.Is against a *StatusError.
var (
	// ErrConflict: the instance changed since its ETag was read (HTTP 412).
	ErrConflict = errors.New("the object changed since it was read (ETag mismatch, HTTP 412): read it again and re-apply the change")
	// ErrNotFound: the object does not exist (HTTP 404).
	ErrNotFound = errors.New("not found")
	// ErrAlreadyInState: start of a running instance, stop of a stopped one,
	// and the like. Not an error for an idempotent step.
	ErrAlreadyInState = errors.New("the instance is already in the requested state")
	// ErrShutdownTimeout: a graceful stop timed out; the guest ignored the
	// shutdown signal and the instance is still running. A forced stop is
	// the caller's decision.
	ErrShutdownTimeout = errors.New("graceful shutdown timed out: the instance is still running (stop with force to kill it)")
)

// StatusError is an error answered by the daemon, either directly (a real
// HTTP status code) or by a failed operation (then Operation is set and
// StatusCode is the operation's error_code, or 500 when it gave none).
type StatusError struct {
	StatusCode int
	Message    string
	Method     string
	Path       string
	Operation  string // operation ID, when the failure came from an operation
	Action     string // for state changes: start, stop, ...
	Force      bool   // for state changes
}

func (e *StatusError) Error() string {
	var b strings.Builder
	b.WriteString("incus: ")
	b.WriteString(e.Method)
	b.WriteByte(' ')
	b.WriteString(e.Path)
	if e.Action != "" {
		fmt.Fprintf(&b, " (%s", e.Action)
		if e.Force {
			b.WriteString(", force")
		}
		b.WriteByte(')')
	}
	if e.Operation != "" {
		fmt.Fprintf(&b, ": operation %s failed", e.Operation)
	}
	fmt.Fprintf(&b, ": %d %s: %s", e.StatusCode, http.StatusText(e.StatusCode), e.Message)
	switch {
	case e.isShutdownTimeout():
		b.WriteString(" (the guest did not shut down in time and is still running; stop it with force to kill it)")
	case e.StatusCode == http.StatusPreconditionFailed:
		b.WriteString(" (the object changed since it was read: read it again and re-apply the change)")
	}
	return b.String()
}

func (e *StatusError) isShutdownTimeout() bool {
	return e.Action == "stop" && !e.Force && e.Operation != "" &&
		strings.Contains(e.Message, "deadline exceeded")
}

// Is matches ErrConflict, ErrNotFound, ErrAlreadyInState, ErrShutdownTimeout.
func (e *StatusError) Is(target error) bool {
	switch target {
	case ErrConflict:
		return e.StatusCode == http.StatusPreconditionFailed
	case ErrNotFound:
		return e.StatusCode == http.StatusNotFound
	case ErrAlreadyInState:
		m := strings.ToLower(e.Message)
		return strings.Contains(m, "is already running") || strings.Contains(m, "is already stopped") ||
			strings.Contains(m, "is already frozen") || strings.Contains(m, "is not frozen")
	case ErrShutdownTimeout:
		return e.isShutdownTimeout()
	}
	return false
}

// IsNotFound reports whether err says the object does not exist (404).
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsAlreadyInState reports whether err says the instance already is in the
// requested state ("The instance is already stopped", ...).
func IsAlreadyInState(err error) bool { return errors.Is(err, ErrAlreadyInState) }

// IsShutdownTimeout reports whether a graceful stop timed out.
func IsShutdownTimeout(err error) bool { return errors.Is(err, ErrShutdownTimeout) }

// UntrustedError: the HTTPS connection works (the server certificate is the
// pinned one) but the daemon does not trust the client certificate.
type UntrustedError struct {
	URL         string
	Fingerprint string // SHA-256 of the client certificate; empty if none was configured
	Message     string // what the server said, if anything
	Err         error  // the underlying *StatusError, if any
}

func (e *UntrustedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "incus: the server at %s does not trust this client", e.URL)
	if e.Fingerprint == "" {
		b.WriteString(" (no client certificate configured: set client_cert/client_key, or use a remote from the incus CLI's config)")
		return b.String()
	}
	fmt.Fprintf(&b, " certificate (SHA-256 %s)", e.Fingerprint)
	if e.Message != "" {
		fmt.Fprintf(&b, ": %s", e.Message)
	}
	b.WriteString("; to trust it, run on the server: incus config trust add-certificate CERT --name NAME" +
		" (CERT: a file with this client certificate in PEM; NAME: any label)")
	return b.String()
}

func (e *UntrustedError) Unwrap() error { return e.Err }

// UnreachableError: the daemon could not be reached at all.
type UnreachableError struct {
	Socket string // set for the unix socket transport
	URL    string // set for HTTPS
	Err    error
}

func (e *UnreachableError) Error() string {
	if e.Socket != "" {
		return fmt.Sprintf("incus: cannot reach the daemon on unix socket %s: %v "+
			"(is incusd running? on this project's test machines run scripts/incus-up.sh; "+
			"the socket needs root or the incus-admin group)", e.Socket, e.Err)
	}
	return fmt.Sprintf("incus: cannot reach the daemon at %s: %v "+
		"(is incusd running there and listening on that address? check `incus config get core.https_address` on the server)",
		e.URL, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// ServerCertError: the server presented a certificate other than the pinned
// one (or, without a pin, one the system does not trust).
type ServerCertError struct {
	URL      string
	Got      string // SHA-256 fingerprint of the certificate presented
	Expected string // SHA-256 fingerprint of the pinned certificate; empty if none pinned
	Err      error
}

func (e *ServerCertError) Error() string {
	if e.Expected == "" {
		return fmt.Sprintf("incus: the server certificate of %s is not trusted: %v "+
			"(pin the server's own certificate: server_cert, or the incus CLI's servercerts/<remote>.crt)", e.URL, e.Err)
	}
	return fmt.Sprintf("incus: the server at %s presented certificate SHA-256 %s, but the pinned certificate is SHA-256 %s: "+
		"refusing to talk to it (wrong server, or its certificate changed: compare with /var/lib/incus/server.crt on the server)",
		e.URL, e.Got, e.Expected)
}

func (e *ServerCertError) Unwrap() error { return e.Err }
