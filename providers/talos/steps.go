package talos

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

func sortStrings(s []string) []string {
	sort.Strings(s)
	return s
}

// pollInterval is the pause between tries of a check that waits.
const pollInterval = 500 * time.Millisecond

// verify runs the checks of a pending TRY, retrying until they pass or ctx
// ends; the error says what failed last.
func (c *call) verify(ctx context.Context, n node, v verifySpec) error {
	if v.empty() {
		return nil
	}
	var last error
	kubeNoted := false
	for {
		last = c.verifyOnce(ctx, n, v, &kubeNoted)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return last
		case <-time.After(pollInterval):
		}
	}
}

func (c *call) verifyOnce(ctx context.Context, n node, v verifySpec, kubeNoted *bool) error {
	var errs []error
	if len(v.services) > 0 {
		have, err := n.services(ctx)
		if err != nil {
			errs = append(errs, err)
		} else if bad := unhealthy(have, v.services); len(bad) > 0 {
			errs = append(errs, fmt.Errorf("services not healthy: %s", strings.Join(bad, "; ")))
		}
	}
	for _, path := range sortStrings(keys(v.files)) {
		got, err := n.readFile(ctx, path)
		if err != nil {
			errs = append(errs, fmt.Errorf("reading %s: %w", path, err))
			continue
		}
		if strings.TrimSpace(string(got)) != strings.TrimSpace(v.files[path]) {
			errs = append(errs, fmt.Errorf("%s does not hold the expected content (%d bytes read)", path, len(got)))
		}
	}
	if v.kubernetes {
		if skipped, err := kubeAnswers(ctx, n); skipped != "" {
			if !*kubeNoted {
				c.log.Printf("node %s: Kubernetes check skipped: %s", n.name, skipped)
				*kubeNoted = true
			}
		} else if err != nil {
			errs = append(errs, fmt.Errorf("the Kubernetes API does not answer: %w", err))
		}
	}
	return errors.Join(errs...)
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// kubeconfigDoc is the part of a kubeconfig the API check needs.
type kubeconfigDoc struct {
	Clusters []struct {
		Cluster struct {
			Server string `yaml:"server"`
			CA     string `yaml:"certificate-authority-data"`
		} `yaml:"cluster"`
	} `yaml:"clusters"`
	Users []struct {
		User struct {
			Cert string `yaml:"client-certificate-data"`
			Key  string `yaml:"client-key-data"`
		} `yaml:"user"`
	} `yaml:"users"`
}

// kubeAnswers checks that the Kubernetes API answers, with the admin
// kubeconfig the node hands out. skipped is non-empty (and says why) when
// there is no kubeconfig to check with.
func kubeAnswers(ctx context.Context, n node) (skipped string, err error) {
	kctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	b, err := n.c.Kubeconfig(n.at(kctx))
	if err != nil {
		return fmt.Sprintf("the node has no kubeconfig to give (%v)", apiErr("Kubeconfig", err)), nil
	}
	var kc kubeconfigDoc
	if err := yaml.Unmarshal(b, &kc); err != nil || len(kc.Clusters) == 0 || kc.Clusters[0].Cluster.Server == "" {
		return "the node's kubeconfig names no API server", nil
	}
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca, err := base64.StdEncoding.DecodeString(kc.Clusters[0].Cluster.CA); err == nil && len(ca) > 0 {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(ca)
		tlsCfg.RootCAs = pool
	}
	if len(kc.Users) > 0 {
		crt, _ := base64.StdEncoding.DecodeString(kc.Users[0].User.Cert)
		key, _ := base64.StdEncoding.DecodeString(kc.Users[0].User.Key)
		if pair, err := tls.X509KeyPair(crt, key); err == nil {
			tlsCfg.Certificates = []tls.Certificate{pair}
		}
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}, Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(kctx, http.MethodGet, strings.TrimRight(kc.Clusters[0].Cluster.Server, "/")+"/version", nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	return "", nil
}

// waitVersion waits until the node answers its version (== want unless
// want is empty), with backoff, until ctx ends or 10 minutes pass.
func waitVersion(ctx context.Context, n node, want string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	backoff := 250 * time.Millisecond
	var last error
	for {
		v, err := n.version(ctx)
		switch {
		case err != nil:
			last = err
			n.redial()
		case want == "" || sameVersion(v, want):
			return nil
		default:
			last = fmt.Errorf("the node runs %s, not yet %s", v, want)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// waitDown waits until the node stops answering, at most d.
func waitDown(ctx context.Context, n node, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		vctx, vcancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := n.version(vctx)
		vcancel()
		if err != nil {
			return ctx.Err() == nil
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
}
