package helm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/zclconf/go-cty/cty"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/helm/podsecurity"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// Job is the kubernetes_job step type.
const Job = "kubernetes_job"

// jobPoll is how often a Job (or its deletion) is looked at: soon at
// first, as a release (releasePoll), since most Jobs of a migration end
// within seconds and the phase waits for them.
var jobPoll = interval{first: 100 * time.Millisecond, most: time.Second}

const (
	// annHash marks a Job migrate created with the SHA-256 of its inputs:
	// the same Job found after a crash is waited for or counted as done,
	// never created a second time.
	annHash    = "migrate.dev/inputs-hash"
	jobTimeout = "30m"
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

// jobRevert names the Job rollback deletes.
type jobRevert struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

var jobStep = &sdk.StepType[*Provider, jobAttrs, jobPrivate, jobRevert]{
	Name:        Job,
	Description: "Runs a Kubernetes Job to completion, once: a Job of the same name and inputs that already completed is not run again, one still running is waited for. Streams its pods' logs; fails with the pod's reason and last log lines. What its pod measured, as NAME=NUMBER lines of its termination message (/dev/termination-log), becomes the step's facts (at most 16; migrate status shows them): the plan's estimate of a service's downtime reads a copy rate from copied_bytes= and seconds=. Rollback deletes the Job object; what it did is not undone.",
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

func jobRevertOf(a jobAttrs) *sdk.RevertData[jobRevert] {
	return &sdk.RevertData[jobRevert]{
		Description: fmt.Sprintf("delete %s (propagation Background); what it did is not undone", jobID(a)),
		Data:        jobRevert{Name: a.Name, Namespace: a.Namespace},
	}
}

type jobRead = sdk.Read[jobRevert]

// jobInputs are the attributes that make the Job.
var jobInputs = []string{"name", "namespace", "job", "file", "timeout", "backoff_limit"}

func readJob(ctx context.Context, c *call, a jobAttrs, prior *sdk.Prior[jobPrivate, jobRevert]) jobRead {
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
			r.Outputs, r.Revert = jobOutputs(a, succeededPod(ctx, cl, live)), jobRevertOf(a)
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

func planJob(ctx context.Context, c *call, a jobAttrs, _ *sdk.Prior[jobPrivate, jobRevert]) jobPlan {
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
	line, diags := p.jobPreflight(ctx, c, cl, a, want, true)
	b.WriteString(line + "\n")
	fmt.Fprintf(&b, "inputs hash %.12s\n", hash)
	writePrefixed(&b, "  ", jobYAML(shown))
	return jobPlan{Diff: b.String(), Irreversible: jobIrreversible, Diagnostics: diags}
}

func foreignJob(c *call, a jobAttrs) phases.Diagnostics {
	return phases.Errorf("Job Not Made By Migrate", "%s: %s exists and migrate did not create it (it has no %s annotation). Delete it, or give the step another Job name.", c.Addr, jobID(a), annHash)
}

// jobPreflight checks the pod template against the PodSecurity level of
// the Job's namespace, as releases are checked: the API server accepts
// the Job and its controller then fails to create pods.
// jobPreflight checks the Job's pod template as releases are checked:
// against the PodSecurity level of its namespace, and, when planning,
// against the nodes that would run it. Its line is the plan's.
func (p *Provider) jobPreflight(ctx context.Context, c *call, cl *cluster, a jobAttrs, j *batchv1.Job, planning bool) (string, phases.Diagnostics) {
	line, diags := p.podSecurityOfJob(ctx, c, cl, a, j)
	if !planning {
		return line, diags
	}
	raw, err := json.Marshal(j)
	if err != nil {
		return line, append(diags, phases.Errorf("Scheduling Check Failed", "The pod template of %s cannot be judged: %v.", jobID(a), err)...)
	}
	sched, d := p.schedulingPreflight(ctx, cl, a.Kubeconfig, jobID(a), a.Namespace, []string{string(raw)})
	return line + "\n" + sched, append(diags, d...)
}

func (p *Provider) podSecurityOfJob(ctx context.Context, c *call, cl *cluster, a jobAttrs, j *batchv1.Job) (string, phases.Diagnostics) {
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

type jobApply = sdk.Apply[jobPrivate, jobRevert]

func applyJob(ctx context.Context, c *call, a jobAttrs, _ jobPrivate, _ *sdk.Prior[jobPrivate, jobRevert]) jobApply {
	p := c.Settings
	cl, diags := p.cluster(ctx, c, a.Kubeconfig)
	if diags.HasErrors() {
		return jobApply{Diagnostics: diags}
	}
	want, _, diags := buildJob(c, a)
	if diags.HasErrors() {
		return jobApply{Diagnostics: diags}
	}
	if _, diags := p.jobPreflight(ctx, c, cl, a, want, false); diags.HasErrors() {
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
	r.Revert = jobRevertOf(a) // the Job is there: rollback deletes it
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
	for wait := jobPoll.first; ; wait = jobPoll.after(wait) {
		cur, err := getJob(ctx, cl, j.Namespace, j.Name)
		if err == nil && (cur == nil || cur.UID != j.UID) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the old Job is still being deleted: %w", ctx.Err())
		case <-time.After(wait):
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
	for wait := jobPoll.first; ; wait = jobPoll.after(wait) {
		if list, err := cl.client.CoreV1().Pods(a.Namespace).List(ctx, sel); err == nil {
			pods = list.Items
		}
		switch classify(j, j.Annotations[annHash]) {
		case jobComplete:
			logs.stop()
			pod := succeededPod(ctx, cl, j)
			c.Log.Printf("%s completed (pod %s)", jobID(a), pod)
			facts := messageFacts(ctx, cl, a.Namespace, pod)
			for _, k := range slices.Sorted(maps.Keys(facts)) {
				c.Log.Printf("it measured %s=%s", k, facts[k])
			}
			return jobApply{Outputs: jobOutputs(a, pod), Private: jobPrivate{Pod: pod}, Facts: facts}
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
		case <-time.After(wait):
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
// factLine is a line of a termination message the step keeps as a fact:
// a name and a number, nothing else (a message is the pod's to write; a
// number cannot carry a secret's text).
var factLine = regexp.MustCompile(`^([a-z][a-z0-9_]{0,39})=([0-9]{1,18}(\.[0-9]{1,9})?)$`)

// maxFacts bounds the facts one Job gives.
const maxFacts = 16

// messageFacts are the NAME=NUMBER lines of the termination messages of a
// succeeded pod's containers (what a container writes to
// /dev/termination-log): what the Job measured, such as a copy's
// copied_bytes and seconds, which the plan's estimates read.
func messageFacts(ctx context.Context, cl *cluster, ns, pod string) map[string]string {
	if pod == "" {
		return nil
	}
	p, err := cl.client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	var facts map[string]string
	for _, st := range p.Status.ContainerStatuses {
		t := st.State.Terminated
		if t == nil {
			continue
		}
		for _, line := range strings.Split(t.Message, "\n") {
			m := factLine.FindStringSubmatch(strings.TrimSpace(line))
			if m == nil || len(facts) >= maxFacts {
				continue
			}
			if facts == nil {
				facts = map[string]string{}
			}
			facts[m[1]] = m[2]
		}
	}
	return facts
}

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

func revertJob(ctx context.Context, c *call, a jobAttrs, u sdk.Applied[jobRevert]) phases.Diagnostics {
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
