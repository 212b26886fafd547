package podsecurity

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestEvaluateCases(t *testing.T) {
	for _, c := range agreementCases {
		for _, level := range Levels() {
			want, ok := c.want[level]
			if !ok {
				continue
			}
			t.Run(c.name+"/"+level, func(t *testing.T) {
				got, err := Evaluate([]byte(c.manifest), level, "apps")
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(keys(got), want) {
					t.Fatalf("findings:\n got  %q\n want %q\n(%v)", keys(got), want, got)
				}
			})
		}
	}
}

// Levels are ordered: whatever restricted allows, baseline allows, and
// privileged allows everything.
func TestLevelsAreOrdered(t *testing.T) {
	if got := Levels(); !slices.Equal(got, []string{"privileged", "baseline", "restricted"}) {
		t.Fatalf("Levels() = %q", got)
	}
	for _, c := range agreementCases {
		var n []int
		for _, level := range Levels() {
			f, err := Evaluate([]byte(c.manifest), level, "apps")
			if err != nil {
				t.Fatal(err)
			}
			n = append(n, len(f))
		}
		if n[0] != 0 || n[1] > n[2] {
			t.Errorf("%s: findings per level %v, want 0 <= baseline <= restricted", c.name, n)
		}
	}
}

func TestFindingDetails(t *testing.T) {
	f, err := Evaluate([]byte(privilegedRunner), "baseline", "default")
	if err != nil {
		t.Fatal(err)
	}
	want := Finding{Kind: "Deployment", Namespace: "ci", Name: "runner", Container: "runner", Check: "privileged",
		Detail: `container "runner" must not set securityContext.privileged=true`}
	if len(f) != 1 || f[0] != want {
		t.Fatalf("got %#v\nwant %#v", f, want)
	}
	if got, w := f[0].String(), `Deployment ci/runner, container runner: privileged (container "runner" must not set securityContext.privileged=true)`; got != w {
		t.Fatalf("String() = %q, want %q", got, w)
	}

	f, err = Evaluate([]byte(driDeployment), "baseline", "media")
	if err != nil {
		t.Fatal(err)
	}
	if len(f) != 1 || f[0].Container != "" || f[0].Namespace != "media" || f[0].Detail != `volume "dri"; host path /dev/dri` {
		t.Fatalf("/dev/dri: got %#v", f)
	}

	f, err = Evaluate([]byte(hostNetworkDaemonSet), "baseline", "infra")
	if err != nil {
		t.Fatal(err)
	}
	if len(f) != 1 || f[0].Container != "" || f[0].Detail != "hostNetwork=true" {
		t.Fatalf("hostNetwork: got %#v", f)
	}
}

// Several containers failing one check give one finding each, each detail
// naming only its container; checks about the pod are reported once.
func TestAttribution(t *testing.T) {
	m := mixedStatefulSet
	f, err := Evaluate([]byte(m), "baseline", "lab")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"StatefulSet lab/mixed[a]: non-default capabilities",
		"StatefulSet lab/mixed: host namespaces",
		"StatefulSet lab/mixed: hostPath volumes",
		"StatefulSet lab/mixed[setup]: privileged",
		"StatefulSet lab/mixed[a]: privileged",
		"StatefulSet lab/mixed[c]: privileged",
	}
	if !slices.Equal(keys(f), want) {
		t.Fatalf("got  %q\nwant %q", keys(f), want)
	}
	for _, x := range f {
		switch x.Check {
		case "privileged":
			if x.Detail != fmt.Sprintf("container %q must not set securityContext.privileged=true", x.Container) {
				t.Errorf("detail %q", x.Detail)
			}
		case "hostPath volumes":
			if x.Detail != `volumes "vx", "vy"; host paths /x, /y` {
				t.Errorf("detail %q", x.Detail)
			}
		case "host namespaces":
			if x.Detail != "hostPID=true, hostIPC=true" {
				t.Errorf("detail %q", x.Detail)
			}
		}
	}
}

// Helm's output: a leading separator, "# Source:" comments, empty and
// comment-only documents, kinds that carry no pod template, a List.
func TestMultiDocument(t *testing.T) {
	m := "---\n# Source: media/templates/service.yaml\napiVersion: v1\nkind: Service\nmetadata:\n  name: jellyfin\nspec:\n  ports: [{port: 8096}]\n" +
		"---\n---\n# just a comment\n--- # a separator with a comment\n" +
		"# Source: media/templates/deployment.yaml\n" + hostPathDeployment +
		"---\r\n# Source: media/templates/configmap.yaml\r\napiVersion: v1\r\nkind: ConfigMap\r\nmetadata:\r\n  name: cfg\r\ndata:\r\n  a: \"---\"\r\n" +
		"---\n" + privilegedRunner +
		"---\n" + cleanDeployment +
		"---\n" + hostPathCronJob +
		"---\n" + `apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: in-list}
- apiVersion: apps/v1
  kind: DaemonSet
  metadata: {name: listed, namespace: infra}
  spec:
    selector: {matchLabels: {a: b}}
    template:
      metadata: {labels: {a: b}}
      spec:
        hostNetwork: true
        containers: [{name: c, image: busybox}]
` + "---\n" + `apiVersion: apps/v1
kind: DeploymentList
items:
- metadata: {name: typed-item}
  spec:
    selector: {matchLabels: {a: b}}
    template:
      metadata: {labels: {a: b}}
      spec:
        containers: [{name: c, image: busybox, securityContext: {privileged: true}}]
` + "---\n" + `# a CRD kind that happens to be called Deployment is not a workload
apiVersion: example.com/v1
kind: Deployment
metadata: {name: not-apps}
spec: {template: {spec: {hostNetwork: true}}}
---
`
	f, err := Evaluate([]byte(m), "baseline", "media")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"Deployment media/jellyfin: hostPath volumes",
		"Deployment ci/runner[runner]: privileged",
		"CronJob media/zfs-scrub-report: hostPath volumes",
		"DaemonSet infra/listed: host namespaces",
		"Deployment media/typed-item[c]: privileged",
	}
	if !slices.Equal(keys(f), want) {
		t.Fatalf("got  %q\nwant %q", keys(f), want)
	}
	if f, err := Evaluate([]byte(m), "privileged", "media"); err != nil || len(f) != 0 {
		t.Fatalf("privileged: %v %v", f, err)
	}
	for _, empty := range []string{"", "---\n", "\n# nothing\n---\n---\n", "null\n"} {
		if f, err := Evaluate([]byte(empty), "restricted", "x"); err != nil || len(f) != 0 {
			t.Fatalf("%q: %v %v", empty, f, err)
		}
	}
}

func TestUnknownLevel(t *testing.T) {
	for _, level := range []string{"", "Baseline", "strict", "latest"} {
		_, err := Evaluate([]byte(cleanDeployment), level, "apps")
		if err == nil || !strings.Contains(err.Error(), "unknown PodSecurity level") || !strings.Contains(err.Error(), "privileged, baseline, restricted") {
			t.Errorf("level %q: err = %v", level, err)
		}
	}
}

func TestMalformed(t *testing.T) {
	for _, c := range []struct{ name, manifest, want string }{
		{"bad yaml", cleanDeployment + "---\n# Source: media/templates/broken.yaml\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: broken\n   labels: x\n",
			`document 2 (Deployment, from media/templates/broken.yaml, starting at line 16): yaml: line 6: `},
		{"bad yaml unknown kind", "---\n\n---\nfoo: [1, 2\n", `document 1 (starting at line 4): `},
		{"wrong type", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: typo, namespace: media}\nspec:\n  template:\n    spec:\n      containers: nope\n",
			`document 2 (starting at line 5): Deployment media/typo: json: cannot unmarshal string`},
		{"not an object", "- a\n- b\n", `document 1 (starting at line 1): not a Kubernetes object`},
		{"tab indentation", "apiVersion: v1\nkind: Pod\nmetadata:\n\tname: x\n", `document 1 (Pod, starting at line 1): `},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Evaluate([]byte(c.manifest), "baseline", "media")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to contain %q", err, c.want)
			}
			t.Log(err)
		})
	}
}

func TestMessage(t *testing.T) {
	if Message("web", "apps", "baseline", nil) != "" {
		t.Fatal("no findings must give no message")
	}
	m := hostPathDeployment + "---\n" + driDeployment
	f, err := Evaluate([]byte(m), "baseline", "media")
	if err != nil {
		t.Fatal(err)
	}
	f = append(f, Finding{Kind: "Deployment", Namespace: "media", Name: "jellyfin", Container: "jellyfin", Check: "privileged",
		Detail: `container "jellyfin" must not set securityContext.privileged=true`})
	msg := Message("jellyfin", "media", "baseline", f)
	t.Log("\n" + msg)
	for _, want := range []string{
		`helm release "jellyfin" would create pods that namespace "media" (PodSecurity "baseline") rejects:`,
		`  - Deployment media/jellyfin: hostPath volumes (volume "media"; host path /var/mnt/data/media)`,
		`  - Deployment media/frigate: hostPath volumes (volume "dri"; host path /dev/dri)`,
		`  - Deployment media/jellyfin, container jellyfin: privileged (container "jellyfin" must not set securityContext.privileged=true)`,
		`step "kubernetes_namespace" "media" {`,
		`pod_security = "privileged"`,
		"visible in git",
		"ACCEPTED with only a warning",
		"ReplicaSet",
		"fails to create",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q", want)
		}
	}
	if strings.Count(msg, `step "kubernetes_namespace"`) != 1 {
		t.Errorf("one namespace, one step expected")
	}
}
