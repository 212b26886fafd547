package scheduling_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/homelab-migrate/migrate/providers/helm/scheduling"
)

var controlPlane = corev1.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}

func node(name string, taints ...corev1.Taint) scheduling.Node {
	return scheduling.Node{
		Name:        name,
		Labels:      map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
		Taints:      taints,
		Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1950m"), corev1.ResourceMemory: resource.MustParse("3584Mi")},
	}
}

const deployment = `apiVersion: apps/v1
kind: Deployment
metadata: {name: jellyfin, namespace: media}
spec:
  selector: {matchLabels: {app: jellyfin}}
  template:
    metadata: {labels: {app: jellyfin}}
    spec:
      %s
      containers:
      - name: jellyfin
        image: jellyfin/jellyfin:10.10.3
        resources: {requests: {cpu: %s, memory: 1Gi}}
`

func manifest(podSpec, cpu string) []byte {
	return []byte(strings.Replace(strings.Replace(deployment, "%s", podSpec, 1), "%s", cpu, 1))
}

func TestJudge(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		podSpec string
		cpu     string
		nodes   []scheduling.Node
		refused []string // what the finding says, "" when the pod schedules
	}{
		{"tainted control plane", "", "500m", []scheduling.Node{node("talos-home", controlPlane)},
			[]string{"Deployment media/jellyfin", "node talos-home: untolerated taint node-role.kubernetes.io/control-plane:NoSchedule", "allowSchedulingOnControlPlanes: true"}},
		{"tolerated", "tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}]", "500m", []scheduling.Node{node("talos-home", controlPlane)}, nil},
		{"untainted", "", "500m", []scheduling.Node{node("talos-home")}, nil},
		{"PreferNoSchedule does not refuse", "", "500m", []scheduling.Node{node("talos-home", corev1.Taint{Key: "x", Effect: corev1.TaintEffectPreferNoSchedule})}, nil},
		{"other taint", "", "500m", []scheduling.Node{node("talos-home", corev1.Taint{Key: "gpu", Value: "yes", Effect: corev1.TaintEffectNoExecute})},
			[]string{"untolerated taint gpu=yes:NoExecute", "toleration {key: gpu", "machine.nodeTaints"}},
		{"nodeSelector nothing matches", "nodeSelector: {disk: ssd}", "500m", []scheduling.Node{node("talos-home")},
			[]string{"its nodeSelector or required node affinity does not match", "kubernetes.io/hostname=talos-home", "machine.nodeLabels"}},
		{"affinity that matches", "affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/os, operator: In, values: [linux]}]}]}}}", "500m", []scheduling.Node{node("talos-home")}, nil},
		{"requests above the node", "", "4", []scheduling.Node{node("rehearsal")},
			[]string{"insufficient cpu: the pod requests 4, the node has 1950m allocatable", "lower the pod's requests"}},
		{"one node of two accepts", "", "500m", []scheduling.Node{node("cp", controlPlane), node("worker")}, nil},
		{"cordoned", "", "500m", []scheduling.Node{func() scheduling.Node { n := node("talos-home"); n.Unschedulable = true; return n }()},
			[]string{"cordoned"}},
		{"no node known: nothing judged", "", "500m", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			findings, err := scheduling.Evaluate(manifest(tc.podSpec, tc.cpu), tc.nodes, "default")
			if err != nil {
				t.Fatal(err)
			}
			if tc.refused == nil {
				if len(findings) != 0 {
					t.Fatalf("refused: %s", scheduling.Message("release jellyfin", findings))
				}
				return
			}
			if len(findings) != 1 {
				t.Fatalf("%d findings, want 1", len(findings))
			}
			msg := scheduling.Message("release jellyfin", findings)
			for _, want := range append(tc.refused, "No node would accept the pods of release jellyfin") {
				if !strings.Contains(msg, want) {
					t.Errorf("message lacks %q:\n%s", want, msg)
				}
			}
		})
	}
}

func TestEvaluateNamesTheBadDocument(t *testing.T) {
	t.Parallel()
	_, err := scheduling.Evaluate([]byte("kind: Deployment\napiVersion: apps/v1\nspec: [\n"), []scheduling.Node{node("n")}, "default")
	if err == nil || !strings.Contains(err.Error(), "document 1") {
		t.Errorf("err = %v", err)
	}
}
