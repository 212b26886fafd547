package helm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
)

// descPrefix starts the description of every revision migrate makes, so
// that a revision made by someone else is told apart.
const descPrefix = "migrate: "

// releasePrivate is kept in state (Apply) or passed from Plan to Apply.
type releasePrivate struct {
	// Revision is the revision Apply deployed.
	Revision int `json:"revision,omitempty"`
	// Base is the newest revision the plan was made against (0: none).
	Base int `json:"base"`
}

// releaseInverse is a helm_release step's inverse data.
type releaseInverse struct {
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
}

// render renders the chart as the install or upgrade would (a server-side
// dry run: real capabilities, lookups, and the ownership check of an
// install) and parses the result.
func (p *Provider) render(ctx context.Context, c *call, cl *cluster, cfg *action.Configuration, st *releaseStep, h history) (*rendered, phases.Diagnostics) {
	ch, err := c.loadChart(st)
	if err != nil {
		return nil, phases.Errorf("Cannot Load Chart", "%s: %v.", c.what, err)
	}
	vals, err := c.mergedValues(st)
	if err != nil {
		return nil, phases.Errorf("Invalid Values", "%s: %v.", c.what, err)
	}
	inst := action.NewInstall(cfg)
	inst.DryRun = true
	inst.DryRunOption = "server"
	inst.ReleaseName = st.name
	inst.Namespace = st.namespace
	inst.IsUpgrade = h.exists()
	rel, err := inst.RunWithContext(ctx, ch, vals)
	if err != nil {
		return nil, phases.Errorf("Cannot Render Release", "Rendering release %s of %s: %v.", st.name, c.what, err)
	}
	objs, err := p.parseManifest(manifestOf(rel), st.namespace, cl.mapper)
	if err != nil {
		return nil, phases.Errorf("Cannot Parse Manifest", "The rendered manifest of release %s: %v.", st.name, err)
	}
	return &rendered{chart: ch, values: vals, objects: objs}, nil
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

func (p *Provider) planRelease(ctx context.Context, c *call, req providers.PlanRequest) providers.PlanResponse {
	st, known := c.decodeRelease()
	if c.diags.HasErrors() {
		return providers.PlanResponse{}
	}
	if st == nil || !known {
		what := "release"
		if st != nil && st.name != "" {
			what = fmt.Sprintf("release %s/%s", st.namespace, st.name)
		}
		return providers.PlanResponse{Diff: what + ": values known after earlier steps apply; rendered, diffed and checked against PodSecurity at apply\n"}
	}
	var b strings.Builder
	cl, _, diags := p.cluster(c)
	if cl == nil {
		if diags.HasErrors() && !isNoKubeconfig(diags) {
			return providers.PlanResponse{Diagnostics: diags}
		}
		fmt.Fprintf(&b, "release %s/%s: chart %s; the cluster cannot be reached yet (the kubeconfig is written by an earlier step): rendered, diffed and checked against PodSecurity at apply\n", st.namespace, st.name, st.chart)
		return providers.PlanResponse{Diff: b.String()}
	}
	cfg, err := cl.helmConfig(st.namespace, nil)
	if err != nil {
		return providers.PlanResponse{Diagnostics: phases.FromError("Cannot Reach Kubernetes", err)}
	}
	h, err := readHistory(cfg, st.name)
	if err != nil {
		return providers.PlanResponse{Diagnostics: phases.Errorf("Cannot Read Release", "Reading the history of release %s: %v.", st.name, err)}
	}
	r, diags := p.render(ctx, c, cl, cfg, st, h)
	if diags.HasErrors() {
		return providers.PlanResponse{Diagnostics: diags}
	}
	lines, diags := p.preflight(ctx, cl, st, r.objects)

	base := h.base()
	switch {
	case !h.exists():
		fmt.Fprintf(&b, "release %s/%s: install chart %s\n", st.namespace, st.name, chartName(r.chart))
	case base != nil:
		fmt.Fprintf(&b, "release %s/%s: upgrade revision %d (%s, %s) to chart %s\n", st.namespace, st.name, base.Version, chartName(base.Chart), base.Info.Status, chartName(r.chart))
	default:
		fmt.Fprintf(&b, "release %s/%s: chart %s\n", st.namespace, st.name, chartName(r.chart))
	}
	if h.stuck() {
		fmt.Fprintf(&b, "! release %s is stuck in %s at revision %d (a client died mid-operation): apply will first %s\n", st.name, h.last.Info.Status, h.last.Version, h.recovery())
	}
	if h.last != nil && h.last.Info.Status == release.StatusFailed {
		fmt.Fprintf(&b, "! revision %d failed: apply upgrades it\n", h.last.Version)
	}
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	for _, k := range sortedKeys(st.sensitive) {
		fmt.Fprintf(&b, "set_sensitive %s = %s\n", k, phases.Redacted)
	}
	var old []*object
	if base != nil {
		c.scrubOldValues(st, base)
		old, err = p.parseManifest(manifestOf(base), st.namespace, cl.mapper)
		if err != nil {
			return providers.PlanResponse{Diagnostics: phases.Errorf("Cannot Parse Manifest", "The manifest of revision %d of release %s: %v.", base.Version, st.name, err)}
		}
	}
	d := diffObjects(old, r.objects)
	fmt.Fprintf(&b, "objects: %d to add, %d to change, %d to remove, %d unchanged\n", d.added, d.changed, d.removed, d.same)
	b.WriteString(d.text.String())

	priv := releasePrivate{}
	if h.last != nil {
		priv.Base = h.last.Version
	}
	private, _ := json.Marshal(priv)
	return providers.PlanResponse{Diff: b.String(), Private: private, Diagnostics: diags}
}

func (p *Provider) applyRelease(ctx context.Context, c *call, req providers.ApplyRequest) providers.ApplyResponse {
	st, known := c.decodeRelease()
	if c.diags.HasErrors() {
		return providers.ApplyResponse{}
	}
	if !known {
		return providers.ApplyResponse{Diagnostics: phases.Errorf("Unknown Values", "%s has values that are not known at apply time.", c.what)}
	}
	cl, _, diags := p.cluster(c)
	if diags.HasErrors() {
		return providers.ApplyResponse{Diagnostics: diags}
	}
	cfg, err := cl.helmConfig(st.namespace, func(format string, args ...any) {
		if strings.HasPrefix(format, "beginning wait") || strings.HasPrefix(format, "creating") || strings.HasPrefix(format, "Created") || strings.HasPrefix(format, "Deleting") {
			c.log.Printf(format, args...)
		}
	})
	if err != nil {
		return providers.ApplyResponse{Diagnostics: phases.FromError("Cannot Reach Kubernetes", err)}
	}
	h, err := readHistory(cfg, st.name)
	if err != nil {
		return providers.ApplyResponse{Diagnostics: phases.Errorf("Cannot Read Release", "Reading the history of release %s: %v.", st.name, err)}
	}
	// The version token: a revision made by someone else since the plan.
	var planned releasePrivate
	if len(req.Planned) > 0 && json.Unmarshal(req.Planned, &planned) == nil && h.last != nil && h.last.Version != planned.Base &&
		!strings.HasPrefix(h.last.Info.Description, descPrefix) {
		return providers.ApplyResponse{Diagnostics: phases.Errorf("Release Changed Since Plan",
			"Release %s is at revision %d (%s: %q), but the plan was made against revision %d. Plan again to see what would change.",
			st.name, h.last.Version, h.last.Info.Status, h.last.Info.Description, planned.Base)}
	}
	desc := descPrefix + c.addr.String()

	// An interrupted client left the release pending: recover explicitly.
	if h.stuck() {
		c.log.Printf("release %s is stuck in %s at revision %d: %s", st.name, h.last.Info.Status, h.last.Version, h.recovery())
		if target := h.rollbackTarget(); target == nil {
			un := action.NewUninstall(cfg)
			un.Timeout = st.timeout
			if _, err := un.Run(st.name); err != nil {
				return providers.ApplyResponse{Diagnostics: phases.Errorf("Cannot Recover Release", "Uninstalling release %s, stuck in %s: %v.", st.name, h.last.Info.Status, err)}
			}
		} else {
			// The dead client's revision stays in the history as failed,
			// not pending for ever.
			stuck := h.last
			stuck.Info.Status = release.StatusFailed
			stuck.Info.Description = fmt.Sprintf("%sinterrupted mid-operation; recovered by a rollback to revision %d", descPrefix, target.Version)
			if err := cfg.Releases.Update(stuck); err != nil {
				return providers.ApplyResponse{Diagnostics: phases.Errorf("Cannot Recover Release", "Marking revision %d of release %s failed: %v.", stuck.Version, st.name, err)}
			}
			rb := action.NewRollback(cfg)
			rb.Version = target.Version
			rb.Timeout = st.timeout
			rb.MaxHistory = maxHistory
			if err := rb.Run(st.name); err != nil {
				return providers.ApplyResponse{Diagnostics: phases.Errorf("Cannot Recover Release", "Rolling release %s, stuck in %s, back to revision %d: %v.", st.name, h.last.Info.Status, target.Version, err)}
			}
		}
		if h, err = readHistory(cfg, st.name); err != nil {
			return providers.ApplyResponse{Diagnostics: phases.Errorf("Cannot Read Release", "Reading the history of release %s: %v.", st.name, err)}
		}
	}
	if err := ctx.Err(); err != nil {
		return providers.ApplyResponse{Diagnostics: interrupted(c.addr, err)}
	}

	// Render and check again: the plan may be old, the namespace changed.
	r, diags := p.render(ctx, c, cl, cfg, st, h)
	if diags.HasErrors() {
		return providers.ApplyResponse{Diagnostics: diags}
	}
	if _, diags := p.preflight(ctx, cl, st, r.objects); diags.HasErrors() {
		return providers.ApplyResponse{Diagnostics: diags}
	}

	var rel *release.Release
	inv := releaseInverse{Name: st.name, Namespace: st.namespace}
	if !h.exists() {
		inst := action.NewInstall(cfg)
		inst.ReleaseName = st.name
		inst.Namespace = st.namespace
		inst.CreateNamespace = st.createNamespace
		inst.Atomic = st.atomic
		inst.Wait = st.wait || st.atomic
		inst.Timeout = st.timeout
		inst.Description = desc
		c.log.Printf("installing release %s/%s (chart %s)", st.namespace, st.name, chartName(r.chart))
		inv.Uninstall = true
		rel, err = inst.RunWithContext(ctx, r.chart, r.values)
	} else {
		prev := h.base()
		up := action.NewUpgrade(cfg)
		up.Namespace = st.namespace
		up.Atomic = st.atomic
		up.Wait = st.wait || st.atomic
		up.Timeout = st.timeout
		up.ResetValues = true
		up.MaxHistory = maxHistory
		up.Description = desc
		if prev != nil {
			inv.Version = prev.Version
			c.log.Printf("upgrading release %s/%s from revision %d (%s) to chart %s", st.namespace, st.name, prev.Version, prev.Info.Status, chartName(r.chart))
		}
		rel, err = up.RunWithContext(ctx, st.name, r.chart, r.values)
	}
	inverse := releaseInverseOf(inv)
	if prev := priorReleaseInverse(req.Prior); prev != nil && prev.Name == st.name && prev.Namespace == st.namespace {
		// Applied again: undoing goes back to before the first apply.
		inverse = req.Prior.Inverse
	}
	if err != nil {
		resp := providers.ApplyResponse{Diagnostics: phases.Errorf("Release Failed", "Release %s/%s: %v.", st.namespace, st.name, err)}
		if after, herr := readHistory(cfg, st.name); herr == nil && after.exists() {
			resp.Inverse = inverse // something is there to undo
		}
		return resp
	}
	c.log.Printf("release %s/%s: revision %d %s", st.namespace, st.name, rel.Version, rel.Info.Status)
	private, _ := json.Marshal(releasePrivate{Revision: rel.Version})
	return providers.ApplyResponse{Outputs: releaseOutputs(rel), Private: private, Inverse: inverse}
}

// maxHistory is how many revisions a release keeps, as the helm CLI does.
const maxHistory = 10

func releaseOutputs(rel *release.Release) cty.Value {
	return cty.ObjectVal(map[string]cty.Value{
		"name":          cty.StringVal(rel.Name),
		"namespace":     cty.StringVal(rel.Namespace),
		"revision":      cty.NumberIntVal(int64(rel.Version)),
		"status":        cty.StringVal(rel.Info.Status.String()),
		"chart_version": cty.StringVal(chartVersion(rel.Chart)),
	})
}

func chartVersion(ch *chart.Chart) string {
	if ch == nil || ch.Metadata == nil {
		return ""
	}
	return ch.Metadata.Version
}

func releaseInverseOf(inv releaseInverse) *providers.Inverse {
	data, _ := json.Marshal(inv)
	desc := fmt.Sprintf("roll release %s/%s back to revision %d", inv.Namespace, inv.Name, inv.Version)
	if inv.Uninstall {
		desc = fmt.Sprintf("uninstall release %s/%s (this step installed it)", inv.Namespace, inv.Name)
	}
	return &providers.Inverse{Description: desc, Data: data}
}

func priorReleaseInverse(prior *providers.Prior) *releaseInverse {
	if prior == nil || prior.Inverse == nil || len(prior.Inverse.Data) == 0 {
		return nil
	}
	var inv releaseInverse
	if json.Unmarshal(prior.Inverse.Data, &inv) != nil {
		return nil
	}
	return &inv
}

func (p *Provider) readRelease(ctx context.Context, c *call, req providers.ReadRequest) providers.ReadResponse {
	st, known := c.decodeRelease()
	if c.diags.HasErrors() {
		return providers.ReadResponse{}
	}
	if st == nil || !known {
		return providers.ReadResponse{Observation: providers.Unknown}
	}
	cl, _, diags := p.cluster(c)
	if diags.HasErrors() {
		return providers.ReadResponse{Diagnostics: diags}
	}
	cfg, err := cl.helmConfig(st.namespace, nil)
	if err != nil {
		return providers.ReadResponse{Diagnostics: phases.FromError("Cannot Reach Kubernetes", err)}
	}
	h, err := readHistory(cfg, st.name)
	if err != nil {
		return providers.ReadResponse{Diagnostics: phases.Errorf("Cannot Read Release", "Reading the history of release %s: %v.", st.name, err)}
	}
	if !h.exists() {
		return providers.ReadResponse{Observation: providers.Absent, Detail: fmt.Sprintf("release %s/%s is not installed", st.namespace, st.name)}
	}
	last := h.last
	if h.stuck() {
		return providers.ReadResponse{Observation: providers.Drifted, Detail: fmt.Sprintf("release %s is stuck in %s at revision %d (a client died mid-operation); apply will %s", st.name, last.Info.Status, last.Version, h.recovery())}
	}
	r := providers.ReadResponse{Observation: providers.Present, Outputs: releaseOutputs(last)}
	var priv releasePrivate
	if req.Prior != nil && json.Unmarshal(req.Prior.Private, &priv) == nil && priv.Revision != 0 && priv.Revision != last.Version {
		r.Observation = providers.Drifted
		r.Detail = fmt.Sprintf("release %s/%s is at revision %d (%s, %q), migrate made revision %d: %s", st.namespace, st.name, last.Version, last.Info.Status, last.Info.Description, priv.Revision, madeOutside(priv.Revision, last.Version))
	} else if last.Info.Status != release.StatusDeployed {
		r.Observation = providers.Drifted
		r.Detail = fmt.Sprintf("revision %d of release %s is %s", last.Version, st.name, last.Info.Status)
	}
	if req.Prior == nil && strings.HasPrefix(last.Info.Description, descPrefix) {
		// Adopted on resume: undo what an interrupted apply did.
		inv := releaseInverse{Name: st.name, Namespace: st.namespace, Uninstall: len(h.all) == 1}
		if !inv.Uninstall {
			inv.Version = h.all[len(h.all)-2].Version
		}
		r.Inverse = releaseInverseOf(inv)
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

func (p *Provider) revertRelease(ctx context.Context, c *call, req providers.RevertRequest) providers.RevertResponse {
	var inv releaseInverse
	if err := json.Unmarshal(req.Inverse.Data, &inv); err != nil || inv.Name == "" {
		return providers.RevertResponse{Diagnostics: phases.Errorf("Invalid Inverse", "The recorded inverse of %s cannot be read: %v.", c.what, err)}
	}
	cl, _, diags := p.cluster(c)
	if diags.HasErrors() {
		return providers.RevertResponse{Diagnostics: diags}
	}
	cfg, err := cl.helmConfig(inv.Namespace, nil)
	if err != nil {
		return providers.RevertResponse{Diagnostics: phases.FromError("Cannot Reach Kubernetes", err)}
	}
	h, err := readHistory(cfg, inv.Name)
	if err != nil {
		return providers.RevertResponse{Diagnostics: phases.Errorf("Cannot Read Release", "Reading the history of release %s: %v.", inv.Name, err)}
	}
	if !h.exists() {
		c.log.Printf("release %s/%s is not installed: nothing to undo", inv.Namespace, inv.Name)
		return providers.RevertResponse{}
	}
	if inv.Uninstall {
		un := action.NewUninstall(cfg)
		un.Timeout = defaultTimeout
		if _, err := un.Run(inv.Name); err != nil && !errors.Is(err, driver.ErrReleaseNotFound) {
			return providers.RevertResponse{Diagnostics: phases.Errorf("Cannot Uninstall Release", "Uninstalling release %s/%s: %v.", inv.Namespace, inv.Name, err)}
		}
		c.log.Printf("uninstalled release %s/%s", inv.Namespace, inv.Name)
		return providers.RevertResponse{}
	}
	rb := action.NewRollback(cfg)
	rb.Version = inv.Version
	rb.Timeout = defaultTimeout
	rb.MaxHistory = maxHistory
	if err := rb.Run(inv.Name); err != nil {
		return providers.RevertResponse{Diagnostics: phases.Errorf("Cannot Roll Back Release", "Rolling release %s/%s back to revision %d: %v.", inv.Namespace, inv.Name, inv.Version, err)}
	}
	c.log.Printf("rolled release %s/%s back to revision %d", inv.Namespace, inv.Name, inv.Version)
	return providers.RevertResponse{}
}

const defaultTimeout = 5 * time.Minute

// scrubOldValues adds the values that the deployed revision holds at the
// step's set_sensitive paths to the scrubber: the old manifest shows them.
func (c *call) scrubOldValues(st *releaseStep, base *release.Release) {
	for path := range st.sensitive {
		var cur any = base.Config
		for _, k := range splitPath(path) {
			m, ok := cur.(map[string]any)
			if !ok {
				cur = nil
				break
			}
			cur = m[k]
		}
		if cur != nil {
			if _, isMap := cur.(map[string]any); !isMap {
				c.scrub.Add(fmt.Sprint(cur))
			}
		}
	}
}
