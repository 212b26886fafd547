package kubecp

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/homelab-migrate/migrate/lab/sandbox"
)

// firstProbe is how long after a container starts (and its
// initialDelaySeconds) its first probe runs: a program listens a moment
// after it starts.
var firstProbe = 200 * time.Millisecond

// probe runs the container's probes as kubelet does until ctx ends: the
// startupProbe until it passes (failureThreshold failures kill the
// container), then readiness (Ready while it passes; Ready at once
// without one) and liveness (failureThreshold failures kill it).
func (p *appPod) probe(ctx context.Context, i int, run *containerRun, kill func()) {
	ctr := run.ctr

	if sp := ctr.StartupProbe; sp != nil {
		passed := p.every(ctx, sp, run, func(ok bool, fails int, msg string) bool {
			if !ok && fails >= threshold(sp.FailureThreshold, 3) {
				fmt.Fprintf(p.log, "== container %s failed its startup probe %d times (%s): killed, to be restarted\n", ctr.Name, fails, msg)
				kill()

				return true
			}

			return ok
		})
		if !passed {
			return
		}
	}

	p.update(i, func(st *corev1.ContainerStatus) {
		st.Started = ptr(true)
		st.Ready = ctr.ReadinessProbe == nil
	})

	done := make(chan struct{})

	if rp := ctr.ReadinessProbe; rp != nil {
		go func() {
			defer func() { done <- struct{}{} }()

			successes := 0

			p.every(ctx, rp, run, func(ok bool, fails int, msg string) bool {
				if ok {
					successes++
				} else {
					successes = 0
				}

				switch {
				case ok && successes >= threshold(rp.SuccessThreshold, 1):
					p.setReady(i, true, "")
				case !ok && fails >= threshold(rp.FailureThreshold, 3):
					p.setReady(i, false, msg)
				}

				return false
			})
		}()
	} else {
		go func() { done <- struct{}{} }()
	}

	if lp := ctr.LivenessProbe; lp != nil {
		p.every(ctx, lp, run, func(ok bool, fails int, msg string) bool {
			if !ok && fails >= threshold(lp.FailureThreshold, 3) {
				fmt.Fprintf(p.log, "== container %s failed liveness probe %d times (%s), will be restarted\n", ctr.Name, fails, msg)
				kill()

				return true
			}

			return false
		})
	}

	<-done
}

func (p *appPod) setReady(i int, ready bool, why string) {
	p.mu.Lock()
	was := p.statuses[i].Ready
	p.mu.Unlock()

	if was == ready {
		return
	}

	if !ready {
		fmt.Fprintf(p.log, "== container %s not ready: %s\n", p.pod.Spec.Containers[i].Name, why)
	}

	p.update(i, func(st *corev1.ContainerStatus) { st.Ready = ready })
}

func threshold(v int32, def int) int {
	if v <= 0 {
		return def
	}

	return int(v)
}

// every runs pr at its period (after its initial delay) until ctx ends
// or result says stop; result gets each outcome with the number of
// failures in a row. It returns whether the last probe passed.
func (p *appPod) every(ctx context.Context, pr *corev1.Probe, run *containerRun, result func(ok bool, fails int, msg string) bool) bool {
	period := time.Duration(threshold(pr.PeriodSeconds, 10)) * time.Second
	wait := time.Duration(pr.InitialDelaySeconds)*time.Second + firstProbe
	fails := 0

	for {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}

		wait = period

		msg, ok := p.check(ctx, pr, run)
		if ok {
			fails = 0
		} else {
			fails++
		}

		if result(ok, fails, msg) {
			return ok
		}
	}
}

// check runs one probe: an httpGet answered 200-399, a tcpSocket that
// connects, an exec whose command exits 0 (command containers only).
func (p *appPod) check(ctx context.Context, pr *corev1.Probe, run *containerRun) (string, bool) {
	timeout := time.Duration(threshold(pr.TimeoutSeconds, 1)) * time.Second

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	switch {
	case pr.HTTPGet != nil:
		return p.httpProbe(ctx, pr.HTTPGet, run.ctr)
	case pr.TCPSocket != nil:
		port, err := containerPort(pr.TCPSocket.Port, run.ctr)
		if err != nil {
			return err.Error(), false
		}

		host := pr.TCPSocket.Host
		if host == "" {
			host = p.ip
		}

		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return fmt.Sprintf("dial tcp %s:%d: %v", host, port, err), false
		}

		conn.Close() //nolint:errcheck

		return "", true
	case pr.Exec != nil:
		if run.program != nil {
			return "exec probe: the lab's stand-in for " + run.ctr.Image + " runs no commands", false
		}

		spec := run.spec
		spec.Argv = pr.Exec.Command

		out, err := sandbox.Command(ctx, spec).CombinedOutput()
		if err != nil {
			return fmt.Sprintf("command %q: %v: %s", pr.Exec.Command, err, strings.TrimSpace(string(out))), false
		}

		return "", true
	default:
		return "a probe the lab does not run (gRPC)", false
	}
}

func (p *appPod) httpProbe(ctx context.Context, g *corev1.HTTPGetAction, ctr corev1.Container) (string, bool) {
	port, err := containerPort(g.Port, ctr)
	if err != nil {
		return err.Error(), false
	}

	host := g.Host
	if host == "" {
		host = p.ip
	}

	scheme := strings.ToLower(string(g.Scheme))
	if scheme == "" {
		scheme = "http"
	}

	url := scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port)) + "/" + strings.TrimPrefix(g.Path, "/")

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err.Error(), false
	}

	req.Header.Set("User-Agent", "kube-probe/1.37")

	for _, h := range g.HTTPHeaders {
		req.Header.Set(h.Name, h.Value)
	}

	// kubelet does not verify a probe's certificate
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec

	resp, err := client.Do(req)
	if err != nil {
		return fmt.Sprintf("Get %q: %v", url, err), false
	}
	defer resp.Body.Close() //nolint:errcheck

	io.Copy(io.Discard, io.LimitReader(resp.Body, 10<<10)) //nolint:errcheck

	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Sprintf("HTTP probe failed with statuscode: %d", resp.StatusCode), false
	}

	return "", true
}

// containerPort is a probe's (or Service's) port: a number, or the name
// of one of the container's ports.
func containerPort(port intstr.IntOrString, ctr corev1.Container) (int, error) {
	if port.Type == intstr.Int {
		return int(port.IntVal), nil
	}

	if n, err := strconv.Atoi(port.StrVal); err == nil {
		return n, nil
	}

	for _, cp := range ctr.Ports {
		if cp.Name == port.StrVal {
			return int(cp.ContainerPort), nil
		}
	}

	return 0, fmt.Errorf("port %q is not a port of container %s", port.StrVal, ctr.Name)
}
