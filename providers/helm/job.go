package helm

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/zclconf/go-cty/cty"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/helm/podsecurity"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// Job is the kubernetes_job step type.
const Job = "kubernetes_job"

const (
	// annHash marks a Job migrate created with the SHA-256 of its inputs:
	// the same Job found after a crash is waited for or counted as done,
	// never created a second time.
	annHash    = "migrate.dev/inputs-hash"
	jobTimeout = "30m"
	jobPoll    = time.Second
	logTail    = 20
	// noLogs is said once when the node serves no logs (kwok does not).
	noLogs = "no logs: the node does not serve them"
	// jobIrreversible is what the plan lists: the Job's effect stays.
	jobIrreversible = "rollback deletes the Job object; what it did is not undone"
)

// jobAttrs are the attributes of a kubernetes_job step.
type jobAttrs struct {
	Name         string    `cty:"name" required:"true" doc:"The Job's name."`
	Namespace    string    `cty:"namespace" required:"true" doc:"The Job's namespace."`
	Job          cty.Value `cty:"job" doc:"The Job's spec as an HCL object with Kubernetes field names ({ template = { spec = { containers = [...] } } }); exactly one of job and file."`
	File         string    `cty:"file" doc:"A YAML file, relative to the runbook, holding a whole batch/v1 Job; the step's name and namespace win over its own. Exactly one of job and file."`
	Timeout      string    `cty:"timeout" doc:"How long to wait for the Job to complete, \"30m\" by default; a Job still running then is left running, and the next run waits for it."`
	BackoffLimit *int      `cty:"backoff_limit" doc:"How many failed pods the Job retries before it fails (spec.backoffLimit), 0 by default."`
	Kubeconfig   string    `cty:"kubeconfig" doc:"Path to a kubeconfig for this step, relative to the runbook (such as talos_kubeconfig.admin.path); default the provider's."`
}

// jobOut are the outputs of a kubernetes_job step.
type jobOut struct {
	Name      string `cty:"name"`
	Namespace string `cty:"namespace"`
	Succeeded bool   `cty:"succeeded"`
	Pod       string `cty:"pod"`
}

// jobPrivate is kept in state: the pod that completed.
type jobPrivate struct {
	Pod string `json:"pod,omitempty"`
}

// jobInverse names the Job rollback deletes.
type jobInverse struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

var jobStep = &sdk.StepType[*Provider, jobAttrs, jobPrivate, jobInverse]{
	Name:        Job,
	Description: "Runs a Kubernetes Job to completion, once: a Job of the same name and inputs that already completed is not run again, one still running is waited for. Streams its pods' logs; fails with the pod's reason and last log lines. Rollback deletes the Job object; what it did is not undone.",
	Rollback:    "Deletes the Job object (propagation Background); what the Job did is not undone, and the plan lists it so.",
	Outputs:     jobOut{},
	// A kubeconfig written by an earlier step of the run does not defer
	// the PodSecurity preflight.
	Unknowns: true,
	Validate: validateJob,
	Read:     readJob,
	Plan:     planJob,
	Apply:    applyJob,
	Revert:   revertJob,
	// A changed job file changes the step's inputs.
	Digest: func(_ context.Context, c *call, a jobAttrs) (string, phases.Diagnostics) {
		j, _, diags := buildJob(c, a)
		if diags.HasErrors() {
			return "", diags
		}
		return j.Annotations[annHash], nil
	},
}

func validateJob(c *call, a *jobAttrs) phases.Diagnostics {
	if c.Null("timeout") {
		a.Timeout = jobTimeout
	}
	var diags phases.Diagnostics
	bad := func(summary, format string, args ...any) {
		diags = append(diags, phases.Errorf(summary, format, args...)...)
	}
	if errs := validation.IsDNS1123Label(a.Name); len(errs) > 0 && !c.Unknown("name") {
		bad("Invalid Job Name", "%q is not a valid Job name for %s: %s.", a.Name, c.Addr, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Label(a.Namespace); len(errs) > 0 && !c.Unknown("namespace") {
		bad("Invalid Namespace Name", "%q is not a valid namespace for %s: %s.", a.Namespace, c.Addr, strings.Join(errs, "; "))
	}
	switch hasJob, hasFile := !c.Null("job"), !c.Null("file"); {
	case c.Unknown("job") || c.Unknown("file"):
	case hasJob == hasFile:
		which := map[bool]string{false: "neither", true: "both"}[hasJob]
		bad("Invalid Job Source", "%s needs exactly one of job (the Job's spec as an HCL object) and file (a YAML file holding a whole batch/v1 Job); it sets %s.", c.Addr, which)
	case hasJob && !a.Job.Type().IsObjectType() && !a.Job.Type().IsMapType():
		bad("Incorrect Attribute Type", "The \"job\" attribute of %s must be an object (the Job's spec), not %s.", c.Addr, a.Job.Type().FriendlyName())
	}
	if d, err := time.ParseDuration(a.Timeout); (err != nil || d <= 0) && !c.Unknown("timeout") {
		bad("Invalid Timeout", "The timeout of %s must be a positive duration such as \"30m\", not %q.", c.Addr, a.Timeout)
	}
	if a.BackoffLimit != nil && *a.BackoffLimit < 0 {
		bad("Invalid Backoff Limit", "backoff_limit of %s must be 0 or more, not %d.", c.Addr, *a.BackoffLimit)
	}
	return diags
}

// buildJob is the Job the step creates, and the same Job as the plan
// shows it: string values from sensitive variables redacted. Its
// annotation annHash is the SHA-256 of the Job's labels, annotations and
// spec.
func buildJob(c *call, a jobAttrs) (job, shown *batchv1.Job, diags phases.Diagnostics) {
	if a.File != "" {
		path := c.Settings.abs(a.File)
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, phases.Errorf("Cannot Read Job File", "%s: %v.", c.Addr, err)
		}
		job = &batchv1.Job{}
		if err := yaml.UnmarshalStrict(b, job); err != nil {
			return nil, nil, phases.Errorf("Invalid Job File", "%s: %s is not a valid Job: %v.", c.Addr, a.File, err)
		}
		if job.Kind != "Job" || job.APIVersion != "batch/v1" {
			return nil, nil, phases.Errorf("Invalid Job File", "%s: %s holds a %s %s, not a batch/v1 Job.", c.Addr, a.File, job.APIVersion, job.Kind)
		}
		shown = job.DeepCopy()
	} else {
		if job, diags = jobFromHCL(c, a.Job, nil); diags.HasErrors() {
			return nil, nil, diags
		}
		if shown, diags = jobFromHCL(c, a.Job, c.SensitivePath); diags.HasErrors() {
			return nil, nil, diags
		}
	}
	for _, j := range []*batchv1.Job{job, shown} {
		if diags := complete(c, a, j); diags.HasErrors() {
			return nil, nil, diags
		}
	}
	delete(job.Annotations, annHash)
	canon, err := json.Marshal(struct {
		Labels, Annotations map[string]string
		Spec                batchv1.JobSpec
	}{job.Labels, job.Annotations, job.Spec})
	if err != nil {
		return nil, nil, phases.FromError("Cannot Hash Job", err)
	}
	sum := sha256.Sum256(canon)
	for _, j := range []*batchv1.Job{job, shown} {
		if j.Annotations == nil {
			j.Annotations = map[string]string{}
		}
		j.Annotations[annHash] = hex.EncodeToString(sum[:])
	}
	return job, shown, nil
}

// jobFromHCL decodes the job attribute as a JobSpec, strictly: a
// misspelt field is an error, not a field silently dropped.
func jobFromHCL(c *call, v cty.Value, hide func(cty.Path) bool) (*batchv1.Job, phases.Diagnostics) {
	raw, err := json.Marshal(ctyAny(v, cty.GetAttrPath("job"), hide))
	if err != nil {
		return nil, phases.FromError("Invalid Job", err)
	}
	job := &batchv1.Job{}
	strict, err := kjson.UnmarshalStrict(raw, &job.Spec)
	if err == nil && len(strict) > 0 {
		err = errors.Join(strict...)
	}
	if err != nil {
		return nil, phases.Errorf("Invalid Job", "The \"job\" attribute of %s is not a valid Job spec: %v. Fields use the Kubernetes names (restartPolicy, not restart_policy).", c.Addr, err)
	}
	return job, nil
}

// complete sets what the step decides over the spec: name, namespace,
// restart policy and backoff limit defaults.
func complete(c *call, a jobAttrs, j *batchv1.Job) phases.Diagnostics {
	j.TypeMeta = metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"}
	j.ObjectMeta = metav1.ObjectMeta{Name: a.Name, Namespace: a.Namespace, Labels: j.Labels, Annotations: j.Annotations}
	j.Status = batchv1.JobStatus{}
	if j.Spec.Template.Spec.RestartPolicy == "" {
		j.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
	}
	switch {
	case a.BackoffLimit != nil:
		j.Spec.BackoffLimit = ptr(int32(*a.BackoffLimit))
	case j.Spec.BackoffLimit == nil:
		j.Spec.BackoffLimit = ptr(int32(0))
	}
	if j.Spec.TTLSecondsAfterFinished != nil {
		return phases.Errorf("Invalid Job", "%s sets ttlSecondsAfterFinished: the Job would be deleted once finished, and with it the proof that it ran, so the next run would run it again. Remove it; rollback deletes the Job.", c.Addr)
	}
	if len(j.Spec.Template.Spec.Containers) == 0 {
		return phases.Errorf("Invalid Job", "The Job of %s has no containers: set template.spec.containers.", c.Addr)
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// ctyAny turns an HCL value into JSON-able Go values; strings at paths
// hide says are sensitive become phases.Redacted.
func ctyAny(v cty.Value, p cty.Path, hide func(cty.Path) bool) any {
	if v.IsNull() || !v.IsKnown() {
		return nil
	}
	t := v.Type()
	switch {
	case t == cty.String:
		if hide != nil && hide(p) {
			return phases.Redacted
		}
		return v.AsString()
	case t == cty.Bool:
		return v.True()
	case t == cty.Number:
		if i, acc := v.AsBigFloat().Int64(); acc == big.Exact {
			return i
		}
		f, _ := v.AsBigFloat().Float64()
		return f
	case t.IsObjectType() || t.IsMapType():
		out := map[string]any{}
		for it := v.ElementIterator(); it.Next(); {
			k, e := it.Element()
			var step cty.PathStep = cty.IndexStep{Key: k}
			if t.IsObjectType() {
				step = cty.GetAttrStep{Name: k.AsString()}
			}
			out[k.AsString()] = ctyAny(e, append(p.Copy(), step), hide)
		}
		return out
	}
	out := []any{}
	if v.CanIterateElements() {
		for it := v.ElementIterator(); it.Next(); {
			k, e := it.Element()
			out = append(out, ctyAny(e, append(p.Copy(), cty.IndexStep{Key: k}), hide))
		}
	}
	return out
}

// jobFound is what the cluster holds under the step's Job name.
type jobFound int

const (
	jobNone     jobFound = iota
	jobForeign           // not made by migrate: no inputs hash
	jobOther             // made with other inputs
	jobDeleting          // being deleted
	jobRunning           // these inputs, not finished
	jobComplete          // these inputs, completed
	jobFailed            // these inputs, failed
)

func classify(live *batchv1.Job, hash string) jobFound {
	switch {
	case live == nil:
		return jobNone
	case live.DeletionTimestamp != nil:
		return jobDeleting
	case live.Annotations[annHash] == "":
		return jobForeign
	case live.Annotations[annHash] != hash:
		return jobOther
	case condition(live, batchv1.JobComplete):
		return jobComplete
	case condition(live, batchv1.JobFailed):
		return jobFailed
	}
	return jobRunning
}

func condition(j *batchv1.Job, t batchv1.JobConditionType) bool {
	return jobCondition(j, t) != nil
}

func jobCondition(j *batchv1.Job, t batchv1.JobConditionType) *batchv1.JobCondition {
	for i, c := range j.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return &j.Status.Conditions[i]
		}
	}
	return nil
}

// getJob is the live Job, nil when there is none.
func getJob(ctx context.Context, cl *cluster, ns, name string) (*batchv1.Job, error) {
	live, err := cl.client.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return live, err
}

func jobID(a jobAttrs) string { return "Job " + a.Namespace + "/" + a.Name }

func jobOutputs(a jobAttrs, pod string) jobOut {
	return jobOut{Name: a.Name, Namespace: a.Namespace, Succeeded: true, Pod: pod}
}

func jobInverseOf(a jobAttrs) *sdk.Inverse[jobInverse] {
	return &sdk.Inverse[jobInverse]{
		Description: fmt.Sprintf("delete %s (propagation Background); what it did is not undone", jobID(a)),
		Data:        jobInverse{Name: a.Name, Namespace: a.Namespace},
	}
}

type jobRead = sdk.Read[jobInverse]

// jobInputs are the attributes that make the Job.
var jobInputs = []string{"name", "namespace", "job", "file", "timeout", "backoff_limit"}

func readJob(ctx context.Context, c *call, a jobAttrs, prior *sdk.Prior[jobPrivate, jobInverse]) jobRead {
	if !known(c, append(jobInputs, "kubeconfig")...) {
		return jobRead{Observation: providers.Unknown}
	}
	cl, diags := c.Settings.cluster(ctx, c, a.Kubeconfig)
	if diags.HasErrors() {
		return jobRead{Diagnostics: diags}
	}
	want, _, diags := buildJob(c, a)
	if diags.HasErrors() {
		return jobRead{Diagnostics: diags}
	}
	live, err := getJob(ctx, cl, a.Namespace, a.Name)
	if err != nil {
		return jobRead{Diagnostics: apiErr(c, cl, err, "Cannot Read Job", "Reading %s for %s: %v.", jobID(a), c.Addr, err)}
	}
	switch classify(live, want.Annotations[annHash]) {
	case jobNone:
		if prior != nil {
			// It ran to completion; its object was deleted since. What
			// it did stays done: it is not run again.
			return jobRead{Observation: providers.Present}
		}
		return jobRead{Observation: providers.Absent, Detail: jobID(a) + " does not exist"}
	case jobComplete:
		r := jobRead{Observation: providers.Present}
		if prior == nil {
			// Adopted on resume: it completed before the state said so.
			r.Outputs, r.Inverse = jobOutputs(a, succeededPod(ctx, cl, live)), jobInverseOf(a)
		}
		return r
	}
	return jobRead{Observation: providers.Drifted, Detail: jobState(live, want.Annotations[annHash])}
}

// jobState says what apply will do about the Job found.
func jobState(live *batchv1.Job, hash string) string {
	id := "Job " + live.Namespace + "/" + live.Name
	switch classify(live, hash) {
	case jobForeign:
		return fmt.Sprintf("%s exists and migrate did not create it (it has no %s annotation)", id, annHash)
	case jobOther:
		return fmt.Sprintf("-/+ %s was made with other inputs (hash %.12s, now %.12s): apply deletes it (propagation Foreground), waits until it is gone and creates it", id, live.Annotations[annHash], hash)
	case jobDeleting:
		return fmt.Sprintf("%s is being deleted: apply waits until it is gone, then creates it", id)
	case jobRunning:
		return fmt.Sprintf("%s with these inputs is running (created %s): apply waits for it and creates no second Job", id, live.CreationTimestamp.UTC().Format(time.RFC3339))
	case jobComplete:
		return fmt.Sprintf("%s with these inputs already completed: it is not run again", id)
	case jobFailed:
		return fmt.Sprintf("-/+ %s with these inputs failed (%s): apply deletes it (propagation Foreground), waits until it is gone and runs it again", id, failedWhy(live))
	}
	return ""
}

func failedWhy(j *batchv1.Job) string {
	if c := jobCondition(j, batchv1.JobFailed); c != nil {
		return strings.TrimSuffix(strings.Join(slices.DeleteFunc([]string{c.Reason, clipText(c.Message)}, func(s string) bool { return s == "" }), ": "), ".")
	}
	return "failed"
}

type jobPlan = sdk.Plan[jobPrivate]

func planJob(ctx context.Context, c *call, a jobAttrs, _ *sdk.Prior[jobPrivate, jobInverse]) jobPlan {
	if !known(c, jobInputs...) {
		return jobPlan{Diff: "Job: inputs known after earlier steps apply; built and checked against PodSecurity at apply\n", Irreversible: jobIrreversible}
	}
	p := c.Settings
	want, shown, diags := buildJob(c, a)
	if diags.HasErrors() {
		return jobPlan{Diagnostics: diags}
	}
	cl, diags := p.cluster(ctx, c, a.Kubeconfig)
	if cl == nil && !isNoKubeconfig(diags) {
		return jobPlan{Diagnostics: diags}
	}
	var b strings.Builder
	var live *batchv1.Job
	if cl == nil {
		// The cluster is built by an earlier step: check what can be
		// checked now; run plans the step again against the cluster.
		fmt.Fprintf(&b, "%s: the live Job; the cluster cannot be read yet (the kubeconfig is written by an earlier step)\n", sdk.UnknownText)
	} else {
		var err error
		if live, err = getJob(ctx, cl, a.Namespace, a.Name); err != nil {
			return jobPlan{Diagnostics: apiErr(c, cl, err, "Cannot Read Job", "Reading %s for %s: %v.", jobID(a), c.Addr, err)}
		}
	}
	hash := want.Annotations[annHash]
	switch classify(live, hash) {
	case jobNone:
		fmt.Fprintf(&b, "+ %s: create it and wait up to %s for it to complete\n", jobID(a), a.Timeout)
	case jobForeign:
		return jobPlan{Diagnostics: foreignJob(c, a)}
	default:
		b.WriteString(jobState(live, hash) + "\n")
	}
	line, diags := p.jobPreflight(ctx, c, cl, a, want)
	b.WriteString(line + "\n")
	fmt.Fprintf(&b, "inputs hash %.12s\n", hash)
	writePrefixed(&b, "  ", jobYAML(shown))
	return jobPlan{Diff: b.String(), Irreversible: jobIrreversible, Diagnostics: diags}
}

func foreignJob(c *call, a jobAttrs) phases.Diagnostics {
	return phases.Errorf("Job Not Made By Migrate", "%s: %s exists and migrate did not create it (it has no %s annotation). Delete it, or give the step another Job name.", c.Addr, jobID(a), annHash)
}

// jobYAML is the Job as the plan shows it, without empty server fields.
func jobYAML(j *batchv1.Job) string {
	raw, err := json.Marshal(j)
	if err != nil {
		return err.Error()
	}
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	delete(m, "status")
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
	}
	spec, _ := m["spec"].(map[string]any)
	if tm, ok := spec["template"].(map[string]any); ok {
		if md, ok := tm["metadata"].(map[string]any); ok {
			delete(md, "creationTimestamp")
			if len(md) == 0 {
				delete(tm, "metadata")
			}
		}
	}
	out, _ := yaml.Marshal(m)
	return string(out)
}

// jobPreflight checks the pod template against the PodSecurity level of
// the Job's namespace, as releases are checked: the API server accepts
// the Job and its controller then fails to create pods.
func (p *Provider) jobPreflight(ctx context.Context, c *call, cl *cluster, a jobAttrs, j *batchv1.Job) (string, phases.Diagnostics) {
	level, why := p.levelOf(ctx, cl, a.Namespace)
	line := fmt.Sprintf("namespace %s: PodSecurity %s (%s)", a.Namespace, level, why)
	raw, err := json.Marshal(j)
	if err == nil {
		var findings []podsecurity.Finding
		if findings, err = podsecurity.Evaluate(raw, level, a.Namespace); err == nil && len(findings) > 0 {
			var b strings.Builder
			fmt.Fprintf(&b, "%s: %s would create pods that namespace %s (PodSecurity %s, %s) rejects:\n", c.Addr, jobID(a), a.Namespace, level, why)
			for _, f := range findings {
				fmt.Fprintf(&b, "  - %s\n", f)
			}
			b.WriteString("Fix: change the Job's pod template until it meets the level, or, if it really needs host access, label the namespace with a kubernetes_namespace step (pod_security = \"privileged\") that this step depends on. The API server accepts such a Job; its controller then fails to create any pod, so this is checked at plan time.")
			d := phases.Errorf("PodSecurity Violation", "%s", b.String())
			d[0].Definite = true
			return line, d
		}
	}
	if err != nil {
		return line, phases.Errorf("PodSecurity Check Failed", "The pod template of %s cannot be checked: %v.", jobID(a), err)
	}
	return line, nil
}

type jobApply = sdk.Apply[jobPrivate, jobInverse]

func applyJob(ctx context.Context, c *call, a jobAttrs, _ jobPrivate, _ *sdk.Prior[jobPrivate, jobInverse]) jobApply {
	p := c.Settings
	cl, diags := p.cluster(ctx, c, a.Kubeconfig)
	if diags.HasErrors() {
		return jobApply{Diagnostics: diags}
	}
	want, _, diags := buildJob(c, a)
	if diags.HasErrors() {
		return jobApply{Diagnostics: diags}
	}
	if _, diags := p.jobPreflight(ctx, c, cl, a, want); diags.HasErrors() {
		return jobApply{Diagnostics: diags}
	}
	limit, _ := time.ParseDuration(a.Timeout)
	deadline := time.Now().Add(limit)
	hash := want.Annotations[annHash]
	jobs := cl.client.BatchV1().Jobs(a.Namespace)
	fail := func(summary, format string, args ...any) jobApply {
		return jobApply{Diagnostics: phases.Errorf(summary, format, args...)}
	}
	var live *batchv1.Job
	for live == nil {
		cur, err := getJob(ctx, cl, a.Namespace, a.Name)
		if err != nil {
			return fail("Cannot Read Job", "Reading %s for %s: %v.", jobID(a), c.Addr, err)
		}
		switch classify(cur, hash) {
		case jobNone:
			created, err := jobs.Create(ctx, want, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue // made since the Get: look at it
			}
			if err != nil {
				return fail("Cannot Create Job", "Creating %s for %s: %v.", jobID(a), c.Addr, err)
			}
			c.Log.Printf("created %s (inputs hash %.12s)", jobID(a), hash)
			live = created
		case jobForeign:
			return jobApply{Diagnostics: foreignJob(c, a)}
		case jobRunning, jobComplete:
			c.Log.Printf("%s", jobState(cur, hash))
			live = cur
		default: // other inputs, failed, or being deleted
			c.Log.Printf("%s", jobState(cur, hash))
			if err := deleteJob(ctx, cl, cur, deadline); err != nil {
				return fail("Cannot Replace Job", "Deleting %s for %s: %v.", jobID(a), c.Addr, err)
			}
		}
	}
	r := p.waitJob(ctx, c, cl, a, live, deadline)
	r.Inverse = jobInverseOf(a) // the Job is there: rollback deletes it
	return r
}

// deleteJob deletes a Job with its pods (propagation Foreground) and
// waits until it is gone.
func deleteJob(ctx context.Context, cl *cluster, j *batchv1.Job, deadline time.Time) error {
	fg := metav1.DeletePropagationForeground
	err := cl.client.BatchV1().Jobs(j.Namespace).Delete(ctx, j.Name, metav1.DeleteOptions{
		PropagationPolicy: &fg, Preconditions: &metav1.Preconditions{UID: &j.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return err
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	for {
		cur, err := getJob(ctx, cl, j.Namespace, j.Name)
		if err == nil && (cur == nil || cur.UID != j.UID) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the old Job is still being deleted: %w", ctx.Err())
		case <-time.After(jobPoll):
		}
	}
}

// waitJob waits until the Job completes or fails, following its pods'
// logs meanwhile; a gentle stop (c.Stop) ends the wait at once, the Job
// left running for the next run to wait for.
func (p *Provider) waitJob(ctx context.Context, c *call, cl *cluster, a jobAttrs, j *batchv1.Job, deadline time.Time) jobApply {
	parent := ctx
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	logs := &jobLogs{cl: cl, ns: a.Namespace, c: c, seen: map[string]bool{}, tail: map[string][]string{}}
	logs.ctx, logs.cancel = context.WithCancel(parent)
	defer logs.stop()
	sel := metav1.ListOptions{LabelSelector: batchv1.ControllerUidLabel + "=" + string(j.UID)}
	var pods []corev1.Pod
	for {
		if list, err := cl.client.CoreV1().Pods(a.Namespace).List(ctx, sel); err == nil {
			pods = list.Items
		}
		switch classify(j, j.Annotations[annHash]) {
		case jobComplete:
			logs.stop()
			pod := succeededPod(ctx, cl, j)
			c.Log.Printf("%s completed (pod %s)", jobID(a), pod)
			return jobApply{Outputs: jobOutputs(a, pod), Private: jobPrivate{Pod: pod}}
		case jobFailed:
			logs.stop()
			return jobApply{Diagnostics: phases.Errorf("Job Failed", "%s", jobFailure(parent, c, a, j, pods, logs))}
		}
		for i := range pods { // only while it runs: a finished Job's logs were shown
			logs.follow(&pods[i])
		}
		select {
		case <-c.Stop:
			c.Log.Printf("%s keeps running; the next run waits for it", jobID(a))
			return jobApply{Stopped: true, Diagnostics: sdk.StoppedWaiting(c.Addr, jobID(a)+" is created and runs (it is left running)", "its completion")}
		case <-ctx.Done():
			if errors.Is(parent.Err(), context.Canceled) {
				c.Log.Printf("%s keeps running; the next run waits for it", jobID(a))
				return jobApply{Diagnostics: sdk.Interrupted(c.Addr, parent.Err())}
			}
			return jobApply{Diagnostics: phases.Errorf("Job Timed Out", "%s: %s did not complete within %s. It was left running, not deleted: the next run waits for the same Job while the step's inputs are unchanged (delete the Job to start over).%s", c.Addr, jobID(a), a.Timeout, podStates(pods))}
		case <-time.After(jobPoll):
		}
		cur, err := getJob(ctx, cl, a.Namespace, a.Name)
		switch {
		case err == nil && (cur == nil || cur.UID != j.UID):
			return jobApply{Diagnostics: phases.Errorf("Job Deleted", "%s: %s was deleted while migrate waited for it; run again to create it anew.", c.Addr, jobID(a))}
		case err == nil:
			j = cur
		}
	}
}

// succeededPod names the newest pod of the Job that succeeded, "" when
// none is left.
func succeededPod(ctx context.Context, cl *cluster, j *batchv1.Job) string {
	list, err := cl.client.CoreV1().Pods(j.Namespace).List(ctx, metav1.ListOptions{LabelSelector: batchv1.ControllerUidLabel + "=" + string(j.UID)})
	if err != nil {
		return ""
	}
	name, at := "", time.Time{}
	for _, p := range list.Items {
		if p.Status.Phase == corev1.PodSucceeded && !p.CreationTimestamp.Time.Before(at) {
			name, at = p.Name, p.CreationTimestamp.Time
		}
	}
	return name
}

// jobFailure is the diagnostic of a failed Job: its reason, each failed
// pod's reason from its status, and the pod's last log lines.
func jobFailure(ctx context.Context, c *call, a jobAttrs, j *batchv1.Job, pods []corev1.Pod, logs *jobLogs) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s failed (%s).", c.Addr, jobID(a), failedWhy(j))
	served := false
	for _, p := range pods {
		if p.Status.Phase != corev1.PodFailed {
			continue
		}
		fmt.Fprintf(&b, "\nPod %s: %s", p.Name, podWhy(p))
		lines := logs.last(p.Name)
		if len(lines) == 0 {
			lines = tailLogs(ctx, logs.cl, p)
		}
		if len(lines) > 0 {
			served = true
			fmt.Fprintf(&b, "\nIts last log lines:\n  %s", strings.Join(lines, "\n  "))
		}
	}
	if !served && logs.opened == 0 {
		b.WriteString("\n(" + noLogs + ".)")
	}
	return b.String()
}

// tailLogs asks once for the last lines of a pod that was not followed
// (it failed between two looks); none when the node serves no logs.
func tailLogs(ctx context.Context, cl *cluster, p corev1.Pod) []string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b, err := cl.client.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: ptr(int64(logTail))}).DoRaw(ctx)
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\n"), "\n")
}

// podWhy is why a pod failed, from its status.
func podWhy(p corev1.Pod) string {
	var why []string
	if p.Status.Reason != "" || p.Status.Message != "" {
		why = append(why, strings.Trim(p.Status.Reason+": "+clipText(p.Status.Message), ": "))
	}
	for _, s := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		if t := s.State.Terminated; t != nil && (t.ExitCode != 0 || t.Reason != "Completed") {
			w := fmt.Sprintf("container %s terminated: %s, exit code %d", s.Name, t.Reason, t.ExitCode)
			if t.Message != "" {
				w += " (" + clipText(t.Message) + ")"
			}
			why = append(why, w)
		} else if wt := s.State.Waiting; wt != nil {
			why = append(why, fmt.Sprintf("container %s waiting: %s", s.Name, strings.Trim(wt.Reason+": "+clipText(wt.Message), ": ")))
		}
	}
	if len(why) == 0 {
		return "failed, its status says no more"
	}
	return strings.Join(why, "; ")
}

// podStates lists the pods of a Job that did not finish, for a timeout.
func podStates(pods []corev1.Pod) string {
	if len(pods) == 0 {
		return " It has no pod yet."
	}
	var b strings.Builder
	for _, p := range pods {
		fmt.Fprintf(&b, " Pod %s is %s", p.Name, p.Status.Phase)
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
				fmt.Fprintf(&b, " (%s: %s)", c.Reason, clipText(c.Message))
			}
		}
		b.WriteString(".")
	}
	return b.String()
}

// jobLogs follows the logs of a Job's pods into the step log, keeping the
// last lines of each pod for a failure.
type jobLogs struct {
	cl     *cluster
	ns     string
	c      *call
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	seen   map[string]bool     // pod/container followed
	tail   map[string][]string // last lines by pod
	opened int                 // streams the node served
	said   bool                // noLogs was said
	done   bool
}

// follow starts following the containers of a pod that has started.
func (l *jobLogs) follow(p *corev1.Pod) {
	if p.Status.Phase == corev1.PodPending || p.Status.Phase == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return
	}
	for _, ct := range p.Spec.Containers {
		key := p.Name + "/" + ct.Name
		if l.seen[key] {
			continue
		}
		l.seen[key] = true
		prefix := p.Name
		if len(p.Spec.Containers) > 1 {
			prefix = key
		}
		l.wg.Go(func() { l.stream(p.Name, ct.Name, prefix) })
	}
}

func (l *jobLogs) stream(pod, container, prefix string) {
	rc, err := l.cl.client.CoreV1().Pods(l.ns).GetLogs(pod, &corev1.PodLogOptions{Container: container, Follow: true}).Stream(l.ctx)
	l.mu.Lock()
	if err != nil {
		l.noLogs()
		l.mu.Unlock()
		return
	}
	l.opened++
	l.mu.Unlock()
	defer rc.Close()
	sc := bufio.NewScanner(rc)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l.mu.Lock()
		l.c.Log.Printf("%s: %s", prefix, sc.Text())
		t := append(l.tail[pod], sc.Text())
		l.tail[pod] = t[max(0, len(t)-logTail):]
		l.mu.Unlock()
	}
}

// noLogs says once that the node serves no logs; l.mu is held.
func (l *jobLogs) noLogs() {
	if !l.said && l.opened == 0 {
		l.said = true
		l.c.Log.Printf("%s", noLogs)
	}
}

// stop lets streams of finished pods end, then stops the rest.
func (l *jobLogs) stop() {
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		return
	}
	l.done = true
	opened := l.opened
	l.mu.Unlock()
	ended := make(chan struct{})
	go func() { l.wg.Wait(); close(ended) }()
	if opened > 0 {
		select { // a served stream ends with its container
		case <-ended:
		case <-time.After(3 * time.Second):
		}
	}
	l.cancel()
	<-ended
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.seen) > 0 {
		l.noLogs() // asked and never answered
	}
}

func (l *jobLogs) last(pod string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.tail[pod])
}

func revertJob(ctx context.Context, c *call, a jobAttrs, u sdk.Undo[jobInverse]) phases.Diagnostics {
	inv := u.Data
	inv.Name = kept(inv.Name, a.Name, c.Addr.Name)
	inv.Namespace = kept(inv.Namespace, a.Namespace, "default")
	id := "Job " + inv.Namespace + "/" + inv.Name
	cl, diags := c.Settings.cluster(ctx, c, a.Kubeconfig)
	if diags.HasErrors() {
		return diags
	}
	live, err := getJob(ctx, cl, inv.Namespace, inv.Name)
	switch {
	case err != nil:
		return apiErr(c, cl, err, "Cannot Read Job", "Reading %s for %s: %v.", id, c.Addr, err)
	case live == nil:
		c.Log.Printf("%s is gone: nothing to delete", id)
		return nil
	case live.Annotations[annHash] == "":
		c.Log.Printf("%s was not created by migrate: left alone", id)
		return nil
	}
	bg := metav1.DeletePropagationBackground
	err = cl.client.BatchV1().Jobs(inv.Namespace).Delete(ctx, inv.Name, metav1.DeleteOptions{PropagationPolicy: &bg})
	if err != nil && !apierrors.IsNotFound(err) {
		return phases.Errorf("Cannot Delete Job", "Deleting %s for %s: %v.", id, c.Addr, err)
	}
	c.Log.Printf("deleted %s; what it did is not undone", id)
	return nil
}
