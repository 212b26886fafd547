package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// downgradeRunbook moves Jellyfin into the image site.auto.hcl names,
// held by not_older to the version the old VM runs, as migrate init
// writes them.
func downgradeRunbook(t *testing.T, image string) string {
	return runbook(t, map[string]string{
		"main.hcl": `
variable "jellyfin_image" { default = "jellyfin/jellyfin:10.10.3" }
variable "jellyfin_version" { default = "" }
provider "helm" "cluster" { kubeconfig = "secrets/kubeconfig" }
phase "data-apps" {
  step "helm_release" "jellyfin" {
    provider  = helm.cluster
    chart     = "charts/app"
    namespace = "media"
    values = {
      image = not_older(var.jellyfin_image, var.jellyfin_version)
    }
  }
}
`,
		"site.auto.hcl": `jellyfin_version = "10.10.7+deb12"
jellyfin_image = "` + image + `"
`})
}

// TestDowngradeRefusedAtPlan: an image older than what the old VM runs
// fails validate and plan at the not_older call (main.hcl line 11), naming
// both versions and the one way past it; a newer one passes, and so does
// the older one with MIGRATE_ALLOW_DOWNGRADE naming its repository.
func TestDowngradeRefusedAtPlan(t *testing.T) {
	t.Parallel()
	dir := downgradeRunbook(t, "jellyfin/jellyfin:10.10.3")
	for _, cmd := range []string{"validate", "plan"} {
		r := run(t, dir, 1, cmd)
		said := strings.Join(strings.Fields(r.stderr), " ")
		for _, want := range []string{"on main.hcl line 11", "jellyfin/jellyfin:10.10.3 is older than 10.10.7+deb12, the version the old VM runs", "MIGRATE_ALLOW_DOWNGRADE=jellyfin/jellyfin"} {
			if !strings.Contains(said, want) {
				t.Errorf("%s does not say %q: %s", cmd, want, r)
			}
		}
	}
	run(t, downgradeRunbook(t, "jellyfin/jellyfin:10.10.7"), 0, "validate")
	run(t, downgradeRunbook(t, "jellyfin/jellyfin:10.11.0"), 0, "validate")

	forced := exec.Command(bin, "--runbook", dir, "validate")
	forced.Env = append(os.Environ(), "MIGRATE_ALLOW_DOWNGRADE=frigate,jellyfin/jellyfin")
	if out, err := forced.CombinedOutput(); err != nil {
		t.Errorf("validate with MIGRATE_ALLOW_DOWNGRADE=jellyfin/jellyfin: %v\n%s", err, out)
	}
}
