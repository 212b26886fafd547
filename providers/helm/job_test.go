package helm_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/helm"
)

// The Job tests run against the lab's API server, whose Job controller
// is real and whose one node is kwok's: a Job's pod is scheduled, runs
// (no container really starts) and succeeds, or fails when annotated
// migrate.test/fail (scripts/kwok-stages/pod-fail.yaml).

// madeNamespace is createNamespace for pods: it waits for the
// namespace's default ServiceAccount.
func (k *kube) madeNamespace(t testing.TB, prefix string) string {
	t.Helper()
	ns := k.createNamespace(t, prefix)
	// Pods are refused until the controller manager made the default
	// ServiceAccount, and the Job controller then backs off for seconds.
	waitFor(t, "the default ServiceAccount of "+ns, func() bool {
		_, err := k.client.CoreV1().ServiceAccounts(ns).Get(context.Background(), "default", metav1.GetOptions{})
		return err == nil
	})
	return ns
}

// pod is a Job's pod template: one container, with the annotations and
// spec fields given.
func podTemplate(annotations map[string]string, spec map[string]cty.Value) cty.Value {
	container := map[string]cty.Value{
		"name":    str("restore"),
		"image":   str("registry.local/restore:1.0"),
		"command": cty.TupleVal([]cty.Value{str("sh"), str("-c"), str("echo restored")}),
	}
	if c, ok := spec["container"]; ok {
		for k, v := range c.AsValueMap() {
			container[k] = v
		}
		delete(spec, "container")
	}
	s := map[string]cty.Value{"containers": cty.TupleVal([]cty.Value{cty.ObjectVal(container)})}
	for k, v := range spec {
		s[k] = v
	}
	tmpl := map[string]cty.Value{"spec": cty.ObjectVal(s)}
	if len(annotations) > 0 {
		tmpl["metadata"] = obj(map[string]cty.Value{"annotations": strMap(annotations)})
	}
	return obj(map[string]cty.Value{"template": cty.ObjectVal(tmpl)})
}

func jobConfig(k *kube, ns, name string, job cty.Value, extra map[string]cty.Value) cty.Value {
	attrs := map[string]cty.Value{"namespace": str(ns), "name": str(name), "job": job, "timeout": str("5m"), "kubeconfig": str(k.path)}
	for n, v := range extra {
		attrs[n] = v
	}
	return obj(attrs)
}

// jobs lists the Job objects of a namespace: name, UID and creation time.
func (k *kube) jobs(t testing.TB, ns string) []string {
	t.Helper()
	list, err := k.client.BatchV1().Jobs(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, j := range list.Items {
		out = append(out, fmt.Sprintf("%s %s %s", j.Name, j.UID, j.CreationTimestamp.UTC().Format(time.RFC3339)))
	}
	return out
}

func outputString(t testing.TB, out cty.Value, name string) string {
	t.Helper()
	v, _ := out.GetAttr(name).Unmark()
	if v.Type() == cty.Bool {
		return fmt.Sprint(v.True())
	}
	return v.AsString()
}

// TestJobRunsOnce: a Job runs to completion; its outputs name it and its
// pod; applied again with the same inputs (a run resumed after a crash,
// or a new run) it is found complete and not run again: one Job object,
// the same UID and creation time. kwok serves no logs, said once.
func TestJobRunsOnce(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.madeNamespace(t, "job")
	cfg := jobConfig(k, ns, "restore", podTemplate(nil, nil), nil)

	pl := mustPlan(t, p, helm.Job, "restore", cfg)
	contains(t, "the plan", pl.Diff, "+ Job "+ns+"/restore: create it and wait up to 5m", "namespace "+ns+": PodSecurity baseline", "echo restored", "restartPolicy: Never", "backoffLimit: 0", "migrate.dev/inputs-hash")
	contains(t, "the plan's irreversible note", pl.Irreversible, "rollback deletes the Job object; what it did is not undone")

	var log bytes.Buffer
	a := apply(t, p, helm.Job, "restore", cfg, nil, &log)
	if err := a.Diagnostics.Err(); err != nil {
		t.Fatalf("Apply: %v\nlog:\n%s", err, log.String())
	}
	contains(t, "the log", log.String(), "created Job "+ns+"/restore", "completed (pod restore-")
	// Said at most once: a Job that completes before its pod is first
	// looked at has no pod followed, so nothing to say (a race this test
	// must not assert on).
	if n := strings.Count(log.String(), "no logs: the node does not serve them"); n > 1 {
		t.Errorf("the log says %d times that the node serves no logs, want once at most:\n%s", n, log.String())
	}
	if got := outputString(t, a.Outputs, "succeeded"); got != "true" {
		t.Errorf("output succeeded = %s", got)
	}
	if got := outputString(t, a.Outputs, "pod"); !strings.HasPrefix(got, "restore-") {
		t.Errorf("output pod = %q, want the Job's pod", got)
	}
	if got := outputString(t, a.Outputs, "name") + " " + outputString(t, a.Outputs, "namespace"); got != "restore "+ns {
		t.Errorf("outputs name and namespace = %q", got)
	}
	if a.Revert == nil || !strings.Contains(a.Revert.Description, "what it did is not undone") {
		t.Errorf("revertOf = %+v", a.Revert)
	}
	before := k.jobs(t, ns)
	if len(before) != 1 {
		t.Fatalf("jobs after the first apply: %v", before)
	}

	// The same inputs again, as after a crash that lost the record.
	if r := read(t, p, helm.Job, "restore", cfg, nil); r.Observation != providers.Present || r.Revert == nil {
		t.Errorf("Read without a record of a completed Job: %v, revert data %v", r.Observation, r.Revert)
	}
	pl = mustPlan(t, p, helm.Job, "restore", cfg)
	contains(t, "the plan of a completed Job", pl.Diff, "Job "+ns+"/restore with these inputs already completed: it is not run again")
	log.Reset()
	again := apply(t, p, helm.Job, "restore", cfg, nil, &log)
	if err := again.Diagnostics.Err(); err != nil {
		t.Fatalf("Apply again: %v", err)
	}
	contains(t, "the log of the second apply", log.String(), "already completed")
	if strings.Contains(log.String(), "created Job") {
		t.Errorf("the second apply created a Job:\n%s", log.String())
	}
	if after := k.jobs(t, ns); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("jobs after applying again: %v, before: %v", after, before)
	}
	if r := read(t, p, helm.Job, "restore", cfg, priorOf(a)); r.Observation != providers.Present {
		t.Errorf("Read after Apply: %v %s", r.Observation, r.Detail)
	}
}

// TestJobFailsWithThePodsReason: a pod that fails fails the Job (backoff
// limit 0) through the real Job controller, and the step with the Job's
// and the pod's reason, exit code and message; the plan then says it
// runs again, and the next apply replaces it.
func TestJobFailsWithThePodsReason(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.madeNamespace(t, "jobfail")
	cfg := jobConfig(k, ns, "restore", podTemplate(map[string]string{"migrate.test/fail": "RestoreFailed", "migrate.test/fail-message": "dump not found"}, nil), nil)
	var log bytes.Buffer
	a := apply(t, p, helm.Job, "restore", cfg, nil, &log)
	err := a.Diagnostics.Err()
	if err == nil {
		t.Fatalf("a failing Job's step succeeded; log:\n%s", log.String())
	}
	contains(t, "the error", err.Error(), "kubernetes_job.restore: Job "+ns+"/restore failed (BackoffLimitExceeded", "Pod restore-", "container restore terminated: RestoreFailed, exit code 1 (dump not found)", "no logs: the node does not serve them")
	if a.Revert == nil {
		t.Error("a failed Job returned no revert data: rollback could not delete it")
	}
	pl := mustPlan(t, p, helm.Job, "restore", cfg)
	contains(t, "the plan after the failure", pl.Diff, "-/+ Job "+ns+"/restore with these inputs failed (BackoffLimitExceeded", "runs it again")
	first := k.jobs(t, ns)
	a = apply(t, p, helm.Job, "restore", cfg, nil, &log)
	if a.Diagnostics.Err() == nil {
		t.Fatal("the Job run again succeeded")
	}
	if after := k.jobs(t, ns); len(after) != 1 || after[0] == first[0] {
		t.Errorf("jobs after running again: %v, before %v", after, first)
	}
}

// TestJobResumesTheSameJob: an apply interrupted while its Job runs, and
// one that times out, leave the Job running; the next apply waits for
// that same Job, which then completes: one Job object all along.
func TestJobResumesTheSameJob(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.madeNamespace(t, "jobresume")
	// Its pod waits for a node labelled so; the test labels talos-lab
	// once the interruptions are done.
	label := "migrate.test/" + ns
	cfg := jobConfig(k, ns, "restore", podTemplate(nil, map[string]cty.Value{"nodeSelector": strMap(map[string]string{label: "yes"})}), nil)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan providers.ApplyResponse)
	go func() {
		done <- p.Apply(ctx, providers.ApplyRequest{Type: helm.Job, Addr: addr(helm.Job, "restore"), Config: cfg, Log: &bytes.Buffer{}})
	}()
	waitFor(t, "the Job to be created", func() bool { return len(k.jobs(t, ns)) == 1 })
	created := k.jobs(t, ns)
	cancel()
	select {
	case r := <-done:
		contains(t, "the interrupted apply's error", fmt.Sprint(r.Diagnostics.Err()), "was stopped before it finished")
	case <-time.After(30 * time.Second):
		t.Fatal("the apply did not return after its context was cancelled")
	}

	short := jobConfig(k, ns, "restore", podTemplate(nil, map[string]cty.Value{"nodeSelector": strMap(map[string]string{label: "yes"})}), map[string]cty.Value{"timeout": str("3s")})
	var log bytes.Buffer
	r := apply(t, p, helm.Job, "restore", short, nil, &log)
	contains(t, "the timed-out apply's error", fmt.Sprint(r.Diagnostics.Err()), "did not complete within 3s", "left running", "the next run waits for the same Job", "Pending")
	contains(t, "the log", log.String(), "with these inputs is running")
	if got := k.jobs(t, ns); fmt.Sprint(got) != fmt.Sprint(created) {
		t.Fatalf("jobs after the timeout: %v, want %v", got, created)
	}

	k.labelNode(t, "talos-lab", label, "yes")
	log.Reset()
	r = apply(t, p, helm.Job, "restore", cfg, nil, &log)
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Apply after the label: %v\nlog:\n%s", err, log.String())
	}
	contains(t, "the log", log.String(), "with these inputs is running", "completed (pod restore-")
	if got := k.jobs(t, ns); fmt.Sprint(got) != fmt.Sprint(created) {
		t.Errorf("jobs at the end: %v, want the one created first: %v", got, created)
	}
}

// labelNode sets a label on a node until the test ends.
func (k *kube) labelNode(t testing.TB, node, key, value string) {
	t.Helper()
	patch := func(v any) []byte {
		b := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%s}}}`, key, v)
		return b
	}
	nodes := k.client.CoreV1().Nodes()
	if _, err := nodes.Patch(context.Background(), node, types.MergePatchType, patch(fmt.Sprintf("%q", value)), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		nodes.Patch(context.Background(), node, types.MergePatchType, patch("null"), metav1.PatchOptions{})
	})
}

// waitFor polls cond for a generous while: the machine is slow under load.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestJobReplacedWhenInputsChange: other inputs plan a replacement, and
// apply deletes the old Job (propagation Foreground) before creating
// the new one.
func TestJobReplacedWhenInputsChange(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.madeNamespace(t, "jobnew")
	a := mustApply(t, p, helm.Job, "restore", jobConfig(k, ns, "restore", podTemplate(nil, nil), nil), nil)
	first := k.jobs(t, ns)
	cfg := jobConfig(k, ns, "restore", podTemplate(nil, map[string]cty.Value{"container": obj(map[string]cty.Value{"args": cty.TupleVal([]cty.Value{str("v2")})})}), nil)
	pl := mustPlan(t, p, helm.Job, "restore", cfg)
	contains(t, "the plan", pl.Diff, "-/+ Job "+ns+"/restore was made with other inputs", "propagation Foreground")
	mustApply(t, p, helm.Job, "restore", cfg, priorOf(a))
	if got := k.jobs(t, ns); len(got) != 1 || got[0] == first[0] {
		t.Errorf("jobs after the replacement: %v, before: %v", got, first)
	}
	j, err := k.client.BatchV1().Jobs(ns).Get(context.Background(), "restore", metav1.GetOptions{})
	if err != nil || len(j.Spec.Template.Spec.Containers[0].Args) != 1 {
		t.Errorf("the new Job: %v %+v", err, j)
	}
}

// TestJobRevertTwice: the revert deletes the Job (propagation
// Background); run again (a rollback resumed), it finds nothing to do.
func TestJobRevertTwice(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.madeNamespace(t, "jobrevert")
	cfg := jobConfig(k, ns, "restore", podTemplate(nil, nil), nil)
	a := mustApply(t, p, helm.Job, "restore", cfg, nil)
	revert(t, p, helm.Job, "restore", cfg, a.Revert)
	waitFor(t, "the Job to be deleted", func() bool { return len(k.jobs(t, ns)) == 0 })
	revert(t, p, helm.Job, "restore", cfg, a.Revert)
}

// TestJobPodSecurityInPlan: a privileged container in a namespace that
// enforces baseline fails the plan, naming the Job, the container and
// the field; the same Job in a privileged namespace plans.
func TestJobPodSecurityInPlan(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.madeNamespace(t, "jobpss")
	privileged := podTemplate(nil, map[string]cty.Value{"container": obj(map[string]cty.Value{
		"securityContext": obj(map[string]cty.Value{"privileged": cty.True}),
	})})
	r := plan(t, p, helm.Job, "restore", jobConfig(k, ns, "restore", privileged, nil))
	contains(t, "the plan's error", fmt.Sprint(r.Diagnostics.Err()), "kubernetes_job.restore: Job "+ns+"/restore would create pods that namespace "+ns+" (PodSecurity baseline", "Job "+ns+"/restore, container restore: privileged", "securityContext.privileged=true")
	if len(k.jobs(t, ns)) != 0 {
		t.Error("the plan created a Job")
	}
	mustApply(t, p, helm.Namespace, ns, obj(map[string]cty.Value{"name": str(ns), "pod_security": str("privileged")}), nil)
	mustPlan(t, p, helm.Job, "restore", jobConfig(k, ns, "restore", privileged, nil))
}

// TestJobBadInput: mistakes are errors naming the step, never panics.
func TestJobBadInput(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	for _, c := range []struct {
		cfg  cty.Value
		want string
	}{
		{obj(map[string]cty.Value{"namespace": str("x"), "name": str("y")}), "needs exactly one of job"},
		{jobConfig(k, "x", "y", podTemplate(nil, nil), map[string]cty.Value{"file": str("job.yaml")}), "it sets both"},
		{jobConfig(k, "x", "y", obj(map[string]cty.Value{"template": obj(map[string]cty.Value{"spec": obj(map[string]cty.Value{"restart_policy": str("Never")})})}), nil), `unknown field "template.spec.restart_policy"`},
		{jobConfig(k, "x", "y", obj(map[string]cty.Value{"ttlSecondsAfterFinished": cty.NumberIntVal(60), "template": podTemplate(nil, nil).GetAttr("template")}), nil), "ttlSecondsAfterFinished"},
		{jobConfig(k, "x", "Y_", podTemplate(nil, nil), nil), "not a valid Job name"},
		{jobConfig(k, "x", "y", podTemplate(nil, nil), map[string]cty.Value{"timeout": str("soon")}), "positive duration"},
		{obj(map[string]cty.Value{"namespace": str("x"), "name": str("y"), "file": str("no-such-job.yaml")}), "no-such-job.yaml"},
	} {
		r := plan(t, p, helm.Job, "bad", c.cfg)
		err := r.Diagnostics.Err()
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "kubernetes_job.bad") {
			t.Errorf("plan error %v, want one naming kubernetes_job.bad and saying %q", err, c.want)
		}
	}
}

// TestJobFromFile: a YAML file with a whole Job; the step's name and
// namespace win over the file's.
func TestJobFromFile(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.madeNamespace(t, "jobfile")
	file := t.TempDir() + "/job.yaml"
	if err := writeFile(file, []byte("apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: other\n  namespace: elsewhere\n  labels: {app: restore}\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n      - name: restore\n        image: registry.local/restore:1.0\n")); err != nil {
		t.Fatal(err)
	}
	cfg := obj(map[string]cty.Value{"namespace": str(ns), "name": str("restore"), "file": str(file), "timeout": str("2m")})
	a := mustApply(t, p, helm.Job, "restore", cfg, nil)
	if got := outputString(t, a.Outputs, "name"); got != "restore" {
		t.Errorf("output name %q", got)
	}
	j, err := k.client.BatchV1().Jobs(ns).Get(context.Background(), "restore", metav1.GetOptions{})
	if err != nil || j.Labels["app"] != "restore" || !hasCondition(j, batchv1.JobComplete) {
		t.Errorf("the Job from the file: %v %+v", err, j)
	}
}

func hasCondition(j *batchv1.Job, c batchv1.JobConditionType) bool {
	for _, x := range j.Status.Conditions {
		if x.Type == c && x.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// TestJobPlanRedactsSensitiveEnv: an env value from a sensitive variable
// is shown redacted in the plan's Job, even one too short for the
// scrubber to look for in text.
func TestJobPlanRedactsSensitiveEnv(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.madeNamespace(t, "jobenv")
	env := cty.TupleVal([]cty.Value{
		obj(map[string]cty.Value{"name": str("PGPASSWORD"), "value": str("x9").Mark(phases.SensitiveMark)}),
		obj(map[string]cty.Value{"name": str("PGUSER"), "value": str("synapse")}),
	})
	cfg := jobConfig(k, ns, "restore", podTemplate(nil, map[string]cty.Value{"container": obj(map[string]cty.Value{"env": env})}), nil)
	r := mustPlan(t, p, helm.Job, "restore", cfg)
	contains(t, "the plan", r.Diff, "name: PGPASSWORD\n", "value: "+phases.Redacted, "value: synapse")
	if strings.Contains(r.Diff, "x9") {
		t.Errorf("the plan shows the sensitive value:\n%s", r.Diff)
	}
}

// TestJobPlanBeforeTheCluster: with a kubeconfig an earlier step writes
// (not known yet), the plan still builds the Job and checks its pods
// against PodSecurity; only the live Job is left to the run.
func TestJobPlanBeforeTheCluster(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	later := map[string]cty.Value{"kubeconfig": cty.UnknownVal(cty.String)}
	r := mustPlan(t, p, helm.Job, "restore", jobConfig(k, "matrix", "restore", podTemplate(nil, nil), later))
	contains(t, "the plan", r.Diff, "the live Job; the cluster cannot be read yet", "+ Job matrix/restore: create it", "namespace matrix: PodSecurity baseline (the cluster default)")
	privileged := podTemplate(nil, map[string]cty.Value{"container": obj(map[string]cty.Value{"securityContext": obj(map[string]cty.Value{"privileged": cty.True})})})
	r = plan(t, p, helm.Job, "restore", jobConfig(k, "matrix", "restore", privileged, later))
	contains(t, "the plan's error", fmt.Sprint(r.Diagnostics.Err()), "Job matrix/restore, container restore: privileged")
	r = mustPlan(t, p, helm.Job, "restore", jobConfig(k, "matrix", "restore", podTemplate(nil, nil), map[string]cty.Value{"name": cty.UnknownVal(cty.String)}))
	contains(t, "the plan of a Job not known yet", r.Diff, "inputs known after earlier steps apply")
}
