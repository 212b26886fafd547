package talos

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"gopkg.in/yaml.v3"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/sdk"
	"github.com/homelab-migrate/migrate/providers/talos/talosschema"
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

var bootstrapStep = &sdk.StepType[*Provider, talosschema.BootstrapAttrs, none, none]{
	Name: Bootstrap, Description: talosschema.BootstrapDoc,
	Plan: func(_ context.Context, c *handle, _ talosschema.BootstrapAttrs, _ *sdk.Prior[none, none]) sdk.Plan[none] {
		return sdk.Plan[none]{
			Diff:         fmt.Sprintf("bootstrap etcd on %s (once; a node already bootstrapped counts as done; cannot be undone)", strings.Join(c.Settings.targets(), ", ")),
			Irreversible: "bootstrapping etcd cannot be undone",
		}
	},
	Apply: func(ctx context.Context, sc *handle, _ talosschema.BootstrapAttrs, _ none, _ *sdk.Prior[none, none]) sdk.Apply[none, none] {
		d, stopped := applyBootstrap(ctx, newCall(sc))
		return sdk.Apply[none, none]{Outputs: none{}, Diagnostics: d, Stopped: stopped}
	},
}

// applyBootstrap bootstraps etcd and waits until it is healthy; stopped:
// a gentle stop cut the wait (etcd is bootstrapped, not waited for).
func applyBootstrap(ctx context.Context, c *call) (_ phases.Diagnostics, stopped bool) {
	ns, d := c.guarded(ctx)
	if d.HasErrors() {
		return d, false
	}
	n := ns[0] // etcd is bootstrapped on one node only
	bctx, cancel := bounded(ctx)
	defer cancel()
	err := n.c.Bootstrap(n.at(bctx), &machineapi.BootstrapRequest{})
	switch {
	case err == nil:
		c.log.Printf("node %s: etcd bootstrapped", n.name)
	case alreadyBootstrapped(err):
		c.log.Printf("node %s: already bootstrapped (%v); nothing to do", n.name, status.Convert(err).Message())
	default:
		c.captureDmesg(ctx, n)
		return phases.Errorf("Bootstrap Failed", "Bootstrapping etcd on node %s failed: %v.", n.name, apiErr("Bootstrap", err)), false
	}
	c.log.Printf("bootstrap cannot be undone: rollback leaves etcd as it is")
	return waitEtcd(ctx, c, n)
}

// waitEtcd waits, within the step's timeout (else serviceWait), until
// etcd runs healthy on the bootstrapped node, as talos_service_health
// does: etcd takes a while to start, and the next steps (the kubeconfig,
// the API server) need it. Only that node is asked: a worker has no etcd.
// A gentle stop ends the wait at once (stopped).
func waitEtcd(ctx context.Context, c *call, n node) (_ phases.Diagnostics, stopped bool) {
	parent := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, serviceWait)
		defer cancel()
	}
	deadline, _ := ctx.Deadline()
	wait := time.Until(deadline).Round(time.Second)
	wctx, release := c.WaitContext(ctx)
	defer release()
	bad, err := c.waitServices(wctx, n, []string{"etcd"})
	switch {
	case err == nil && len(bad) == 0:
		c.log.Printf("node %s: etcd running and healthy", n.name)
		return nil, false
	case sdk.StopCut(wctx):
		seen := strings.Join(bad, "; ")
		if seen == "" {
			seen = "no answer yet"
		}
		c.log.Printf("node %s: stopped waiting for etcd (%s)", n.name, seen)
		return sdk.StoppedWaiting(c.addr, "etcd is bootstrapped on "+n.name, "etcd becoming healthy (last seen: "+seen+")"), true
	case errors.Is(parent.Err(), context.Canceled): // an interrupt, not the timeout
		return phases.Errorf("Etcd Not Healthy", "Stopped while waiting for etcd on %s after the bootstrap: %v. The next run finds the node bootstrapped and waits again.", n.name, parent.Err()), false
	case len(bad) == 0:
		return phases.Errorf("Etcd Not Healthy", "Node %s did not say whether etcd is healthy after the bootstrap: %v.", n.name, apiErr("ServiceList", err)), false
	}
	c.captureDmesg(ctx, n)
	return phases.Errorf("Etcd Not Healthy", "etcd is bootstrapped on %s but not healthy after waiting %s: %s. The next run finds the node bootstrapped and waits again.", n.name, wait, strings.Join(bad, "; ")), false
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

var kubeconfigStep = &sdk.StepType[*Provider, talosschema.KubeconfigAttrs, none, none]{
	Name: Kubeconfig, Description: talosschema.KubeconfigDoc, Outputs: talosschema.KubeconfigOutputs{},
	Unknowns: true, // the plan names the path known after apply
	Validate: func(c *handle, a *talosschema.KubeconfigAttrs) phases.Diagnostics {
		if a.Path == "" {
			return missing(c, "path")
		}
		return nil
	},
	Read: func(_ context.Context, c *handle, a talosschema.KubeconfigAttrs, _ *sdk.Prior[none, none]) sdk.Read[none] {
		if c.Unknown("path") {
			return sdk.Read[none]{Observation: providers.Unknown}
		}
		if _, err := os.Stat(c.Settings.s.abs(a.Path)); err != nil {
			return sdk.Read[none]{Observation: providers.Absent, Detail: "the kubeconfig file is gone"}
		}
		return sdk.Read[none]{Observation: providers.Present, Outputs: talosschema.KubeconfigOutputs{Path: a.Path}}
	},
	Plan: func(_ context.Context, c *handle, a talosschema.KubeconfigAttrs, _ *sdk.Prior[none, none]) sdk.Plan[none] {
		return sdk.Plan[none]{Diff: fmt.Sprintf("write the cluster's kubeconfig, fetched from %s, to %s (mode 0600)", strings.Join(c.Settings.targets(), ", "), a.Path)}
	},
	Apply: func(ctx context.Context, sc *handle, a talosschema.KubeconfigAttrs, _ none, _ *sdk.Prior[none, none]) sdk.Apply[none, none] {
		c := newCall(sc)
		if d := fetchKubeconfig(ctx, c, c.s.abs(a.Path)); d.HasErrors() {
			return sdk.Apply[none, none]{Diagnostics: d}
		}
		c.log.Printf("kubeconfig written (mode 0600)")
		return sdk.Apply[none, none]{
			Outputs: talosschema.KubeconfigOutputs{Path: a.Path},
			Inverse: &sdk.Inverse[none]{Description: "remove the kubeconfig file " + a.Path},
		}
	},
	Revert: func(_ context.Context, c *handle, a talosschema.KubeconfigAttrs, _ sdk.Undo[none]) phases.Diagnostics {
		if a.Path == "" || c.Unknown("path") {
			return missing(c, "path")
		}
		if err := os.Remove(c.Settings.s.abs(a.Path)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return phases.Errorf("Cannot Remove Kubeconfig", "Removing the kubeconfig: %v.", err)
		}
		return nil
	},
}

// missing is the diagnostic of a required attribute left empty.
func missing(c *handle, name string) phases.Diagnostics {
	return phases.Errorf("Missing Required Attribute", "The %q attribute of %s is required.", name, c.Addr)
}

func fetchKubeconfig(ctx context.Context, c *call, path string) phases.Diagnostics {
	ns, d := c.guarded(ctx)
	if d.HasErrors() {
		return d
	}
	n := ns[0]
	kctx, cancel := bounded(ctx)
	defer cancel()
	b, err := n.c.Kubeconfig(n.at(kctx))
	if err != nil {
		c.captureDmesg(ctx, n)
		return phases.Errorf("Cannot Fetch Kubeconfig", "Node %s did not give the kubeconfig: %v. Is the cluster bootstrapped (talos_bootstrap)?", n.name, apiErr("Kubeconfig", err))
	}
	if err := writePrivate(path, b); err != nil {
		return phases.Errorf("Cannot Write Kubeconfig", "Writing the kubeconfig: %v.", err)
	}
	return nil
}

// --- talos_read

var readStep = &sdk.StepType[*Provider, talosschema.ReadAttrs, none, none]{
	Name: Read, Description: talosschema.ReadDoc, CanCheck: true, WaitsOnly: true,
	Unknowns: true, // the plan says what it will read when known
	Plan: func(_ context.Context, c *handle, a talosschema.ReadAttrs, _ *sdk.Prior[none, none]) sdk.Plan[none] {
		if d := checkRead(c, a); d.HasErrors() {
			return sdk.Plan[none]{Diagnostics: d}
		}
		if !known(newCall(c), "path", "expect", "contains") {
			return sdk.Plan[none]{Diff: "read a file through the Talos API (its settings are known after earlier steps run)"}
		}
		what := "exists"
		switch {
		case a.Expect != nil:
			what = fmt.Sprintf("holds exactly %q", strings.TrimSpace(*a.Expect))
		case a.Contains != nil:
			what = fmt.Sprintf("contains %q", *a.Contains)
		}
		return sdk.Plan[none]{Diff: fmt.Sprintf("read %s through the Talos API on %s and check that it %s", a.Path, strings.Join(c.Settings.targets(), ", "), what)}
	},
	Apply: func(ctx context.Context, sc *handle, a talosschema.ReadAttrs, _ none, _ *sdk.Prior[none, none]) sdk.Apply[none, none] {
		if d := checkRead(sc, a); d.HasErrors() {
			return sdk.Apply[none, none]{Diagnostics: d}
		}
		c := newCall(sc)
		if d := c.reachable(ctx); d.HasErrors() {
			return sdk.Apply[none, none]{Outputs: none{}, Diagnostics: d}
		}
		err := c.p.forNodes(ctx, func(n node) error {
			got, err := n.readFile(ctx, a.Path)
			if err != nil {
				c.captureDmesg(ctx, n)
				return err
			}
			text := string(got)
			switch {
			case a.Expect != nil && strings.TrimSpace(text) != strings.TrimSpace(*a.Expect):
				return fmt.Errorf("%s holds %q, not the expected %q", a.Path, clip(strings.TrimSpace(text)), strings.TrimSpace(*a.Expect))
			case a.Contains != nil && !strings.Contains(text, *a.Contains):
				return fmt.Errorf("%s (%d bytes) does not contain %q", a.Path, len(got), *a.Contains)
			}
			c.log.Printf("node %s: %s read through the API (%d bytes) as expected", n.name, a.Path, len(got))
			return nil
		})
		if d := c.unreachable(err); d != nil {
			return sdk.Apply[none, none]{Outputs: none{}, Diagnostics: d}
		}
		if err != nil && a.ErrorMessage != "" {
			return sdk.Apply[none, none]{Outputs: none{}, Diagnostics: phases.Errorf("Read Check Failed", "%s: %s\nWhat was read: %v.", c.addr, a.ErrorMessage, err)}
		}
		if err != nil {
			return sdk.Apply[none, none]{Outputs: none{}, Diagnostics: phases.Errorf("Read Check Failed", "%v.", err)}
		}
		return sdk.Apply[none, none]{Outputs: none{}, Inverse: nothingToUndo()}
	},
}

// checkRead checks the path of a talos_read step, when known.
func checkRead(c *handle, a talosschema.ReadAttrs) phases.Diagnostics {
	switch {
	case c.Unknown("path"):
		return nil
	case a.Path == "":
		return missing(c, "path")
	case !strings.HasPrefix(a.Path, "/"):
		return phases.Errorf("Invalid Attribute Value", "The \"path\" attribute of %s must be an absolute path on the node, such as /var/mnt/data/.probe.", c.Addr)
	}
	return nil
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// --- talos_service_health

var serviceHealthStep = &sdk.StepType[*Provider, talosschema.ServiceHealthAttrs, none, none]{
	Name: ServiceHealth, Description: talosschema.ServiceHealthDoc, CanCheck: true, WaitsOnly: true,
	Unknowns: true, // the plan says what it will check when known
	Plan: func(_ context.Context, c *handle, a talosschema.ServiceHealthAttrs, _ *sdk.Prior[none, none]) sdk.Plan[none] {
		if c.Unknown("services") {
			return sdk.Plan[none]{Diff: "check that Talos services are running and healthy (which ones is known after earlier steps run)"}
		}
		if len(a.Services) == 0 {
			return sdk.Plan[none]{Diagnostics: missing(c, "services")}
		}
		return sdk.Plan[none]{Diff: fmt.Sprintf("check that %s run healthy on %s", strings.Join(a.Services, ", "), strings.Join(c.Settings.targets(), ", "))}
	},
	Apply: func(ctx context.Context, sc *handle, a talosschema.ServiceHealthAttrs, _ none, _ *sdk.Prior[none, none]) sdk.Apply[none, none] {
		if len(a.Services) == 0 {
			return sdk.Apply[none, none]{Diagnostics: missing(sc, "services")}
		}
		if d := serviceHealth(ctx, newCall(sc), a.Services); d.HasErrors() {
			return sdk.Apply[none, none]{Outputs: none{}, Diagnostics: d}
		}
		return sdk.Apply[none, none]{Outputs: none{}, Inverse: nothingToUndo()}
	},
}

// serviceWait is how long talos_service_health waits for its services when
// the step sets no timeout, as talosctl health --wait-timeout: right after
// a bootstrap or a reboot, etcd and the kubelet take a while to start.
const serviceWait = 5 * time.Minute

func serviceHealth(ctx context.Context, c *call, svcs []string) phases.Diagnostics {
	p := c.p
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
	if d := c.unreachable(err); d != nil {
		return d // the node never answered within the wait
	}
	if err != nil {
		return phases.Errorf("Services Not Healthy", "%v.", err)
	}
	return nil
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

var upgradeStep = &sdk.StepType[*Provider, talosschema.UpgradeAttrs, none, upgradeInverse]{
	Name: Upgrade, Description: talosschema.UpgradeDoc, Outputs: talosschema.UpgradeOutputs{},
	Unknowns: true, // the plan says so when the target is not known
	Validate: func(c *handle, a *talosschema.UpgradeAttrs) phases.Diagnostics {
		if a.Version == "" {
			return missing(c, "version")
		}
		a.Version = "v" + strings.TrimPrefix(a.Version, "v")
		return nil
	},
	Read: func(ctx context.Context, sc *handle, a talosschema.UpgradeAttrs, _ *sdk.Prior[none, upgradeInverse]) sdk.Read[upgradeInverse] {
		if !known(newCall(sc), "version", "preserve") {
			return sdk.Read[upgradeInverse]{Observation: providers.Unknown}
		}
		return readUpgrade(ctx, newCall(sc), a.Version)
	},
	Plan: func(_ context.Context, sc *handle, a talosschema.UpgradeAttrs, _ *sdk.Prior[none, upgradeInverse]) sdk.Plan[none] {
		if !known(newCall(sc), "version", "preserve") {
			return sdk.Plan[none]{Diff: "upgrade Talos (the target is known after earlier steps run)"}
		}
		d, diags := planUpgrade(newCall(sc), a.Version, a.Preserve)
		return sdk.Plan[none]{Diff: d, Diagnostics: diags}
	},
	Apply:  applyUpgrade,
	Revert: revertUpgrade,
}

func readUpgrade(ctx context.Context, c *call, target string) sdk.Read[upgradeInverse] {
	ns, err := c.p.nodes(ctx)
	if err != nil {
		return sdk.Read[upgradeInverse]{Diagnostics: phases.FromError("Cannot Reach Talos", err)}
	}
	if d := c.reachable(ctx); d.HasErrors() {
		return sdk.Read[upgradeInverse]{Diagnostics: d}
	}
	for _, n := range ns {
		v, err := n.version(ctx)
		if d := c.unreachable(err); d != nil {
			return sdk.Read[upgradeInverse]{Diagnostics: d}
		}
		if err != nil {
			return sdk.Read[upgradeInverse]{Diagnostics: phases.FromError("Cannot Read Talos Version", err)}
		}
		if !sameVersion(v, target) {
			return sdk.Read[upgradeInverse]{Observation: providers.Absent, Detail: fmt.Sprintf("node %s runs %s, not %s", n.name, v, target)}
		}
	}
	return sdk.Read[upgradeInverse]{Observation: providers.Present, Outputs: talosschema.UpgradeOutputs{Version: target, Image: c.s.installerImage(target)}}
}

func planUpgrade(c *call, target string, preserve bool) (string, phases.Diagnostics) {
	var b strings.Builder
	fmt.Fprintf(&b, "upgrade Talos on %s to %s with %s (preserve = %v), then wait until the node runs %s\n", strings.Join(c.p.targets(), ", "), target, c.s.installerImage(target), preserve, target)
	if !sameVersion(target, c.s.version) {
		fmt.Fprintf(&b, "note: the provider pins version = %q; after the upgrade, pin %q so that later configs are rendered for it\n", c.s.version, target)
	}
	if err := checkCompatibility(c.s.k8sVersion, target); err != nil {
		return "", phases.Errorf("Incompatible Versions", "Talos %s does not support Kubernetes %s: %v. Upgrade Kubernetes first or choose another target.", target, c.s.k8sVersion, err)
	}
	return b.String(), nil
}

func applyUpgrade(ctx context.Context, sc *handle, a talosschema.UpgradeAttrs, _ none, _ *sdk.Prior[none, upgradeInverse]) sdk.Apply[none, upgradeInverse] {
	type result = sdk.Apply[none, upgradeInverse]
	c, target, preserve := newCall(sc), a.Version, a.Preserve
	ns, err := c.p.nodes(ctx)
	if err != nil {
		return result{Diagnostics: phases.FromError("Cannot Reach Talos", err)}
	}
	if d := c.reachable(ctx); d.HasErrors() {
		return result{Diagnostics: d}
	}
	var from string
	for _, n := range ns {
		v, err := n.version(ctx)
		if d := c.unreachable(err); d != nil {
			return result{Diagnostics: d}
		}
		if err != nil {
			return result{Diagnostics: phases.Errorf("Cannot Read Talos Version", "Node %s did not answer its version: %v.", n.name, err)}
		}
		if from == "" {
			from = v
		}
		if d := c.upgrade(ctx, n, v, target, preserve); d.HasErrors() {
			return result{Diagnostics: d}
		}
	}
	out := talosschema.UpgradeOutputs{Version: target, Image: c.s.installerImage(target)}
	if sameVersion(from, target) {
		// A reinstall of the same version: there is nothing to go back to.
		return result{Outputs: out, Inverse: &sdk.Inverse[upgradeInverse]{Description: "nothing to undo: the node ran this version before"}}
	}
	return result{
		Outputs: out,
		Inverse: &sdk.Inverse[upgradeInverse]{Description: fmt.Sprintf("upgrade Talos back to %s (with the installer %s)", from, c.s.installerImage(from)), Data: upgradeInverse{Version: from}},
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

func revertUpgrade(ctx context.Context, sc *handle, a talosschema.UpgradeAttrs, u sdk.Undo[upgradeInverse]) phases.Diagnostics {
	c, inv, preserve := newCall(sc), u.Data, a.Preserve
	if inv == (upgradeInverse{}) {
		return nil
	}
	err := c.p.forNodes(ctx, func(n node) error {
		v, err := n.version(ctx)
		if err != nil {
			return err
		}
		if u.Resumed && sameVersion(v, inv.Version) {
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
		return phases.FromError("Downgrade Failed", err)
	}
	return nil
}
