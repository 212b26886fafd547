package podsecurity

import (
	"fmt"
	"strings"
	"testing"
)

// benchManifest is a Helm-style render of about 20 objects: workloads clean
// and violating, and the Services, ConfigMaps and Secrets around them.
func benchManifest() []byte {
	var b strings.Builder
	doc := func(source, body string) {
		fmt.Fprintf(&b, "---\n# Source: homelab/templates/%s\n%s", source, body)
	}
	for i := range 4 {
		doc(fmt.Sprintf("web-%d.yaml", i), strings.ReplaceAll(cleanDeployment, "name: web", fmt.Sprintf("name: web-%d", i)))
		doc(fmt.Sprintf("svc-%d.yaml", i), fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata:\n  name: web-%d\nspec:\n  ports: [{port: 80}]\n", i))
	}
	doc("jellyfin.yaml", hostPathDeployment)
	doc("frigate.yaml", driDeployment)
	doc("runner.yaml", privilegedRunner)
	doc("agent.yaml", hostNetworkDaemonSet)
	doc("synapse.yaml", restrictedDeployment)
	doc("scrub.yaml", hostPathCronJob)
	doc("dns.yaml", hostPortPod)
	doc("mixed.yaml", mixedStatefulSet)
	for i := range 3 {
		doc(fmt.Sprintf("cm-%d.yaml", i), fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg-%d\ndata:\n  config.yaml: |\n    key: value\n    other: %d\n", i, i))
	}
	doc("secret.yaml", "apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\nstringData:\n  password: hunter2\n")
	return []byte(b.String())
}

func TestBenchManifest(t *testing.T) {
	m := benchManifest()
	if n := strings.Count(string(m), "\nkind: "); n != 20 {
		t.Fatalf("benchmark manifest has %d objects, want 20", n)
	}
	f, err := Evaluate(m, "baseline", "bench")
	if err != nil {
		t.Fatal(err)
	}
	if len(f) != 12 {
		t.Fatalf("%d findings: %q", len(f), keys(f))
	}
}

func BenchmarkEvaluate20Objects(b *testing.B) {
	m := benchManifest()
	for _, level := range []string{"baseline", "restricted"} {
		b.Run(level, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(m)))
			for b.Loop() {
				if _, err := Evaluate(m, level, "bench"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
