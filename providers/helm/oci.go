package helm

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/registry"
)

// Charts from OCI registries (chart = "oci://host/repository/name"),
// through Helm's registry client, with Helm's own settings: the version
// is a tag or a constraint (the highest tag matching it, as helm install
// picks; none: the highest tag), credentials come from username and
// password or from a registry config (Helm's, $HELM_CONFIG_HOME/registry/
// config.json, by default, then Docker's), TLS is verified against the
// system's roots or ca_file, and plain HTTP is spoken only when plain_http
// says so, or by default to a registry on a loopback address, whose
// traffic never leaves the machine.
//
// The version is resolved to the digest of its manifest first, and the
// chart pulled by that digest: what is rendered is what was resolved,
// even when the tag moves in between. The digest attribute pins it; the
// plan shows it and records it (releasePrivate.ChartDigest), and apply
// refuses a version that resolves to another digest since, naming both.

// ociChart resolves and pulls the step's OCI chart; planned is the digest
// the plan was made with ("" none).
func (p *Provider) ociChart(st relAttrs, planned string) (*chart.Chart, source, error) {
	u, err := url.Parse(st.Chart)
	if err != nil || u.Host == "" {
		return nil, source{}, fmt.Errorf("chart %s is not an OCI reference such as oci://registry.example.org/charts/name", st.Chart)
	}
	client, err := p.registryClient(st, u.Hostname())
	if err != nil {
		return nil, source{}, fmt.Errorf("chart %s: %w", st.Chart, err)
	}
	tagged, err := client.ValidateReference(st.Chart, st.Version, u)
	if err != nil {
		return nil, source{}, fmt.Errorf("resolving chart %s%s: %w", st.Chart, versionWords(st.Version), err)
	}
	repo, version, _ := cutLast(tagged.Host+"/"+strings.TrimPrefix(tagged.Path, "/"), ":") // host/repository/name:version
	// Helm pushes a version's "+" as "_": OCI tags cannot hold it.
	tag := strings.ReplaceAll(version, "+", "_")
	desc, err := client.Resolve(repo + ":" + tag)
	if err != nil {
		return nil, source{}, fmt.Errorf("resolving chart %s version %s: %w%s", st.Chart, version, err, registryHint(st, u.Hostname(), err))
	}
	src := source{ref: st.Chart, version: strings.ReplaceAll(version, "_", "+"), digest: desc.Digest.String()}
	if err := src.holds(st, planned); err != nil {
		return nil, source{}, err
	}
	data, err := p.pulls.pull(client, repo+"@"+src.digest)
	if err != nil {
		return nil, source{}, fmt.Errorf("pulling chart %s version %s (%s): %w", st.Chart, src.version, src.digest, err)
	}
	ch, err := loader.LoadArchive(bytes.NewReader(data))
	if err != nil {
		return nil, source{}, fmt.Errorf("loading chart %s version %s: %w", st.Chart, src.version, err)
	}
	if v := chartVersion(ch); v != src.version {
		return nil, source{}, fmt.Errorf("chart %s: the chart under tag %s is version %s; a registry holds a chart under its own version (helm push tags it so)", st.Chart, tag, v)
	}
	return ch, src, nil
}

func versionWords(v string) string {
	if v == "" {
		return " (its highest version)"
	}
	return " version " + v
}

// cutLast splits s around the last sep.
func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// registryClient is Helm's registry client with the step's settings,
// for a registry on host. It writes nothing: Helm's own lines ("Pulled:
// …") would reach the terminal past the step's log.
func (p *Provider) registryClient(st relAttrs, host string) (*registry.Client, error) {
	httpClient, err := p.registryHTTP(st)
	if err != nil {
		return nil, err
	}
	opts := []registry.ClientOption{
		registry.ClientOptWriter(io.Discard),
		registry.ClientOptEnableCache(true),
		registry.ClientOptHTTPClient(httpClient),
	}
	if st.RegistryConfig != "" {
		path := p.abs(st.RegistryConfig)
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("registry_config: %w", err)
		}
		opts = append(opts, registry.ClientOptCredentialsFile(path))
	}
	if st.Username != "" {
		opts = append(opts, registry.ClientOptBasicAuth(st.Username, st.Password))
	}
	if plainHTTP(st, host) {
		opts = append(opts, registry.ClientOptPlainHTTP())
	}
	return registry.NewClient(opts...)
}

// registryTimeout bounds one request to a registry: Helm's client takes
// no context, so a registry that stops answering would hold the step.
const registryTimeout = 5 * time.Minute

// registryHTTP is the HTTP client of a registry: TLS verified against
// the system's roots, and ca_file's certificates when it names one.
func (p *Provider) registryHTTP(st relAttrs) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if st.CAFile != "" {
		pem, err := os.ReadFile(p.abs(st.CAFile))
		if err != nil {
			return nil, fmt.Errorf("ca_file: %w", err)
		}
		roots, err := x509.SystemCertPool()
		if err != nil {
			roots = x509.NewCertPool()
		}
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca_file %s holds no PEM certificate", st.CAFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: tr, Timeout: registryTimeout}, nil
}

// plainHTTP says whether to speak plain HTTP to the registry on host:
// when plain_http says so; unset, to a loopback address and without a
// ca_file only.
func plainHTTP(st relAttrs, host string) bool {
	if st.PlainHTTP != nil {
		return *st.PlainHTTP
	}
	return st.CAFile == "" && isLoopback(host)
}

// registryHint says what to set when a registry refused the client.
func registryHint(st relAttrs, host string, err error) string {
	msg := err.Error()
	switch {
	case st.PlainHTTP == nil && plainHTTP(st, host) && strings.Contains(msg, "status code 400"):
		// What a registry serving HTTPS answers a plain HTTP request.
		return " (plain HTTP was spoken, the default for a registry on a loopback address: if it serves HTTPS, set plain_http = false, or ca_file)"
	case strings.Contains(msg, "credential") || strings.Contains(msg, "401") || strings.Contains(msg, "unauthorized"):
		return " (the registry asks for credentials: set username and password, or registry_config)"
	case strings.Contains(msg, "certificate"):
		return " (set ca_file to the CA the registry's certificate is from)"
	}
	return ""
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// pulls keeps the charts pulled by digest: content addressed, so the
// plan's pull serves apply's.
type pulls struct {
	mu sync.Mutex
	by map[string][]byte // by repository@digest
}

func (c *pulls) pull(client *registry.Client, ref string) ([]byte, error) {
	c.mu.Lock()
	data, ok := c.by[ref]
	c.mu.Unlock()
	if ok {
		return data, nil
	}
	res, err := client.Pull(ref)
	if err != nil {
		return nil, err
	}
	if _, want, _ := cutLast(ref, "@"); res.Manifest.Digest != want {
		return nil, fmt.Errorf("the registry answered manifest %s for %s", res.Manifest.Digest, want)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by == nil {
		c.by = map[string][]byte{}
	}
	c.by[ref] = res.Chart.Data
	return res.Chart.Data, nil
}
