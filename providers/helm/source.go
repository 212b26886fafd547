package helm

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/cli"

	"github.com/homelab-migrate/migrate/phases"
)

// Where a release's chart comes from: a directory or .tgz beside the
// runbook, a chart repository over HTTP(S), or an OCI registry
// (oci.go). A local chart is what its files say, and the saved plan's
// contract digests them; a remote one is whatever its registry serves
// under a version now, so it is fetched with the digest of what was
// fetched, the plan shows and records that digest, and apply holds to it.

// source is what a remote chart resolved to; zero for a local chart.
type source struct {
	ref     string // the chart as the step names it
	version string // the chart version fetched
	digest  string // "sha256:…": an OCI chart's manifest, a repository chart's archive
}

// resolved says it for a person: the plan, and the saved plan's contract.
func (s source) resolved(ch *chart.Chart) string {
	return fmt.Sprintf("chart %s resolved to %s, digest %s", s.ref, chartName(ch), s.digest)
}

// from says where a remote chart came from, for the step's log.
func (s source) from() string {
	if s.digest == "" {
		return ""
	}
	return fmt.Sprintf(" from %s, digest %s", s.ref, s.digest)
}

// loadChart loads the step's chart. planned is the digest the plan
// fetched ("" when apply has no plan, or for a local chart): a remote
// chart that resolves to another one now is refused (errMoved).
func (p *Provider) loadChart(st relAttrs, planned string) (*chart.Chart, source, error) {
	if strings.HasPrefix(st.Chart, "oci://") {
		ch, src, err := p.ociChart(st, planned)
		if err != nil {
			return nil, source{}, err
		}
		return ch, src, checkDependencies(ch, st.Chart)
	}
	path, err := p.chartPath(st)
	if err != nil {
		return nil, source{}, err
	}
	ch, err := loader.Load(path)
	if err != nil {
		return nil, source{}, fmt.Errorf("loading chart %s: %w", st.Chart, loadError(path, st.Chart, err))
	}
	var src source
	if isRemote(st.Chart) {
		if src, err = repoSource(st, path, ch, planned); err != nil {
			return nil, source{}, err
		}
	} else if st.Version != "" && ch.Metadata != nil && ch.Metadata.Version != strings.TrimPrefix(st.Version, "v") && ch.Metadata.Version != st.Version {
		return nil, source{}, fmt.Errorf("chart %s is version %s, the step requires %s", st.Chart, ch.Metadata.Version, st.Version)
	}
	return ch, src, checkDependencies(ch, st.Chart)
}

// repoSource is what a chart from a repository resolved to: its
// archive's digest, as the repository's index.yaml lists it.
func repoSource(st relAttrs, path string, ch *chart.Chart, planned string) (source, error) {
	sum, err := fileSum(path)
	if err != nil {
		return source{}, err
	}
	src := source{ref: st.Chart, version: chartVersion(ch), digest: "sha256:" + sum}
	return src, src.holds(st, planned)
}

// holds refuses a chart whose digest is not the one the step pins, or not
// the one the plan was made with.
func (s source) holds(st relAttrs, planned string) error {
	switch {
	case st.Digest != "" && s.digest != st.Digest:
		return &errMoved{src: s, want: st.Digest, pinned: true}
	case planned != "" && s.digest != planned:
		return &errMoved{src: s, want: planned}
	}
	return nil
}

// errMoved: a registry serves another chart under the version than the
// one the step pins, or than the one the plan was made with.
type errMoved struct {
	src    source
	want   string
	pinned bool // want is the step's digest attribute, not the plan's
}

func (e *errMoved) Error() string {
	if e.pinned {
		return fmt.Sprintf("version %s of chart %s resolves to %s now, but the step pins digest %s: the registry serves another chart under that version. Nothing was installed; if the new chart is the one you want, review it and set digest = %q",
			e.src.version, e.src.ref, e.src.digest, e.want, e.src.digest)
	}
	return fmt.Sprintf("version %s of chart %s resolves to %s now, but the plan was made with %s: the registry serves another chart under that version since. Nothing was installed; plan again to review the chart it serves now, and pin it with the digest attribute",
		e.src.version, e.src.ref, e.src.digest, e.want)
}

// chartDiags is a chart that cannot be loaded, as diagnostics.
func chartDiags(c *call, err error) phases.Diagnostics {
	if m := (*errMoved)(nil); errors.As(err, &m) {
		if m.pinned {
			return phases.Errorf("Chart Digest Mismatch", "%s: %v.", c.Addr, err)
		}
		return phases.Errorf("Chart Changed Since Plan", "%s: %v.", c.Addr, err)
	}
	return phases.Errorf("Cannot Load Chart", "%s: %v.", c.Addr, err)
}

// chartPath is where the step's chart is on this machine: one from a
// repository fetched (into Helm's cache) at the version it resolves to
// now.
func (p *Provider) chartPath(st relAttrs) (string, error) {
	path := st.Chart
	if isRemote(path) {
		opts := action.ChartPathOptions{Version: st.Version, Username: st.Username, Password: st.Password, CaFile: p.abs(st.CAFile)}
		if !strings.HasSuffix(path, ".tgz") {
			// https://charts.example.org/name: a repository and a chart.
			i := strings.LastIndex(path, "/")
			opts.RepoURL, path = path[:i], path[i+1:]
		}
		located, err := opts.LocateChart(path, cli.New())
		if err != nil {
			return "", fmt.Errorf("fetching chart %s: %w", st.Chart, err)
		}
		return located, nil
	}
	path = p.abs(path)
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("chart %s: %w", st.Chart, err)
	}
	if fi.IsDir() {
		if err := chartLinks(path, st.Chart); err != nil {
			return "", fmt.Errorf("loading chart %s: %w", st.Chart, err)
		}
	}
	return path, nil
}

func checkDependencies(ch *chart.Chart, ref string) error {
	if ch.Metadata == nil || len(ch.Metadata.Dependencies) == 0 {
		return nil
	}
	if err := action.CheckDependencies(ch, ch.Metadata.Dependencies); err != nil {
		return fmt.Errorf("chart %s: %w", ref, err)
	}
	return nil
}
