package helm_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/providers/helm"
)

// chartCopy copies testdata/charts/app into a fresh directory (outside
// any runbook) and returns its path.
func chartCopy(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "app")
	if out, err := exec.Command("cp", "-r", filepath.Join(testdata(t), "charts/app"), dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	return dst
}

// TestChartLinks: a chart whose links lead back into it, or to nothing,
// fails the plan with one line naming the link, where it leads and what
// to do, before Helm's loader follows it (a log line per level, then an
// error naming a path thousands of characters long).
func TestChartLinks(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, link, target string
		want               []string
	}{
		{"cycle", "templates/loop", "..", []string{"templates/loop (-> ..) is a symbolic link to a directory that holds it, so following it never ends", "remove it"}},
		{"chain", "templates/one", "one", []string{"templates/one (-> one) is a symbolic link that leads back to itself"}},
		{"dangling", "templates/gone.yaml", "nothing.yaml", []string{"templates/gone.yaml (-> nothing.yaml) is a symbolic link to nothing: nothing.yaml does not exist"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			chart := chartCopy(t)
			if err := os.Symlink(c.target, filepath.Join(chart, c.link)); err != nil {
				t.Fatal(err)
			}
			p := offline(t, nil)
			r := plan(t, p, helm.Release, "app", obj(map[string]cty.Value{"chart": str(chart), "namespace": str("web")}))
			if len(r.Diagnostics) != 1 || r.Diagnostics[0].Summary != "Cannot Load Chart" {
				t.Fatalf("want one Cannot Load Chart, got %v", r.Diagnostics)
			}
			d := r.Diagnostics[0].Detail
			contains(t, "the diagnostic", d, append([]string{"helm_release.app: loading chart " + chart + ": " + filepath.Join(chart, c.link)}, c.want...)...)
			if strings.Contains(d, "\n") || len(d) > 400 || strings.Count(d, "templates/") > 2 {
				t.Errorf("the diagnostic is not one short line (%d bytes):\n%s", len(d), d)
			}
		})
	}
}
