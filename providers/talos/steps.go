package talos

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/zclconf/go-cty/cty"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"gopkg.in/yaml.v3"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
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

// --- talos_bootstrap

func (p *Provider) readBootstrap(req providers.ReadRequest) providers.ReadResponse {
	return providers.PresentIfPrior(req)
}

func (p *Provider) planBootstrap(ctx context.Context, c *call) providers.PlanResponse {
	return providers.PlanResponse{Diff: fmt.Sprintf("bootstrap etcd on %s (once; a node already bootstrapped counts as done; cannot be undone)", strings.Join(p.targets(), ", "))}
}

func (p *Provider) applyBootstrap(ctx context.Context, c *call) providers.ApplyResponse {
	ns, err := p.nodes(ctx)
	if err != nil {
		return providers.ApplyResponse{Diagnostics: phases.FromError("Cannot Reach Talos", err)}
	}
	if d := p.guard(ctx, c, ns); d.HasErrors() {
		return providers.ApplyResponse{Diagnostics: d}
	}
	n := ns[0] // etcd is bootstrapped on one node only
	bctx, cancel := bounded(ctx)
	defer cancel()
	err = n.c.Bootstrap(n.at(bctx), &machineapi.BootstrapRequest{})
	switch {
	case err == nil:
		c.log.Printf("node %s: etcd bootstrapped", n.name)
	case alreadyBootstrapped(err):
		c.log.Printf("node %s: already bootstrapped (%v); nothing to do", n.name, status.Convert(err).Message())
	default:
		c.captureDmesg(ctx, n)
		return providers.ApplyResponse{Diagnostics: phases.Errorf("Bootstrap Failed", "Bootstrapping etcd on node %s failed: %v.", n.name, apiErr("Bootstrap", err))}
	}
	c.log.Printf("bootstrap cannot be undone: rollback leaves etcd as it is")
	return providers.ApplyResponse{}
}

func alreadyBootstrapped(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	msg := strings.ToLower(st.Message())
	return st.Code() == codes.AlreadyExists ||
		(st.Code() == codes.FailedPrecondition && (strings.Contains(msg, "not empty") || strings.Contains(msg, "already")))
}

// --- talos_kubeconfig

func (c *call) kubeconfigPath() (string, bool) {
	p, known := c.required("path")
	if !known || p == "" {
		return "", known
	}
	return c.s.abs(p), true
}

func (p *Provider) readKubeconfig(c *call, req providers.ReadRequest) providers.ReadResponse {
	path, known := c.kubeconfigPath()
	if !known || path == "" {
		return providers.ReadResponse{Observation: providers.Unknown}
	}
	if _, err := os.Stat(path); err != nil {
		return providers.ReadResponse{Observation: providers.Absent, Detail: "the kubeconfig file is gone"}
	}
	rel, _ := c.str("path", "")
	return providers.ReadResponse{Observation: providers.Present, Outputs: cty.ObjectVal(map[string]cty.Value{"path": cty.StringVal(rel)})}
}

func (p *Provider) planKubeconfig(c *call) providers.PlanResponse {
	rel, known := c.required("path")
	if c.diags.HasErrors() {
		return providers.PlanResponse{}
	}
	if !known {
		rel = "(known after apply)"
	}
	return providers.PlanResponse{Diff: fmt.Sprintf("write the cluster's kubeconfig, fetched from %s, to %s (mode 0600)", strings.Join(p.targets(), ", "), rel)}
}

func (p *Provider) applyKubeconfig(ctx context.Context, c *call) providers.ApplyResponse {
	path, _ := c.kubeconfigPath()
	if c.diags.HasErrors() {
		return providers.ApplyResponse{}
	}
	ns, err := p.nodes(ctx)
	if err != nil {
		return providers.ApplyResponse{Diagnostics: phases.FromError("Cannot Reach Talos", err)}
	}
	if d := p.guard(ctx, c, ns); d.HasErrors() {
		return providers.ApplyResponse{Diagnostics: d}
	}
	n := ns[0]
	kctx, cancel := bounded(ctx)
	defer cancel()
	b, err := n.c.Kubeconfig(n.at(kctx))
	if err != nil {
		c.captureDmesg(ctx, n)
		return providers.ApplyResponse{Diagnostics: phases.Errorf("Cannot Fetch Kubeconfig", "Node %s did not give the kubeconfig: %v. Is the cluster bootstrapped (talos_bootstrap)?", n.name, apiErr("Kubeconfig", err))}
	}
	if err := writePrivate(path, b); err != nil {
		return providers.ApplyResponse{Diagnostics: phases.Errorf("Cannot Write Kubeconfig", "Writing the kubeconfig: %v.", err)}
	}
	rel, _ := c.str("path", "")
	c.log.Printf("kubeconfig written (mode 0600)")
	return providers.ApplyResponse{
		Outputs: cty.ObjectVal(map[string]cty.Value{"path": cty.StringVal(rel)}),
		Inverse: &providers.Inverse{Description: "remove the kubeconfig file " + rel},
	}
}

func (p *Provider) revertKubeconfig(c *call, req providers.RevertRequest) providers.RevertResponse {
	path, _ := c.kubeconfigPath()
	if path == "" {
		return providers.RevertResponse{Diagnostics: c.diags}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return providers.RevertResponse{Diagnostics: phases.Errorf("Cannot Remove Kubeconfig", "Removing the kubeconfig: %v.", err)}
	}
	return providers.RevertResponse{}
}

// --- talos_read

type readSpec struct {
	path, expect, contains string
	hasExpect, hasContains bool
}

func (c *call) decodeRead() (readSpec, bool) {
	var r readSpec
	var k1, k2, k3 bool
	r.path, k1 = c.required("path")
	r.expect, k2 = c.str("expect", "")
	r.contains, k3 = c.str("contains", "")
	r.hasExpect = !getAttr(c.cfg, "expect").IsNull()
	r.hasContains = !getAttr(c.cfg, "contains").IsNull()
	if k1 && r.path != "" && !strings.HasPrefix(r.path, "/") {
		c.errorf("Invalid Attribute Value", "The \"path\" attribute of %s must be an absolute path on the node, such as /var/mnt/data/.probe.", c.addr)
	}
	return r, k1 && k2 && k3
}

func (p *Provider) planRead(c *call) providers.PlanResponse {
	r, known := c.decodeRead()
	if c.diags.HasErrors() {
		return providers.PlanResponse{}
	}
	if !known {
		return providers.PlanResponse{Diff: "read a file through the Talos API (its settings are known after earlier steps run)"}
	}
	what := "exists"
	switch {
	case r.hasExpect:
		what = fmt.Sprintf("holds exactly %q", strings.TrimSpace(r.expect))
	case r.hasContains:
		what = fmt.Sprintf("contains %q", r.contains)
	}
	return providers.PlanResponse{Diff: fmt.Sprintf("read %s through the Talos API on %s and check that it %s", r.path, strings.Join(p.targets(), ", "), what)}
}

func (p *Provider) applyRead(ctx context.Context, c *call) providers.ApplyResponse {
	r, _ := c.decodeRead()
	if c.diags.HasErrors() {
		return providers.ApplyResponse{}
	}
	err := p.forNodes(ctx, func(n node) error {
		got, err := n.readFile(ctx, r.path)
		if err != nil {
			c.captureDmesg(ctx, n)
			return err
		}
		text := string(got)
		switch {
		case r.hasExpect && strings.TrimSpace(text) != strings.TrimSpace(r.expect):
			return fmt.Errorf("%s holds %q, not the expected %q", r.path, clip(strings.TrimSpace(text)), strings.TrimSpace(r.expect))
		case r.hasContains && !strings.Contains(text, r.contains):
			return fmt.Errorf("%s (%d bytes) does not contain %q", r.path, len(got), r.contains)
		}
		c.log.Printf("node %s: %s read through the API (%d bytes) as expected", n.name, r.path, len(got))
		return nil
	})
	if err != nil {
		return providers.ApplyResponse{Diagnostics: phases.Errorf("Read Check Failed", "%v.", err)}
	}
	return providers.ApplyResponse{Inverse: &providers.Inverse{Description: "nothing to undo"}}
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// --- talos_service_health

func (p *Provider) planServiceHealth(c *call) providers.PlanResponse {
	svcs, known := c.strs("services")
	if known && len(svcs) == 0 && !c.diags.HasErrors() {
		c.missing("services")
	}
	if c.diags.HasErrors() {
		return providers.PlanResponse{}
	}
	if !known {
		return providers.PlanResponse{Diff: "check that Talos services are running and healthy (which ones is known after earlier steps run)"}
	}
	return providers.PlanResponse{Diff: fmt.Sprintf("check that %s run healthy on %s", strings.Join(svcs, ", "), strings.Join(p.targets(), ", "))}
}

// serviceWait is how long talos_service_health waits for its services when
// the step sets no timeout, as talosctl health --wait-timeout: right after
// a bootstrap or a reboot, etcd and the kubelet take a while to start.
const serviceWait = 5 * time.Minute

func (p *Provider) applyServiceHealth(ctx context.Context, c *call) providers.ApplyResponse {
	svcs, _ := c.strs("services")
	if len(svcs) == 0 && !c.diags.HasErrors() {
		c.missing("services")
	}
	if c.diags.HasErrors() {
		return providers.ApplyResponse{}
	}
	parent := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, serviceWait)
		defer cancel()
	}
	deadline, _ := ctx.Deadline()
	wait := time.Until(deadline).Round(time.Second)
	err := p.forNodes(ctx, func(n node) error {
		bad, err := c.waitServices(ctx, n, svcs)
		switch {
		case err == nil && len(bad) == 0:
			c.log.Printf("node %s: %s running and healthy", n.name, strings.Join(svcs, ", "))
			return nil
		case errors.Is(parent.Err(), context.Canceled): // not the timeout: an interrupt
			return fmt.Errorf("stopped while waiting for the services of %s: %w", n.name, parent.Err())
		}
		c.captureDmesg(ctx, n)
		if len(bad) == 0 {
			return err // the node never answered
		}
		return fmt.Errorf("services not healthy on %s after waiting %s: %s", n.name, wait, strings.Join(bad, "; "))
	})
	if err != nil {
		return providers.ApplyResponse{Diagnostics: phases.Errorf("Services Not Healthy", "%v.", err)}
	}
	return providers.ApplyResponse{Inverse: &providers.Inverse{Description: "nothing to undo"}}
}

// waitServices asks the node for its services until the wanted ones run
// healthy or ctx ends. It returns the last states seen of those that did
// not (empty when all are well), and the last error when the node did not
// answer.
func (c *call) waitServices(ctx context.Context, n node, want []string) ([]string, error) {
	var bad []string
	var lastErr error
	said := ""
	for {
		have, err := n.services(ctx)
		switch {
		case err == nil:
			bad, lastErr = unhealthy(have, want), nil
			if len(bad) == 0 {
				return nil, nil
			}
			if now := strings.Join(bad, "; "); now != said {
				c.log.Printf("node %s: waiting for %s", n.name, now)
				said = now
			}
		case ctx.Err() == nil:
			lastErr = err // cut by our own deadline is not the node's answer
		}
		select {
		case <-ctx.Done():
			if lastErr == nil && bad == nil {
				lastErr = ctx.Err()
			}
			return bad, lastErr
		case <-time.After(pollInterval):
		}
	}
}

// --- talos_upgrade

// upgradeInverse is the Data of an upgrade's inverse.
type upgradeInverse struct {
	Version string `json:"version"`
}

func (c *call) decodeUpgrade() (target string, preserve bool, known bool) {
	target, k1 := c.required("version")
	preserve, k2 := c.boolean("preserve")
	if target != "" {
		target = "v" + strings.TrimPrefix(target, "v")
	}
	return target, preserve, k1 && k2
}

func (p *Provider) readUpgrade(ctx context.Context, c *call, req providers.ReadRequest) providers.ReadResponse {
	target, _, known := c.decodeUpgrade()
	if !known || target == "" {
		return providers.ReadResponse{Observation: providers.Unknown}
	}
	ns, err := p.nodes(ctx)
	if err != nil {
		return providers.ReadResponse{Diagnostics: phases.FromError("Cannot Reach Talos", err)}
	}
	for _, n := range ns {
		v, err := n.version(ctx)
		if err != nil {
			return providers.ReadResponse{Diagnostics: phases.FromError("Cannot Read Talos Version", err)}
		}
		if !sameVersion(v, target) {
			return providers.ReadResponse{Observation: providers.Absent, Detail: fmt.Sprintf("node %s runs %s, not %s", n.name, v, target)}
		}
	}
	return providers.ReadResponse{Observation: providers.Present, Outputs: upgradeOutputs(target, c.s.installerImage(target))}
}

func upgradeOutputs(version, image string) cty.Value {
	return cty.ObjectVal(map[string]cty.Value{"version": cty.StringVal(version), "image": cty.StringVal(image)})
}

func (p *Provider) planUpgrade(ctx context.Context, c *call) providers.PlanResponse {
	target, preserve, known := c.decodeUpgrade()
	if c.diags.HasErrors() {
		return providers.PlanResponse{}
	}
	if !known {
		return providers.PlanResponse{Diff: "upgrade Talos (the target is known after earlier steps run)"}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "upgrade Talos on %s to %s with %s (preserve = %v), then wait until the node runs %s\n", strings.Join(p.targets(), ", "), target, c.s.installerImage(target), preserve, target)
	if !sameVersion(target, c.s.version) {
		fmt.Fprintf(&b, "note: the provider pins version = %q; after the upgrade, pin %q so that later configs are rendered for it\n", c.s.version, target)
	}
	if err := checkCompatibility(c.s.k8sVersion, target); err != nil {
		return providers.PlanResponse{Diagnostics: phases.Errorf("Incompatible Versions", "Talos %s does not support Kubernetes %s: %v. Upgrade Kubernetes first or choose another target.", target, c.s.k8sVersion, err)}
	}
	return providers.PlanResponse{Diff: b.String()}
}

func (p *Provider) applyUpgrade(ctx context.Context, c *call) providers.ApplyResponse {
	target, preserve, _ := c.decodeUpgrade()
	if c.diags.HasErrors() {
		return providers.ApplyResponse{}
	}
	ns, err := p.nodes(ctx)
	if err != nil {
		return providers.ApplyResponse{Diagnostics: phases.FromError("Cannot Reach Talos", err)}
	}
	var from string
	for _, n := range ns {
		v, err := n.version(ctx)
		if err != nil {
			return providers.ApplyResponse{Diagnostics: phases.Errorf("Cannot Read Talos Version", "Node %s did not answer its version: %v.", n.name, err)}
		}
		if from == "" {
			from = v
		}
		if d := c.upgrade(ctx, n, v, target, preserve); d.HasErrors() {
			return providers.ApplyResponse{Diagnostics: d}
		}
	}
	out := upgradeOutputs(target, c.s.installerImage(target))
	if sameVersion(from, target) {
		// A reinstall of the same version: there is nothing to go back to.
		return providers.ApplyResponse{Outputs: out, Inverse: &providers.Inverse{Description: "nothing to undo: the node ran this version before"}}
	}
	data, _ := json.Marshal(upgradeInverse{Version: from})
	return providers.ApplyResponse{
		Outputs: out,
		Inverse: &providers.Inverse{Description: fmt.Sprintf("upgrade Talos back to %s (with the installer %s)", from, c.s.installerImage(from)), Data: data},
	}
}

// upgrade moves one node to the target version and waits for it.
func (c *call) upgrade(ctx context.Context, n node, from, target string, preserve bool) phases.Diagnostics {
	image := c.s.installerImage(target)
	c.log.Printf("node %s: upgrading Talos %s -> %s with %s", n.name, from, target, image)
	uctx, cancel := bounded(ctx)
	_, err := n.c.UpgradeWithOptions(n.at(uctx),
		client.WithUpgradeImage(image),
		client.WithUpgradePreserve(preserve),
		client.WithUpgradeRebootMode(machineapi.UpgradeRequest_DEFAULT),
	)
	cancel()
	if err != nil {
		c.captureDmesg(ctx, n)
		return phases.Errorf("Upgrade Refused", "Node %s refused the upgrade to %s: %v.", n.name, target, apiErr("Upgrade", err))
	}
	if sameVersion(from, target) {
		// The version cannot tell the reinstall from the old system: wait
		// for the reboot to take the node down first.
		if !waitDown(ctx, n, 30*time.Second) {
			c.log.Printf("node %s: did not go down within 30s for the reinstall of %s; it may still be installing", n.name, target)
		}
	}
	if err := waitVersion(ctx, n, target); err != nil {
		c.captureDmesg(ctx, n)
		return phases.Errorf("Upgrade Not Finished", "Node %s did not come back on Talos %s: %v.", n.name, target, err)
	}
	c.log.Printf("node %s: runs Talos %s", n.name, target)
	return nil
}

func (p *Provider) revertUpgrade(ctx context.Context, c *call, req providers.RevertRequest) providers.RevertResponse {
	var inv upgradeInverse
	if len(req.Inverse.Data) == 0 {
		return providers.RevertResponse{}
	}
	if err := json.Unmarshal(req.Inverse.Data, &inv); err != nil || inv.Version == "" {
		return providers.RevertResponse{Diagnostics: phases.Errorf("Invalid Inverse", "The recorded inverse of %s names no version to go back to.", c.addr)}
	}
	_, preserve, _ := c.decodeUpgrade()
	c.diags = nil
	err := p.forNodes(ctx, func(n node) error {
		v, err := n.version(ctx)
		if err != nil {
			return err
		}
		if req.Resumed && sameVersion(v, inv.Version) {
			// Downgraded by the interrupted revert: not another reinstall.
			c.log.Printf("node %s: runs Talos %s already", n.name, v)
			return nil
		}
		if d := c.upgrade(ctx, n, v, inv.Version, preserve); d.HasErrors() {
			return d.Err()
		}
		return nil
	})
	if err != nil {
		return providers.RevertResponse{Diagnostics: phases.FromError("Downgrade Failed", err)}
	}
	return providers.RevertResponse{}
}
