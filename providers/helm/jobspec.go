package helm

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/big"
	"os"

	"github.com/zclconf/go-cty/cty"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/homelab-migrate/migrate/phases"
)

// The Job a kubernetes_job step runs: built from its HCL spec or its
// file, completed with what the step decides over it (name, namespace,
// restart policy and backoff limit defaults).

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
