package helm

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/zclconf/go-cty/cty"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage/driver"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// descPrefix starts the description of every revision migrate makes, so
// that a revision made by someone else is told apart.
const descPrefix = "migrate: "

// Release is the helm_release step type.
const Release = "helm_release"

// relAttrs are the attributes of a helm_release step.
type relAttrs struct {
	Name            string            `cty:"name" doc:"The release name; default the step name."`
	Chart           string            `cty:"chart" required:"true" doc:"The chart: a directory or packaged .tgz relative to the runbook, or a repository URL or oci:// reference."`
	Version         string            `cty:"version" doc:"The chart version required; a local chart of another version is refused. For a remote chart, a version or a constraint (\"^1.2\"): the highest version matching it, or the highest of all when unset, as helm install picks; the plan records what it resolved to."`
	Digest          string            `cty:"digest" doc:"The digest (\"sha256:…\") a remote chart's version must resolve to: an OCI chart's manifest digest (as helm push prints it), a repository chart's archive digest (as its index.yaml lists it). Plan and apply refuse another, naming both."`
	Username        string            `cty:"username" doc:"The user name for the chart's registry or repository (helm --username); with password."`
	Password        string            `cty:"password" sensitive:"true" doc:"The password for the chart's registry or repository (helm --password); redacted everywhere."`
	RegistryConfig  string            `cty:"registry_config" doc:"A registry config file (Docker's config.json format) with the OCI registry's credentials, relative to the runbook (helm --registry-config); default Helm's, then Docker's."`
	CAFile          string            `cty:"ca_file" doc:"A PEM file of CA certificates the chart's registry or repository is verified against, besides the system's (helm --ca-file)."`
	PlainHTTP       *bool             `cty:"plain_http" doc:"Speak plain HTTP, not HTTPS, to the chart's OCI registry (helm --plain-http); by default only to a registry on a loopback address (127.0.0.1, ::1, localhost) and without ca_file."`
	Namespace       string            `cty:"namespace" doc:"The release namespace, \"default\" by default."`
	Values          cty.Value         `cty:"values" doc:"Values as an HCL object, merged over values_files."`
	ValuesFiles     []string          `cty:"values_files" doc:"Values files (YAML), relative to the runbook, merged in order; an age-encrypted one (named .age) is decrypted in memory and its values are secret."`
	SetSensitive    map[string]string `cty:"set_sensitive" sensitive:"true" doc:"Values by dot path (\"db.password\"), set last and redacted everywhere."`
	CreateNamespace bool              `cty:"create_namespace" doc:"Create the namespace when it does not exist."`
	Atomic          bool              `cty:"atomic" doc:"Roll back (or uninstall) when the install or upgrade fails or does not become ready."`
	Wait            bool              `cty:"wait" doc:"Wait until the release's workloads are ready, as helm --wait does (true by default): Deployments, StatefulSets and DaemonSets with their pods Ready, claims Bound; a pod that crash-loops, cannot pull its image or cannot be configured fails the step at once, naming it with its restarts and last log lines. false returns once the objects are applied."`
	WaitForJobs     bool              `cty:"wait_for_jobs" doc:"Wait also until the release's Jobs complete (helm --wait-for-jobs)."`
	Timeout         string            `cty:"timeout" doc:"How long the wait may take, \"5m\" by default (Helm's)."`
	Kubeconfig      string            `cty:"kubeconfig" doc:"Path to a kubeconfig for this step, relative to the runbook (such as talos_kubeconfig.admin.path); default the provider's."`
}

// releaseOut are the outputs of a helm_release step.
type releaseOut struct {
	Name         string `cty:"name"`
	Namespace    string `cty:"namespace"`
	Revision     int    `cty:"revision"`
	Status       string `cty:"status"`
	ChartVersion string `cty:"chart_version"`
}

var releaseStep = &sdk.StepType[*Provider, relAttrs, releasePrivate, releaseRevert]{
	Name:        Release,
	Description: "Installs or upgrades a Helm release (real release records, as helm list shows). The plan shows the manifest diff against the deployed release and fails when a pod template violates the PodSecurity level of its namespace; releases stuck in pending-* are recovered. Rollback returns to the previous revision, or uninstalls what this step installed.",
	Rollback:    "Rolls back to the previous revision, or uninstalls what this step installed; the rollback plan says first when the release was changed outside migrate since.",
	Outputs:     releaseOut{},
	// The plan names what it knows of a release not known yet.
	Unknowns: true,
	Validate: validateRelease,
	Read:     readRelease,
	Plan:     planRelease,
	Apply:    applyRelease,
	Revert:   revertRelease,
	// Its chart and values files join its input hash (digest.go).
	Digest: digestRelease,
}

// releasePrivate is kept in state (Apply) or passed from Plan to Apply.
type releasePrivate struct {
	// Revision is the revision Apply deployed.
	Revision int `json:"revision,omitempty"`
	// Base is the newest revision the plan was made against (0: none);
	// nil when Apply runs without a plan.
	Base *int `json:"base,omitempty"`
	// ChartDigest is the digest a remote chart resolved to at plan:
	// apply installs that chart or none.
	ChartDigest string `json:"chart_digest,omitempty"`
}

// releaseAttrs are the attributes a release's plan waits for.
var releaseAttrs = []string{"name", "chart", "version", "digest", "username", "password", "registry_config", "ca_file", "plain_http",
	"namespace", "values", "values_files", "set_sensitive", "create_namespace", "atomic", "wait", "wait_for_jobs", "timeout"}

// releaseRevert is a helm_release step's revert data.
type releaseRevert struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	// Uninstall: this step installed the release.
	Uninstall bool `json:"uninstall,omitempty"`
	// Version to roll back to otherwise.
	Version int `json:"version,omitempty"`
}

// history is what the cluster holds of a release.
type history struct {
	all      []*release.Release // by revision, oldest first
	last     *release.Release   // newest revision, nil when none
	deployed *release.Release   // newest deployed revision
}

func (h history) exists() bool {
	return h.last != nil && h.last.Info.Status != release.StatusUninstalled
}

// stuck says the newest revision is pending: a client died mid-operation.
func (h history) stuck() bool { return h.last != nil && h.last.Info.Status.IsPending() }

// base is the revision the cluster runs and diffs start from: the newest
// deployed, else the newest (failed) one.
func (h history) base() *release.Release {
	if h.deployed != nil {
		return h.deployed
	}
	if h.stuck() {
		return h.rollbackTarget()
	}
	if h.exists() {
		return h.last
	}
	return nil
}

// openRelease is the Helm configuration of a release's namespace (log
// gets Helm's messages, nil none) and the release's history.
func openRelease(c *call, cl *cluster, ns, name string, log func(string, ...any)) (*action.Configuration, history, phases.Diagnostics) {
	cfg, err := cl.helmConfig(ns, log)
	if err != nil {
		return nil, history{}, phases.FromError("Cannot Reach Kubernetes", err)
	}
	h, err := readHistory(cfg, name)
	if err != nil {
		return nil, history{}, apiErr(c, cl, err, "Cannot Read Release", "%s: reading the history of release %s: %v.", c.Addr, name, err)
	}
	return cfg, h, nil
}

func readHistory(cfg *action.Configuration, name string) (history, error) {
	all, err := cfg.Releases.History(name)
	if errors.Is(err, driver.ErrReleaseNotFound) {
		return history{}, nil
	}
	if err != nil {
		return history{}, err
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Version < all[j].Version })
	h := history{all: all}
	if len(all) > 0 {
		h.last = all[len(all)-1]
	}
	for _, r := range all {
		if r.Info.Status == release.StatusDeployed {
			h.deployed = r
		}
	}
	return h, nil
}

// rollbackTarget is the revision a stuck release goes back to: the last
// deployed one, else the newest older revision that is not pending (a
// superseded or failed one); nil when there is none.
func (h history) rollbackTarget() *release.Release {
	if h.deployed != nil {
		return h.deployed
	}
	for i := len(h.all) - 2; i >= 0; i-- {
		if r := h.all[i]; !r.Info.Status.IsPending() && r.Info.Status != release.StatusUninstalled {
			return r
		}
	}
	return nil
}

// recovery says what apply will do first about a stuck release.
func (h history) recovery() string {
	if !h.stuck() {
		return ""
	}
	t := h.rollbackTarget()
	switch {
	case t == nil:
		return "uninstall it (no earlier revision to go back to), then install"
	case t.Info.Status == release.StatusDeployed:
		return fmt.Sprintf("roll it back to revision %d (the last deployed), then upgrade", t.Version)
	}
	return fmt.Sprintf("roll it back to revision %d (%s; none is deployed), then upgrade", t.Version, t.Info.Status)
}

// rendered is a release rendered against the cluster.
type rendered struct {
	chart   *chart.Chart
	values  map[string]any
	objects []*object
	// secretPaths are the values from encrypted values files.
	secretPaths [][]string
	// source is what a remote chart resolved to.
	source source
}

// render renders the chart as the install or upgrade would (a server-side
// dry run: real capabilities, lookups, and the ownership check of an
// install) and parses the result. planned is the digest the plan's
// remote chart resolved to ("" none).
func (p *Provider) render(ctx context.Context, c *call, cl *cluster, cfg *action.Configuration, st relAttrs, h history, planned string) (*rendered, phases.Diagnostics) {
	ch, src, err := p.loadChart(st, planned)
	if err != nil {
		return nil, chartDiags(c, err)
	}
	vals, secretPaths, err := p.mergedValues(c, st)
	if err != nil {
		return nil, phases.Errorf("Invalid Values", "%s: %v.", c.Addr, err)
	}
	inst := action.NewInstall(cfg)
	inst.DryRun = true
	inst.DryRunOption = "server"
	inst.ReleaseName = st.Name
	inst.Namespace = st.Namespace
	inst.IsUpgrade = h.exists()
	rel, err := inst.RunWithContext(ctx, ch, vals)
	if err != nil {
		return nil, phases.Errorf("Cannot Render Release", "Rendering release %s of %s: %v.", st.Name, c.Addr, err)
	}
	objs, err := p.parseManifest(manifestOf(rel), st.Namespace, cl.mapper)
	if err != nil {
		return nil, phases.Errorf("Cannot Parse Manifest", "The rendered manifest of release %s: %v.", st.Name, err)
	}
	return &rendered{chart: ch, values: vals, objects: objs, secretPaths: secretPaths, source: src}, nil
}

// renderOffline renders the chart client-side, as helm template does: no
// cluster, Helm's default capabilities and API versions, no lookups. It is
// what the plan checks when the cluster does not exist yet.
func (p *Provider) renderOffline(ctx context.Context, c *call, st relAttrs) (*rendered, phases.Diagnostics) {
	ch, src, err := p.loadChart(st, "")
	if err != nil {
		return nil, chartDiags(c, err)
	}
	vals, _, err := p.mergedValues(c, st)
	if err != nil {
		return nil, phases.Errorf("Invalid Values", "%s: %v.", c.Addr, err)
	}
	inst := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	inst.ClientOnly = true
	inst.DryRun = true
	inst.Replace = true // no release history to check: there is no cluster
	inst.ReleaseName = st.Name
	inst.Namespace = st.Namespace
	rel, err := inst.RunWithContext(ctx, ch, vals)
	if err != nil {
		return nil, phases.Errorf("Cannot Render Release", "Rendering release %s of %s client-side: %v.", st.Name, c.Addr, err)
	}
	objs, err := p.parseManifest(manifestOf(rel), st.Namespace, nil)
	if err != nil {
		return nil, phases.Errorf("Cannot Parse Manifest", "The rendered manifest of release %s: %v.", st.Name, err)
	}
	return &rendered{chart: ch, values: vals, objects: objs, source: src}, nil
}

// manifestOf is a release's manifest with its hooks.
func manifestOf(rel *release.Release) string {
	var b strings.Builder
	b.WriteString(rel.Manifest)
	for _, h := range rel.Hooks {
		b.WriteString("\n---\n# Source: ")
		b.WriteString(h.Path)
		b.WriteString("\n")
		b.WriteString(h.Manifest)
	}
	return b.String()
}

func chartName(ch *chart.Chart) string {
	if ch == nil || ch.Metadata == nil {
		return "?"
	}
	return ch.Metadata.Name + "-" + ch.Metadata.Version
}

type relPlan = sdk.Plan[releasePrivate]

func planRelease(ctx context.Context, c *call, st relAttrs, _ *sdk.Prior[releasePrivate, releaseRevert]) relPlan {
	if !known(c, releaseAttrs...) {
		what := "release"
		if known(c, "name", "namespace") {
			what = fmt.Sprintf("release %s/%s", st.Namespace, st.Name)
		}
		return relPlan{Diff: what + ": values known after earlier steps apply; rendered, diffed and checked against PodSecurity at apply\n"}
	}
	p := c.Settings
	var b strings.Builder
	cl, diags := p.cluster(ctx, c, st.Kubeconfig)
	if cl == nil {
		if !isNoKubeconfig(diags) {
			return relPlan{Diagnostics: diags}
		}
		return p.planOffline(ctx, c, st)
	}
	cfg, h, diags := openRelease(c, cl, st.Namespace, st.Name, nil)
	if diags.HasErrors() {
		return relPlan{Diagnostics: diags}
	}
	r, diags := p.render(ctx, c, cl, cfg, st, h, "")
	if diags.HasErrors() {
		return relPlan{Diagnostics: diags}
	}
	lines, diags := p.preflight(ctx, cl, st, r.objects, true)

	base := h.base()
	switch {
	case !h.exists():
		fmt.Fprintf(&b, "release %s/%s: install chart %s\n", st.Namespace, st.Name, chartName(r.chart))
	case base != nil:
		fmt.Fprintf(&b, "release %s/%s: upgrade revision %d (%s, %s) to chart %s\n", st.Namespace, st.Name, base.Version, chartName(base.Chart), base.Info.Status, chartName(r.chart))
	default:
		fmt.Fprintf(&b, "release %s/%s: chart %s\n", st.Namespace, st.Name, chartName(r.chart))
	}
	writeSource(&b, st, r.source)
	if h.stuck() {
		fmt.Fprintf(&b, "! release %s is stuck in %s at revision %d (a client died mid-operation): apply will first %s\n", st.Name, h.last.Info.Status, h.last.Version, h.recovery())
	}
	if h.last != nil && h.last.Info.Status == release.StatusFailed {
		fmt.Fprintf(&b, "! revision %d failed: apply upgrades it\n", h.last.Version)
	}
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	b.WriteString(waitWhat(st) + "\n")
	for _, k := range slices.Sorted(maps.Keys(st.SetSensitive)) {
		fmt.Fprintf(&b, "set_sensitive %s = %s\n", k, phases.Redacted)
	}
	var old []*object
	if base != nil {
		scrubOldValues(c, st, base, r.secretPaths)
		var err error
		old, err = p.parseManifest(manifestOf(base), st.Namespace, cl.mapper)
		if err != nil {
			return relPlan{Diagnostics: phases.Errorf("Cannot Parse Manifest", "The manifest of revision %d of release %s: %v.", base.Version, st.Name, err)}
		}
	}
	d := diffObjects(old, r.objects)
	fmt.Fprintf(&b, "objects: %d to add, %d to change, %d to remove, %d unchanged\n", d.added, d.changed, d.removed, d.same)
	b.WriteString(d.text.String())

	priv := releasePrivate{Base: new(int), ChartDigest: r.source.digest}
	if h.last != nil {
		*priv.Base = h.last.Version
	}
	return relPlan{Diff: b.String(), Private: priv, Diagnostics: diags}
}

// planOffline plans a release whose cluster does not exist yet (its
// kubeconfig is written by an earlier step): what could disqualify it is
// tested now, before anything is applied. The chart is rendered
// client-side and its pod templates checked against the levels the
// namespaces will have; only the live diff waits for the cluster. The
// diff starts with the SDK's deferred marker: run plans the step again
// against the cluster before applying it, and that fresh diff (an upgrade
// where a release already exists) may differ from this one.
func (p *Provider) planOffline(ctx context.Context, c *call, st relAttrs) relPlan {
	r, diags := p.renderOffline(ctx, c, st)
	if diags.HasErrors() {
		return relPlan{Diagnostics: diags}
	}
	lines, diags := p.preflight(ctx, nil, st, r.objects, true)
	if diags.HasErrors() {
		return relPlan{Diagnostics: diags}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: the live diff; the cluster cannot be reached yet (the kubeconfig is written by an earlier step), so the release was rendered client-side and checked against PodSecurity now\n", sdk.UnknownText)
	fmt.Fprintf(&b, "release %s/%s: install chart %s (live diff deferred until the cluster exists)\n", st.Namespace, st.Name, chartName(r.chart))
	writeSource(&b, st, r.source)
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	b.WriteString(waitWhat(st) + "\n")
	for _, k := range slices.Sorted(maps.Keys(st.SetSensitive)) {
		fmt.Fprintf(&b, "set_sensitive %s = %s\n", k, phases.Redacted)
	}
	d := diffObjects(nil, r.objects)
	fmt.Fprintf(&b, "objects: %d rendered, to add unless the cluster already has them\n", d.added)
	b.WriteString(d.text.String())
	return relPlan{Diff: b.String(), Private: releasePrivate{ChartDigest: r.source.digest}, Diagnostics: diags}
}

// writeSource says what a remote chart resolved to, which apply holds to.
func writeSource(b *strings.Builder, st relAttrs, src source) {
	switch {
	case src.digest == "":
	case st.Digest != "":
		fmt.Fprintf(b, "chart %s: version %s, digest %s (pinned)\n", src.ref, src.version, src.digest)
	default:
		fmt.Fprintf(b, "chart %s: version %s, digest %s (resolved now; apply refuses another, pin it with digest)\n", src.ref, src.version, src.digest)
	}
}

type relApply = sdk.Apply[releasePrivate, releaseRevert]

func applyRelease(ctx context.Context, c *call, st relAttrs, planned releasePrivate, prior *sdk.Prior[releasePrivate, releaseRevert]) relApply {
	p := c.Settings
	cl, diags := p.cluster(ctx, c, st.Kubeconfig)
	if diags.HasErrors() {
		return relApply{Diagnostics: diags}
	}
	cfg, h, diags := openRelease(c, cl, st.Namespace, st.Name, func(format string, args ...any) {
		if strings.HasPrefix(format, "creating") || strings.HasPrefix(format, "Created") || strings.HasPrefix(format, "Deleting") {
			c.Log.Printf(format, args...)
		}
	})
	if diags.HasErrors() {
		return relApply{Diagnostics: diags}
	}
	// The version token: a revision made by someone else since the plan.
	if planned.Base != nil && h.last != nil && h.last.Version != *planned.Base &&
		!strings.HasPrefix(h.last.Info.Description, descPrefix) {
		return relApply{Diagnostics: phases.Errorf("Release Changed Since Plan",
			"Release %s is at revision %d (%s: %q), but the plan was made against revision %d. Plan again to see what would change.",
			st.Name, h.last.Version, h.last.Info.Status, h.last.Info.Description, *planned.Base)}
	}
	// An interrupted client left the release pending: recover explicitly.
	if h.stuck() {
		if h, diags = recoverStuck(c, cl, cfg, st, h); diags.HasErrors() {
			return relApply{Diagnostics: diags}
		}
	}
	if err := ctx.Err(); err != nil {
		return relApply{Diagnostics: sdk.Interrupted(c.Addr, err)}
	}

	// Render and check again: the plan may be old, the namespace changed;
	// a remote chart is the one the plan resolved, or none.
	r, diags := p.render(ctx, c, cl, cfg, st, h, planned.ChartDigest)
	if diags.HasErrors() {
		return relApply{Diagnostics: diags}
	}
	if _, diags := p.preflight(ctx, cl, st, r.objects, false); diags.HasErrors() {
		return relApply{Diagnostics: diags}
	}

	rel, inv, err := installOrUpgrade(ctx, c, cfg, st, h, r)
	revertOf := releaseRevertOf(inv)
	if prior != nil && prior.Revert != nil && prior.Revert.Data.Name == st.Name && prior.Revert.Data.Namespace == st.Namespace {
		// Applied again: undoing goes back to before the first apply.
		revertOf = prior.Revert
	}
	if err != nil {
		return failedRelease(c, cfg, st, revertOf, phases.Errorf("Release Failed", "Release %s/%s: %v.", st.Namespace, st.Name, err))
	}
	if st.Wait || st.Atomic {
		diags, stopped := waitRelease(ctx, c, cl, cfg, st, rel)
		switch {
		case stopped:
			return relApply{Revert: revertOf, Stopped: true, Diagnostics: diags}
		case diags.HasErrors():
			if err := markFailed(cfg, rel, diags.Err().Error()); err != nil {
				c.Log.Printf("revision %d of release %s/%s could not be marked failed: %v", rel.Version, st.Namespace, st.Name, err)
			}
			return failedRelease(c, cfg, st, revertOf, diags)
		}
	}
	c.Log.Printf("release %s/%s: revision %d %s", st.Namespace, st.Name, rel.Version, rel.Info.Status)
	return relApply{Outputs: releaseOutputs(rel), Private: releasePrivate{Revision: rel.Version}, Revert: revertOf}
}

// recoverStuck recovers a release an interrupted client left pending:
// rolled back to its last deployed revision (the dead client's marked
// failed), or uninstalled when none was. It returns the history after.
func recoverStuck(c *call, cl *cluster, cfg *action.Configuration, st relAttrs, h history) (history, phases.Diagnostics) {
	c.Log.Printf("release %s is stuck in %s at revision %d: %s", st.Name, h.last.Info.Status, h.last.Version, h.recovery())
	if target := h.rollbackTarget(); target == nil {
		un := action.NewUninstall(cfg)
		un.Timeout = timeout(st)
		if _, err := un.Run(st.Name); err != nil {
			return h, phases.Errorf("Cannot Recover Release", "Uninstalling release %s, stuck in %s: %v.", st.Name, h.last.Info.Status, err)
		}
	} else {
		// The dead client's revision stays in the history as failed,
		// not pending for ever.
		stuck := h.last
		stuck.Info.Status = release.StatusFailed
		stuck.Info.Description = fmt.Sprintf("%sinterrupted mid-operation; recovered by a rollback to revision %d", descPrefix, target.Version)
		if err := cfg.Releases.Update(stuck); err != nil {
			return h, phases.Errorf("Cannot Recover Release", "Marking revision %d of release %s failed: %v.", stuck.Version, st.Name, err)
		}
		rb := action.NewRollback(cfg)
		rb.Version = target.Version
		rb.Timeout = timeout(st)
		rb.MaxHistory = maxHistory
		if err := rb.Run(st.Name); err != nil {
			return h, phases.Errorf("Cannot Recover Release", "Rolling release %s, stuck in %s, back to revision %d: %v.", st.Name, h.last.Info.Status, target.Version, err)
		}
	}
	h, err := readHistory(cfg, st.Name)
	if err != nil {
		return h, apiErr(c, cl, err, "Cannot Read Release", "%s: reading the history of release %s: %v.", c.Addr, st.Name, err)
	}
	return h, nil
}

// installOrUpgrade installs the rendered release r, or upgrades it when
// its history h has a revision; inv is what undoes it.
func installOrUpgrade(ctx context.Context, c *call, cfg *action.Configuration, st relAttrs, h history, r *rendered) (rel *release.Release, inv releaseRevert, err error) {
	inv = releaseRevert{Name: st.Name, Namespace: st.Namespace}
	desc := descPrefix + c.Addr.String()
	if !h.exists() {
		inst := action.NewInstall(cfg)
		inst.ReleaseName = st.Name
		inst.Namespace = st.Namespace
		inst.CreateNamespace = st.CreateNamespace
		// Helm neither waits nor undoes: waitRelease waits, and
		// failedRelease undoes when atomic.
		inst.Timeout = timeout(st)
		inst.Description = desc
		c.Log.Printf("installing release %s/%s (chart %s%s)", st.Namespace, st.Name, chartName(r.chart), r.source.from())
		inv.Uninstall = true
		rel, err = inst.RunWithContext(ctx, r.chart, r.values)
	} else {
		prev := h.base()
		up := action.NewUpgrade(cfg)
		up.Namespace = st.Namespace
		up.Timeout = timeout(st)
		up.ResetValues = true
		up.MaxHistory = maxHistory
		up.Description = desc
		if prev != nil {
			inv.Version = prev.Version
			c.Log.Printf("upgrading release %s/%s from revision %d (%s) to chart %s%s", st.Namespace, st.Name, prev.Version, prev.Info.Status, chartName(r.chart), r.source.from())
		}
		rel, err = up.RunWithContext(ctx, st.Name, r.chart, r.values)
	}
	return rel, inv, err
}

// failedRelease is the answer of an install or upgrade that failed or
// did not become ready: the revert of what is there to undo, done at once
// when the step is atomic.
func failedRelease(c *call, cfg *action.Configuration, st relAttrs, revertOf *sdk.RevertData[releaseRevert], diags phases.Diagnostics) relApply {
	after, err := readHistory(cfg, st.Name)
	if err != nil || !after.exists() {
		return relApply{Diagnostics: diags}
	}
	if !st.Atomic {
		return relApply{Diagnostics: diags, Revert: revertOf} // something is there to undo
	}
	c.Log.Printf("atomic: %s", revertOf.Description)
	if d := undoRelease(c, cfg, revertOf.Data); d.HasErrors() {
		return relApply{Diagnostics: append(diags, d...), Revert: revertOf}
	}
	undone := slices.Clone(diags)
	undone[0].Detail += " Being atomic, the step undid it: " + revertOf.Description + "."
	return relApply{Diagnostics: undone}
}

// maxHistory is how many revisions a release keeps, as the helm CLI does.
const maxHistory = 10

func releaseOutputs(rel *release.Release) releaseOut {
	return releaseOut{Name: rel.Name, Namespace: rel.Namespace, Revision: rel.Version, Status: rel.Info.Status.String(), ChartVersion: chartVersion(rel.Chart)}
}

func chartVersion(ch *chart.Chart) string {
	if ch == nil || ch.Metadata == nil {
		return ""
	}
	return ch.Metadata.Version
}

func releaseRevertOf(inv releaseRevert) *sdk.RevertData[releaseRevert] {
	desc := fmt.Sprintf("roll release %s/%s back to revision %d", inv.Namespace, inv.Name, inv.Version)
	if inv.Uninstall {
		desc = fmt.Sprintf("uninstall release %s/%s (this step installed it)", inv.Namespace, inv.Name)
	}
	return &sdk.RevertData[releaseRevert]{Description: desc, Data: inv}
}

type relRead = sdk.Read[releaseRevert]

func readRelease(ctx context.Context, c *call, st relAttrs, prior *sdk.Prior[releasePrivate, releaseRevert]) relRead {
	if !known(c, append(releaseAttrs, "kubeconfig")...) {
		return relRead{Observation: providers.Unknown}
	}
	p := c.Settings
	cl, diags := p.cluster(ctx, c, st.Kubeconfig)
	if diags.HasErrors() {
		return relRead{Diagnostics: diags}
	}
	_, h, diags := openRelease(c, cl, st.Namespace, st.Name, nil)
	if diags.HasErrors() {
		return relRead{Diagnostics: diags}
	}
	if !h.exists() {
		return relRead{Observation: providers.Absent, Detail: fmt.Sprintf("release %s/%s is not installed", st.Namespace, st.Name)}
	}
	last := h.last
	if h.stuck() {
		return relRead{Observation: providers.Drifted, Detail: fmt.Sprintf("release %s is stuck in %s at revision %d (a client died mid-operation); apply will %s", st.Name, last.Info.Status, last.Version, h.recovery())}
	}
	r := relRead{Observation: providers.Present, Outputs: releaseOutputs(last)}
	if prior != nil && prior.Private.Revision != 0 && prior.Private.Revision != last.Version {
		priv := prior.Private
		r.Observation = providers.Drifted
		r.Detail = fmt.Sprintf("release %s/%s is at revision %d (%s, %q), migrate made revision %d: %s", st.Namespace, st.Name, last.Version, last.Info.Status, last.Info.Description, priv.Revision, madeOutside(priv.Revision, last.Version))
	} else if last.Info.Status != release.StatusDeployed {
		r.Observation = providers.Drifted
		r.Detail = fmt.Sprintf("revision %d of release %s is %s", last.Version, st.Name, last.Info.Status)
	}
	if prior == nil && strings.HasPrefix(last.Info.Description, descPrefix) {
		// Adopted on resume: undo what an interrupted apply did.
		inv := releaseRevert{Name: st.Name, Namespace: st.Namespace, Uninstall: len(h.all) == 1}
		if !inv.Uninstall {
			inv.Version = h.all[len(h.all)-2].Version
		}
		r.Revert = releaseRevertOf(inv)
	}
	return r
}

// madeOutside names the revisions after the one migrate made, which a
// rollback of the step discards.
func madeOutside(made, now int) string {
	switch {
	case now < made:
		return "it was rolled back outside migrate"
	case now == made+1:
		return fmt.Sprintf("revision %d was made outside migrate", now)
	}
	return fmt.Sprintf("revisions %d–%d were made outside migrate", made+1, now)
}

func revertRelease(ctx context.Context, c *call, a relAttrs, u sdk.Applied[releaseRevert]) phases.Diagnostics {
	inv := u.Data
	inv.Name = kept(inv.Name, a.Name, c.Addr.Name)
	inv.Namespace = kept(inv.Namespace, a.Namespace, "default")
	if inv.Name == "" {
		return phases.Errorf("Invalid Revert", "The recorded revert data of %s names no release.", c.Addr)
	}
	p := c.Settings
	cl, diags := p.cluster(ctx, c, a.Kubeconfig)
	if diags.HasErrors() {
		return diags
	}
	cfg, h, diags := openRelease(c, cl, inv.Namespace, inv.Name, nil)
	if diags.HasErrors() {
		return diags
	}
	if !h.exists() {
		c.Log.Printf("release %s/%s is not installed: nothing to undo", inv.Namespace, inv.Name)
		return nil
	}
	return undoRelease(c, cfg, inv)
}

// undoRelease uninstalls a release this step installed, or rolls it back
// to the revision before.
func undoRelease(c *call, cfg *action.Configuration, inv releaseRevert) phases.Diagnostics {
	if inv.Uninstall {
		un := action.NewUninstall(cfg)
		un.Timeout = defaultTimeout
		if _, err := un.Run(inv.Name); err != nil && !errors.Is(err, driver.ErrReleaseNotFound) {
			return phases.Errorf("Cannot Uninstall Release", "Uninstalling release %s/%s: %v.", inv.Namespace, inv.Name, err)
		}
		c.Log.Printf("uninstalled release %s/%s", inv.Namespace, inv.Name)
		return nil
	}
	rb := action.NewRollback(cfg)
	rb.Version = inv.Version
	rb.Timeout = defaultTimeout
	rb.MaxHistory = maxHistory
	if err := rb.Run(inv.Name); err != nil {
		return phases.Errorf("Cannot Roll Back Release", "Rolling release %s/%s back to revision %d: %v.", inv.Namespace, inv.Name, inv.Version, err)
	}
	c.Log.Printf("rolled release %s/%s back to revision %d", inv.Namespace, inv.Name, inv.Version)
	return nil
}

const defaultTimeout = 5 * time.Minute

// scrubOldValues adds the values that the deployed revision holds at the
// step's set_sensitive paths and at the paths of its encrypted values
// files' values to the scrubber: the old manifest shows them.
func scrubOldValues(c *call, st relAttrs, base *release.Release, secretPaths [][]string) {
	paths := secretPaths
	for path := range st.SetSensitive {
		paths = append(paths, splitPath(path))
	}
	for _, path := range paths {
		var cur any = base.Config
		for _, k := range path {
			m, ok := cur.(map[string]any)
			if !ok {
				cur = nil
				break
			}
			cur = m[k]
		}
		if cur != nil {
			if _, isMap := cur.(map[string]any); !isMap {
				c.Scrub.Add(fmt.Sprint(cur))
			}
		}
	}
}
