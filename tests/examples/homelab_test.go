package examples

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// homelabApps is examples/homelab with only its data-apps and
// host-services phases, against the API server of scripts/kube-up.sh.
func homelabApps(t *testing.T) (dir string, env []string) {
	t.Helper()
	kubeconfig := labKubeconfig(t)
	dir = copyExample(t, "homelab")
	keepPhases(t, filepath.Join(dir, "main.hcl"), "data-apps", "host-services")
	if err := os.WriteFile(filepath.Join(dir, "secrets/kubeconfig"), must(os.ReadFile(kubeconfig)), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, []string{"MIGRATE_AGE_IDENTITY=" + filepath.Join(dir, "secrets/demo-identity.txt")}
}

// TestHomelabPodSecurityExceptions: the plan of the phases with pods on
// the host's data lists the PodSecurity exceptions of the brief — media
// (Jellyfin, Frigate), files (Samba), ci (the runner) — and no other
// namespace above Talos's baseline.
func TestHomelabPodSecurityExceptions(t *testing.T) {
	t.Parallel()
	dir, env := homelabApps(t)
	plan := run(t, dir, env, "plan")
	levels := map[string]string{}
	for _, m := range regexp.MustCompile(`namespace (\S+): PodSecurity (\w+)`).FindAllStringSubmatch(plan, -1) {
		levels[m[1]] = m[2]
	}
	var privileged []string
	for ns, level := range levels {
		if level == "privileged" {
			privileged = append(privileged, ns)
		}
	}
	slices.Sort(privileged)
	if !slices.Equal(privileged, []string{"ci", "files", "media"}) {
		t.Errorf("privileged namespaces in the plan: %v (levels %v), want ci, files, media:\n%s", privileged, levels, plan)
	}
	for _, want := range []string{"helm_release.jellyfin", "helm_release.frigate", "kubernetes_job.data_probe", "helm_release.samba",
		"kubernetes_secret.ci_runner_token", "helm_release.ci_runner", "+ Secret ci/ci-runner-token (keys: token)", "nodePort: 30096"} {
		if !strings.Contains(plan, want) {
			t.Errorf("the plan lacks %q:\n%s", want, plan)
		}
	}
	if strings.Contains(plan, "demo-registration-token") {
		t.Error("the plan shows the runner's registration token")
	}
}

// TestHomelabMediaNeedsPrivileged: without its privileged label, the
// media namespace is Talos's baseline, and the plan fails before anything
// is applied, naming Jellyfin's host paths and /dev/dri.
func TestHomelabMediaNeedsPrivileged(t *testing.T) {
	t.Parallel()
	dir, env := homelabApps(t)
	main := filepath.Join(dir, "main.hcl")
	src := string(must(os.ReadFile(main)))
	const label = `pod_security = "privileged" # hostPath for the ZFS data and the bulk disk, /dev/dri for the iGPU`
	if strings.Count(src, label) != 1 {
		t.Fatalf("the media namespace's label is not in main.hcl once: %q", label)
	}
	if err := os.WriteFile(main, []byte(strings.Replace(src, label, `pod_security = "baseline"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(migrate, "plan", "--runbook", dir, "--no-color")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the plan passed with media at baseline:\n%s", out)
	}
	// The terminal's lines are wrapped: read the findings as one text.
	text := strings.Join(strings.Fields(string(out)), " ")
	_, finding, _ := strings.Cut(text, "Deployment media/jellyfin: hostPath volumes")
	finding, _, _ = strings.Cut(finding, " - ")
	for _, want := range []string{`"dev-dri"`, "/dev/dri", "/var/mnt/data/media", "/var/mnt/bulk/jellyfin/config"} {
		if !strings.Contains(finding, want) {
			t.Errorf("Jellyfin's hostPath finding lacks %q: %q\n%s", want, finding, out)
		}
	}
	for _, want := range []string{`step "helm_release" "jellyfin"`, `helm release "jellyfin" would create pods that namespace "media" (PodSecurity "baseline") rejects`, "Deployment media/frigate", `container "jellyfin" must not set securityContext.privileged=true`} {
		if !strings.Contains(text, want) {
			t.Errorf("the plan's failure lacks %q:\n%s", want, out)
		}
	}
}
