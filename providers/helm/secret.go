package helm

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"

	"filippo.io/age"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/util/retry"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/sdk"
	"github.com/homelab-migrate/migrate/secret/agefile"
)

// Secret is the kubernetes_secret step type.
const Secret = "kubernetes_secret"

// fieldManager is the server-side apply manager of every object migrate
// applies.
const fieldManager = "migrate"

// createdBy marks an object a step created, with the step's address: an
// apply interrupted after the create and run again (or a Read on resume)
// knows the object is its own, to delete on rollback, not a prior to keep.
const createdBy = "migrate/created-by"

// origSuffix names the copy of a Secret that existed before the step: its
// data stays in the cluster, never in the state, for the rollback.
const origSuffix = ".migrate-orig"

// secretAttrs are the attributes of a kubernetes_secret step.
type secretAttrs struct {
	Name       string            `cty:"name" required:"true" doc:"The Secret's name."`
	Namespace  string            `cty:"namespace" required:"true" doc:"The Secret's namespace."`
	Type       string            `cty:"type" doc:"The Secret's type, \"Opaque\" by default."`
	Data       map[string]string `cty:"data" sensitive:"true" doc:"Keys and their values, redacted everywhere."`
	Files      map[string]string `cty:"files" doc:"Keys and the files, relative to the runbook, holding their values; age-encrypted files are decrypted."`
	Kubeconfig string            `cty:"kubeconfig" doc:"Path to a kubeconfig for this step, relative to the runbook (such as talos_kubeconfig.admin.path); default the provider's."`
}

// secretOut are the outputs of a kubernetes_secret step: never a value.
type secretOut struct {
	Name      string   `cty:"name"`
	Namespace string   `cty:"namespace"`
	Keys      []string `cty:"keys"`
}

var secretStep = &sdk.StepType[*Provider, secretAttrs, struct{}, secretRevert]{
	Name:        Secret,
	Description: "Applies a Kubernetes Secret from sensitive values and files (age-encrypted files are decrypted with MIGRATE_AGE_IDENTITY); its values never reach a plan, a log or the state. Rollback deletes a Secret this step created, else restores the previous one from the copy kept in the cluster as <name>.migrate-orig.",
	Rollback:    "Deletes a Secret it created; one that existed was copied in the cluster to NAME.migrate-orig, and is restored from that copy, which is then deleted.",
	Outputs:     secretOut{},
	Validate:    validateSecret,
	Read:        readSecret,
	Plan:        planSecret,
	Apply:       applySecret,
	Revert:      revertSecret,
	// The files as they are on disk (an age file encrypted) join the
	// step's input hash: a changed file is planned as an update.
	Digest: func(_ context.Context, c *call, a secretAttrs) (string, phases.Diagnostics) {
		var files []string
		for _, k := range slices.Sorted(maps.Keys(a.Files)) {
			files = append(files, a.Files[k])
		}
		return c.Settings.digestFiles(c, files)
	},
}

// secretRevert is a kubernetes_secret step's revert data: names only.
type secretRevert struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	// Delete: the step created the Secret.
	Delete bool `json:"delete,omitempty"`
	// Restore: the Secret existed; its copy is <name>.migrate-orig.
	Restore bool `json:"restore,omitempty"`
}

func validateSecret(c *call, a *secretAttrs) phases.Diagnostics {
	if c.Null("type") || a.Type == "" {
		a.Type = string(corev1.SecretTypeOpaque)
	}
	var diags phases.Diagnostics
	bad := func(summary, format string, args ...any) {
		diags = append(diags, phases.Errorf(summary, format, args...)...)
	}
	if errs := validation.IsDNS1123Subdomain(a.Name + origSuffix); len(errs) > 0 {
		bad("Invalid Secret Name", "The name of %s is not a valid Secret name (with room for the suffix %s of its rollback copy): %s.", c.Addr, origSuffix, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Label(a.Namespace); len(errs) > 0 {
		bad("Invalid Namespace Name", "The namespace of %s is not a valid namespace name: %s.", c.Addr, strings.Join(errs, "; "))
	}
	if len(a.Data)+len(a.Files) == 0 {
		bad("Empty Secret", "%s sets no key: give data, files, or both.", c.Addr)
	}
	for _, k := range slices.Sorted(maps.Keys(a.Files)) {
		if _, dup := a.Data[k]; dup {
			bad("Duplicate Secret Key", "Key %q of %s is set by both data and files: keep one.", k, c.Addr)
		}
	}
	for _, k := range secretKeys(*a) {
		if errs := validation.IsConfigMapKey(k); len(errs) > 0 {
			bad("Invalid Secret Key", "Key %q of %s is not a valid Secret key: %s.", k, c.Addr, strings.Join(errs, "; "))
		}
	}
	return diags
}

func secretKeys(a secretAttrs) []string {
	keys := slices.Collect(maps.Keys(a.Data))
	keys = append(keys, slices.Collect(maps.Keys(a.Files))...)
	slices.Sort(keys)
	return slices.Compact(keys)
}

// secretData reads the values: data as given, files read (decrypted when
// age-encrypted). Every value is taught to the call's scrubber, so no log
// or diagnostic can show it, whatever prints it.
func (p *Provider) secretData(c *call, a secretAttrs) (map[string][]byte, phases.Diagnostics) {
	out := map[string][]byte{}
	for k, v := range a.Data {
		out[k] = []byte(v)
	}
	ids := sync.OnceValues(func() ([]age.Identity, error) { return agefile.Identities("") }) // read once for all the files
	for _, k := range slices.Sorted(maps.Keys(a.Files)) {
		b, err := agefile.ReadFile(p.abs(a.Files[k]), ids)
		if err != nil {
			return nil, phases.Errorf("Cannot Read Secret File", "%s cannot read the file of key %q: %v.", c.Addr, k, err)
		}
		out[k] = b
	}
	for _, v := range out {
		c.Scrub.Add(string(v), base64.StdEncoding.EncodeToString(v))
		if t := strings.TrimSpace(string(v)); t != string(v) {
			c.Scrub.Add(t)
		}
	}
	return out, nil
}

// changedKeys are the keys whose values differ between live and want
// (added ones included); keys only live has are kept by the apply.
func changedKeys(live, want map[string][]byte) []string {
	var out []string
	for k, v := range want {
		if old, ok := live[k]; !ok || !bytes.Equal(old, v) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func secretID(a secretAttrs) string { return "Secret " + a.Namespace + "/" + a.Name }

type secPlan = sdk.Plan[struct{}]

func planSecret(ctx context.Context, c *call, a secretAttrs, _ *sdk.Prior[struct{}, secretRevert]) secPlan {
	p := c.Settings
	// A file an earlier step of the run writes (a key pulled from the old
	// VM) is not there yet: the Secret is planned, its values read when
	// the step runs.
	if c.AfterChanges {
		var later []string
		for _, k := range slices.Sorted(maps.Keys(a.Files)) {
			if _, err := os.Stat(p.abs(a.Files[k])); errors.Is(err, fs.ErrNotExist) {
				later = append(later, fmt.Sprintf("%s (%s)", k, a.Files[k]))
			}
		}
		if len(later) > 0 {
			return secPlan{Diff: fmt.Sprintf("%s: %s, written by a step this one depends on, read when it runs\n+ %s (keys: %s)\n",
				sdk.UnknownText, strings.Join(later, ", "), secretID(a), strings.Join(secretKeys(a), ", "))}
		}
	}
	data, diags := p.secretData(c, a)
	if diags.HasErrors() {
		return secPlan{Diagnostics: diags}
	}
	keys := strings.Join(secretKeys(a), ", ")
	cl, diags := p.cluster(ctx, c, a.Kubeconfig)
	if cl == nil {
		if !isNoKubeconfig(diags) {
			return secPlan{Diagnostics: diags}
		}
		return secPlan{Diff: fmt.Sprintf("%s: the live Secret; the cluster cannot be read yet (the kubeconfig is written by an earlier step)\n+ %s (keys: %s)\n", sdk.UnknownText, secretID(a), keys)}
	}
	live, err := cl.client.CoreV1().Secrets(a.Namespace).Get(ctx, a.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return secPlan{Diff: fmt.Sprintf("+ %s (keys: %s)\n", secretID(a), keys)}
	case err != nil:
		return secPlan{Diagnostics: apiErr(c, cl, err, "Cannot Read Secret", "Reading %s for %s: %v.", secretID(a), c.Addr, err)}
	}
	if string(live.Type) != a.Type {
		return secPlan{Diagnostics: phases.Errorf("Secret Type Cannot Change", "%s is of type %s; %s wants %s, and a Secret's type cannot change. Delete the Secret first, or set type = %q.", secretID(a), live.Type, c.Addr, a.Type, live.Type)}
	}
	var b strings.Builder
	if ch := changedKeys(live.Data, data); len(ch) > 0 {
		fmt.Fprintf(&b, "~ %s (keys changed: %s)\n", secretID(a), strings.Join(ch, ", "))
	} else {
		fmt.Fprintf(&b, "  %s: no change (keys: %s)\n", secretID(a), keys)
	}
	if live.Annotations[createdBy] != c.Addr.String() {
		fmt.Fprintf(&b, "  the Secret existed: apply keeps a copy as %s/%s%s, which rollback restores\n", a.Namespace, a.Name, origSuffix)
	}
	return secPlan{Diff: b.String()}
}

type secApply = sdk.Apply[struct{}, secretRevert]

func applySecret(ctx context.Context, c *call, a secretAttrs, _ struct{}, prior *sdk.Prior[struct{}, secretRevert]) secApply {
	p := c.Settings
	data, diags := p.secretData(c, a)
	if diags.HasErrors() {
		return secApply{Diagnostics: diags}
	}
	cl, diags := p.cluster(ctx, c, a.Kubeconfig)
	if diags.HasErrors() {
		return secApply{Diagnostics: diags}
	}
	fail := func(format string, args ...any) secApply {
		return secApply{Diagnostics: phases.Errorf("Cannot Apply Secret", "%s: %s.", c.Addr, fmt.Sprintf(format, args...))}
	}
	sc := cl.client.CoreV1().Secrets(a.Namespace)
	mine := c.Addr.String()
	inv := secretRevert{Name: a.Name, Namespace: a.Namespace}
	live, err := sc.Get(ctx, a.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		inv.Delete = true
	case err != nil:
		return fail("reading %s: %v", secretID(a), err)
	case live.Annotations[createdBy] == mine:
		inv.Delete = true // created by an earlier, interrupted apply
	default:
		if string(live.Type) != a.Type {
			return fail("%s is of type %s, not %s, and a Secret's type cannot change", secretID(a), live.Type, a.Type)
		}
		inv.Restore = true
		if err := keepOriginal(ctx, c, cl, live); err != nil {
			return fail("keeping a copy of %s for rollback: %v", secretID(a), err)
		}
	}
	ac := corev1ac.Secret(a.Name, a.Namespace).WithType(corev1.SecretType(a.Type)).WithData(data)
	if inv.Delete {
		ac.WithAnnotations(map[string]string{createdBy: mine})
	}
	// Forced: the step owns its Secret's data; a Secret made by someone
	// else is kept in its copy for the rollback.
	if _, err := sc.Apply(ctx, ac, metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
		return fail("applying %s: %v", secretID(a), err)
	}
	c.Log.Printf("applied %s (keys: %s)", secretID(a), strings.Join(secretKeys(a), ", "))
	revertOf := secretRevertOf(inv)
	if prior != nil && prior.Revert != nil && prior.Revert.Data.Name == a.Name && prior.Revert.Data.Namespace == a.Namespace {
		revertOf = prior.Revert // applied again: undo to before the first apply
	}
	return secApply{Outputs: secretOutputs(a), Revert: revertOf}
}

// keepOriginal copies a Secret that existed before the step to
// <name>.migrate-orig, once: a copy already there is the original, kept
// by an apply that was interrupted.
func keepOriginal(ctx context.Context, c *call, cl *cluster, live *corev1.Secret) error {
	cp := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: live.Name + origSuffix, Namespace: live.Namespace, Labels: live.Labels,
			Annotations: map[string]string{"migrate/original-of": live.Name}},
		Type: live.Type,
		Data: live.Data,
	}
	for k, v := range live.Annotations {
		cp.Annotations[k] = v
	}
	_, err := cl.client.CoreV1().Secrets(live.Namespace).Create(ctx, cp, metav1.CreateOptions{FieldManager: fieldManager})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err == nil {
		c.Log.Printf("kept the previous Secret %s/%s as %s for rollback", live.Namespace, live.Name, cp.Name)
	}
	return err
}

func secretOutputs(a secretAttrs) secretOut {
	return secretOut{Name: a.Name, Namespace: a.Namespace, Keys: secretKeys(a)}
}

func secretRevertOf(inv secretRevert) *sdk.RevertData[secretRevert] {
	desc := fmt.Sprintf("delete Secret %s/%s (this step created it)", inv.Namespace, inv.Name)
	if inv.Restore {
		desc = fmt.Sprintf("restore Secret %s/%s from its copy %s%s", inv.Namespace, inv.Name, inv.Name, origSuffix)
	}
	return &sdk.RevertData[secretRevert]{Description: desc, Data: inv}
}

type secRead = sdk.Read[secretRevert]

func readSecret(ctx context.Context, c *call, a secretAttrs, prior *sdk.Prior[struct{}, secretRevert]) secRead {
	p := c.Settings
	data, diags := p.secretData(c, a)
	if diags.HasErrors() {
		return secRead{Diagnostics: diags}
	}
	cl, diags := p.cluster(ctx, c, a.Kubeconfig)
	if diags.HasErrors() {
		return secRead{Diagnostics: diags}
	}
	sc := cl.client.CoreV1().Secrets(a.Namespace)
	live, err := sc.Get(ctx, a.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return secRead{Observation: providers.Absent, Detail: secretID(a) + " does not exist"}
	}
	if err != nil {
		return secRead{Diagnostics: apiErr(c, cl, err, "Cannot Read Secret", "Reading %s for %s: %v.", secretID(a), c.Addr, err)}
	}
	r := secRead{Observation: providers.Present, Outputs: secretOutputs(a)}
	if ch := changedKeys(live.Data, data); len(ch) > 0 {
		r.Observation = providers.Drifted
		r.Detail = fmt.Sprintf("%s differs from the step in keys: %s", secretID(a), strings.Join(ch, ", "))
	}
	if prior == nil {
		// Resumed after an apply that was not recorded: its marks say
		// what to undo.
		if live.Annotations[createdBy] == c.Addr.String() {
			r.Revert = secretRevertOf(secretRevert{Name: a.Name, Namespace: a.Namespace, Delete: true})
		} else if _, err := sc.Get(ctx, a.Name+origSuffix, metav1.GetOptions{}); err == nil {
			r.Revert = secretRevertOf(secretRevert{Name: a.Name, Namespace: a.Namespace, Restore: true})
		}
	}
	return r
}

func revertSecret(ctx context.Context, c *call, a secretAttrs, u sdk.Applied[secretRevert]) phases.Diagnostics {
	inv := u.Data
	inv.Name = kept(inv.Name, a.Name, "")
	inv.Namespace = kept(inv.Namespace, a.Namespace, "")
	if inv.Name == "" || inv.Namespace == "" {
		return phases.Errorf("Invalid Revert", "The recorded revert data of %s names no Secret.", c.Addr)
	}
	cl, diags := c.Settings.cluster(ctx, c, a.Kubeconfig)
	if diags.HasErrors() {
		return diags
	}
	sc := cl.client.CoreV1().Secrets(inv.Namespace)
	id := fmt.Sprintf("Secret %s/%s", inv.Namespace, inv.Name)
	fail := func(err error) phases.Diagnostics {
		return phases.Errorf("Cannot Revert Secret", "%s: reverting %s: %v.", c.Addr, id, err)
	}
	if inv.Delete {
		if err := sc.Delete(ctx, inv.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fail(err)
		}
		c.Log.Printf("deleted %s", id)
		return nil
	}
	if !inv.Restore {
		return nil
	}
	orig, err := sc.Get(ctx, inv.Name+origSuffix, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		c.Log.Printf("%s: no copy %s%s left: already restored", id, inv.Name, origSuffix)
		return nil
	}
	if err != nil {
		return fail(err)
	}
	delete(orig.Annotations, "migrate/original-of")
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		live, err := sc.Get(ctx, inv.Name, metav1.GetOptions{})
		if err == nil && live.Type != orig.Type {
			if err := sc.Delete(ctx, inv.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			err = apierrors.NewNotFound(corev1.Resource("secrets"), inv.Name)
		}
		if apierrors.IsNotFound(err) {
			back := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: inv.Name, Namespace: inv.Namespace, Labels: orig.Labels, Annotations: orig.Annotations}, Type: orig.Type, Data: orig.Data}
			_, err = sc.Create(ctx, back, metav1.CreateOptions{FieldManager: fieldManager})
			return err
		}
		if err != nil {
			return err
		}
		live.Data, live.StringData, live.Labels, live.Annotations = orig.Data, nil, orig.Labels, orig.Annotations
		_, err = sc.Update(ctx, live, metav1.UpdateOptions{FieldManager: fieldManager})
		return err
	})
	if err != nil {
		return fail(err)
	}
	// The copy goes last: while it exists, a revert run again restores.
	if err := sc.Delete(ctx, inv.Name+origSuffix, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fail(err)
	}
	c.Log.Printf("restored %s from its copy and deleted the copy", id)
	return nil
}
