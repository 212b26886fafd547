package helm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// Reaching the API server (sdk.Reach): a cluster that does not answer
// fails every step that uses it with the same connection error, twelve in
// a row in a plan of the homelab example while its node is down. So a step
// first dials its cluster's API server: the first step to find it down
// gets the whole story (the server, the kubeconfig and context it comes
// from, what to check), and the steps after it one line that points at
// that step.

// reachable dials the API server of cl for the step at addr, and returns
// the diagnostic of a server that does not answer.
func (cl *cluster) reachable(ctx context.Context, addr phases.Address) phases.Diagnostics {
	hostport, ok := cl.dialAddress()
	if !ok {
		return nil // through a proxy or a dialer of its own: the calls say
	}
	dial := cl.rest.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	return cl.reach.Probe(ctx, addr, func(ctx context.Context) error {
		conn, err := dial(ctx, "tcp", hostport)
		if err == nil {
			conn.Close()
		}
		return err
	}, cl.unreachableSay(addr))
}

// unreachableSay words the diagnostics of the step at addr when the
// server does not answer.
func (cl *cluster) unreachableSay(addr phases.Address) sdk.Unreachable {
	return sdk.Unreachable{
		First: func(err error) phases.Diagnostics {
			return phases.Errorf("Cannot Reach Kubernetes",
				"%s cannot reach the Kubernetes API server at %s: %v. It is the server of %s. "+
					"Check that the cluster is up (its node booted and its API server started); "+
					"that the kubeconfig is this cluster's (when a talos_kubeconfig step writes it, that the step ran against this cluster's node); "+
					"and that the address is right and reachable from this machine.",
				addr, cl.server, err, cl.source())
		},
		Again: func(first phases.Address) phases.Diagnostics {
			return phases.Errorf("Cannot Reach Kubernetes", "%s: the cluster at %s did not answer (see %s).", addr, cl.server, first)
		},
	}
}

// unreachable is the diagnostic of a call of the step at addr that failed
// to connect to the API server, nil for any other error.
func (cl *cluster) unreachable(addr phases.Address, err error) phases.Diagnostics {
	if cl == nil || !isDialError(err) {
		return nil
	}
	var op *net.OpError
	if errors.As(err, &op) {
		err = op // without the URL and method the client puts before it
	}
	return cl.reach.Lost(addr, err, cl.unreachableSay(addr))
}

// isDialError reports whether err is a failure to connect: refused, no
// route, timed out, or a host name that does not resolve.
func isDialError(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns)
}

// dialAddress is the host:port the probe dials; false when the client
// goes through a proxy, which the probe cannot stand in for.
func (cl *cluster) dialAddress() (string, bool) {
	u, err := url.Parse(cl.rest.Host)
	if err != nil || u.Host == "" {
		u, err = url.Parse("https://" + cl.rest.Host)
		if err != nil || u.Host == "" {
			return "", false
		}
	}
	if cl.rest.Proxy != nil {
		return "", false
	}
	if p, err := http.ProxyFromEnvironment(&http.Request{URL: u}); err != nil || p != nil {
		return "", false
	}
	port := u.Port()
	if port == "" {
		port = "443"
		if u.Scheme == "http" {
			port = "80"
		}
	}
	return net.JoinHostPort(u.Hostname(), port), true
}

// source names where the cluster's address comes from: the context and
// the kubeconfig file.
func (cl *cluster) source() string {
	file := cl.kubeconfig
	if file == "" {
		file = "the kubeconfig of KUBECONFIG or ~/.kube/config"
		if f := cl.loader.ConfigAccess().GetDefaultFilename(); f != "" {
			file = "the kubeconfig " + f + " (from KUBECONFIG or ~/.kube/config)"
		}
	} else {
		file = "the kubeconfig " + file
	}
	if cl.context == "" {
		return file
	}
	return fmt.Sprintf("context %q in %s", cl.context, file)
}

// apiErr is the diagnostic of a failed call of the step c to the API
// server of cl: the unreachable server's when the call could not connect,
// else summary and the detail.
func apiErr(c *call, cl *cluster, err error, summary, format string, args ...any) phases.Diagnostics {
	if d := cl.unreachable(c.Addr, err); d != nil {
		return d
	}
	return phases.Errorf(summary, format, args...)
}
