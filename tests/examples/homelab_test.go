package examples

import (
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/lab/factory"
	"github.com/homelab-migrate/migrate/lab/home"
	"github.com/homelab-migrate/migrate/secret/agefile"
)

// homelabApps is examples/homelab with only its data-apps and
// host-services phases, against the API server of scripts/kube-up.sh and
// the real Incus daemon: data-apps moves Jellyfin's and Frigate's data
// out of the old services VM (a busybox container stands in for it) onto
// the data volume (a custom volume of the daemon's pool).
func homelabApps(t *testing.T) (dir string, env []string) {
	t.Helper()
	kubeconfig := labKubeconfig(t)
	dir = copyExample(t, "homelab")
	keepPhases(t, filepath.Join(dir, "main.hcl"), "data-apps", "host-services")
	sealKubeconfig(t, dir, must(os.ReadFile(kubeconfig)))
	volume := "mt-data-" + canary(t)[4:12]
	incusOut(t, "storage", "volume", "create", "default", volume)
	t.Cleanup(func() { exec.Command("incus", "storage", "volume", "delete", "default", volume).Run() })
	// The daemon here is the incus CLI's "local", not an IncusOS remote.
	return dir, []string{"MIGRATE_AGE_IDENTITY=" + filepath.Join(dir, "secrets/demo-identity.txt"), "MIGRATE_VAR_incus_remote=local",
		"MIGRATE_VAR_services_vm=" + oldServices(t), "MIGRATE_VAR_data_pool=default", "MIGRATE_VAR_data_volume=" + volume}
}

// oldServices launches the stand-in of the old services VM: Jellyfin's
// and Frigate's files where Debian's package and a Docker Compose install
// keep them, and a systemctl stand-in that records its calls.
func oldServices(t *testing.T) string {
	t.Helper()
	name := "mt-services-" + canary(t)[4:12]
	incusOut(t, "launch", image(), name)
	t.Cleanup(func() { exec.Command("incus", "delete", "--force", name).Run() })
	for path, f := range map[string]struct{ body, mode string }{
		"/var/lib/jellyfin/data/jellyfin.db": {"SQLite format 3\x00 the users\n", "0600"},
		"/etc/jellyfin/system.xml":           {"<ServerConfiguration/>\n", "0644"},
		"/opt/frigate/config/config.yml":     {"cameras: {}\n", "0644"},
		"/opt/frigate/config/frigate.db":     {"SQLite format 3\x00 the events\n", "0644"},
		"/bin/systemctl":                     {"#!/bin/sh\n# stand-in for systemd: records the calls\necho \"$*\" >> /root/systemctl.calls\n", "0755"},
	} {
		src := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(src, []byte(f.body), 0o600); err != nil {
			t.Fatal(err)
		}
		incusOut(t, "file", "push", "-p", "--mode", f.mode, src, name+path)
	}
	return name
}

// sealKubeconfig writes kubeconfig as the runbook's talos_kubeconfig
// writes it: secrets/kubeconfig.age, sealed to its recipients.
func sealKubeconfig(t *testing.T, dir string, kubeconfig []byte) {
	t.Helper()
	rs, err := agefile.RunbookRecipients(dir)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := agefile.Encrypt(kubeconfig, true, rs...)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "secrets/kubeconfig.age"), sealed, 0o600); err != nil {
		t.Fatal(err)
	}
}

// openKubeconfig is the runbook's secrets/kubeconfig.age, decrypted with
// its demo identity into a file of the test's (outside the runbook), for
// the test's own clients.
func openKubeconfig(t *testing.T, dir string) string {
	t.Helper()
	ids, err := agefile.Identities(filepath.Join(dir, "secrets/demo-identity.txt"))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := agefile.Decrypt(must(os.ReadFile(filepath.Join(dir, "secrets/kubeconfig.age"))), ids...)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, plain, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
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
	for _, want := range []string{"group.jellyfin.helm_release.app", "group.frigate.helm_release.app", "kubernetes_job.data_probe", "helm_release.samba",
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
	for _, want := range []string{`"dev-dri"`, "/dev/dri", "/var/mnt/data/media", "/var/mnt/data/apps/jellyfin"} {
		if !strings.Contains(finding, want) {
			t.Errorf("Jellyfin's hostPath finding lacks %q: %q\n%s", want, finding, out)
		}
	}
	for _, want := range []string{"on groups/app/main.hcl line", `step "helm_release" "app"`, `helm release "jellyfin" would create pods that namespace "media" (PodSecurity "baseline") rejects`, "Deployment media/frigate", `container "jellyfin" must not set securityContext.privileged=true`} {
		if !strings.Contains(text, want) {
			t.Errorf("the plan's failure lacks %q:\n%s", want, out)
		}
	}
}

// TestHomelabRehearsalWithoutGPU: the brief's discovery, reproduced. The
// rehearsal phase of the example runs against the lab home server with
// its VM's gpu device removed (the old VM never had the real iGPU): the
// VM boots from the ISO, installs, bootstraps, its Job writes on the data
// share and the node reads it back, and then the iGPU check (the render
// node) fails the phase with words a person understands, and no pod tries
// to open it. The throwaway VM is not deleted:
// nothing after a failed check runs.
func TestHomelabRehearsalWithoutGPU(t *testing.T) {
	t.Parallel()
	h, err := home.Start(t.Context(), home.Options{Dir: filepath.Join(t.TempDir(), "lab"), AddressBlock: 22})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })

	dir := copyExample(t, "homelab")
	path := filepath.Join(dir, "main.hcl")
	src := string(must(os.ReadFile(path)))
	// The rehearsal's call of groups/talos-node, given a host without
	// an iGPU: its VM gets no gpu device.
	const host = "    host       = local.host\n"
	rehearsal := strings.Index(src, `group "rehearsal"`)
	at := strings.Index(src[rehearsal:], host)
	if rehearsal < 0 || at < 0 {
		t.Fatalf("the example's rehearsal has no line %q", host)
	}
	src = src[:rehearsal+at] + "    host       = merge(local.host, { igpu_pci = \"\" })\n" + src[rehearsal+at+len(host):]
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(migrate, "run", "--phase", "rehearsal", "--auto-approve", "--runbook", dir, "--no-color")
	cmd.Env = append(append(os.Environ(), h.Env()...), "MIGRATE_AGE_IDENTITY="+filepath.Join(dir, "secrets/demo-identity.txt"))
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the rehearsal passed on a VM without the iGPU:\n%s", out)
	}
	text := strings.Join(strings.Fields(string(out)), " ")
	for _, want := range []string{
		"/var/mnt/data/.migrate/rehearsal read through the API (34 bytes) as expected", // the data test passed
		"talos_read.rehearsal_igpu: No render node (/dev/dri/renderD128) on the rehearsal node: the i915 driver did not bind an Intel GPU.",
		"Does the VM have the gpu device (pci 0000:00:02.0)",
		"decode video on the CPU",
		`What was read: Read: NotFound: stat /sys/class/drm/renderD128/dev: no such file or directory`,
		"kubernetes_job.rehearsal_render: skipped",
		"incus_instance.rehearsal_deleted: skipped",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the rehearsal's output lacks %q:\n%s", want, out)
		}
	}
	if h.VM("rehearsal") == nil {
		t.Error("the throwaway VM is gone after a failed rehearsal")
	}
}

// TestHomelabWholePlan: the plan of the whole move before anything ran,
// against the real Incus daemon (busybox containers stand in for the
// three old VMs): every phase plans, the Talos and cluster steps deferred
// until the VMs exist, and the PodSecurity exceptions are still media,
// files and ci alone (the rehearsal's throwaway cluster has a media too).
func TestHomelabWholePlan(t *testing.T) {
	t.Parallel()
	dir := copyExample(t, "homelab")
	// The ISO comes from an Image Factory: the lab's, which adds an owner
	// to the schematic it stores, so its ID is not the plain computation.
	images := httptest.NewServer(factory.New(factory.Options{Owner: home.FactoryOwner}).Handler())
	t.Cleanup(images.Close)
	isoDir := t.TempDir()
	// The daemon's names for what IncusOS calls local, tank/data and its
	// LAN bridge.
	volume := "mt-data-" + canary(t)[4:12]
	incusOut(t, "storage", "volume", "create", "default", volume)
	t.Cleanup(func() { exec.Command("incus", "storage", "volume", "delete", "default", volume).Run() })
	vars := []string{"--var", "image_factory=" + images.URL, "--var", "talos_iso_dir=" + isoDir, "--var", "incus_remote=local", "--var", "storage_pool=default", "--var", "data_pool=default",
		"--var", "data_volume=" + volume, "--var", "lan_bridge=migratebr0"}
	for _, v := range []string{"services", "matrix", "k3s"} {
		name := "mt-" + v + "-" + canary(t)[4:12]
		incusOut(t, "launch", image(), name)
		t.Cleanup(func() { exec.Command("incus", "delete", "--force", name).Run() })
		vars = append(vars, "--var", v+"_vm="+name)
	}
	env := []string{"MIGRATE_AGE_IDENTITY=" + filepath.Join(dir, "secrets/demo-identity.txt")}
	plan := run(t, dir, env, append([]string{"plan"}, vars...)...)
	assertInstallDiskBySelector(t, plan)
	for _, want := range []string{"Phase rehearsal", "Phase platform", "Phase data-apps", "Phase host-services", "Phase ingress-matrix", "Phase cleanup",
		"register schematic " + labSchematicID(t) + " with " + images.URL,
		"answered ID " + labSchematicID(t) + " for this schematic; computed locally " + i915SchematicID,
		"download " + images.URL + "/image/" + labSchematicID(t) + "/v1.13.3/nocloud-amd64.iso",
		filepath.Join(isoDir, "talos-v1.13.3-i915.iso"), "incus_instance.rehearsal_deleted", "group.node.talos_machine_config.config will run",
		// both VMs install from their config drive: nothing goes over the LAN
		`install: first config through the Incus host's API (first_install = "nocloud"): nothing is sent over the LAN`,
		"group.rehearsal.incus_device.config_cleared will run", "group.node.incus_device.config_cleared will run"} {
		if !strings.Contains(plan, want) {
			t.Errorf("the plan lacks %q:\n%s", want, plan)
		}
	}
	privileged := map[string]bool{}
	for _, m := range regexp.MustCompile(`namespace (\S+): PodSecurity (\w+)`).FindAllStringSubmatch(plan, -1) {
		if m[2] == "privileged" {
			privileged[m[1]] = true
		}
	}
	if len(privileged) != 3 || !privileged["media"] || !privileged["files"] || !privileged["ci"] {
		t.Errorf("privileged namespaces in the whole plan: %v, want media, files, ci", privileged)
	}
}

// i915SchematicID is the homelab's schematic (i915) as computed locally:
// the SHA-256 of its canonical YAML.
const i915SchematicID = "dc8730aa8cc7bfa5ef7e2b3284248f2631135b2faf4ae11aa997a0c1987b0eee"

// assertInstallDiskBySelector checks that a plan of the homelab chooses
// each Talos VM's install disk by the selector, and names no device.
func assertInstallDiskBySelector(t *testing.T, plan string) {
	t.Helper()
	lines := regexp.MustCompile(`(?m)^.*install disk:.*$`).FindAllString(plan, -1)
	if len(lines) == 0 {
		t.Errorf("the plan has no install disk line:\n%s", plan)
	}
	for _, l := range lines {
		if !strings.Contains(l, "install disk: selected by `disk.serial == \"incus_root\"`") || regexp.MustCompile(`/dev/[a-z]`).MatchString(l) {
			t.Errorf("the plan's install disk is not chosen by the selector alone: %s", l)
		}
	}
}

// labSchematicID is the ID the lab's factory answers for the homelab's
// schematic (i915): the schematic with the owner it adds.
func labSchematicID(t *testing.T) string {
	t.Helper()
	s := factory.Schematic{Owner: home.FactoryOwner}
	s.Customization.SystemExtensions.OfficialExtensions = []string{"siderolabs/i915"}
	id, err := s.ID()
	if err != nil {
		t.Fatal(err)
	}
	return id
}
