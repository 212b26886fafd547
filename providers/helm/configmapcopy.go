package helm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
)

// A ConfigMap that kubernetes_manifest replaces is kept, for rollback, in
// a Secret beside it rather than in the state: configuration files with
// passwords in them are what ConfigMaps carry in practice, and a state
// may be shared (etcd) or read by anyone with the runbook's directory.

// configMapCopyKey is the key of the copy's one data entry: the
// ConfigMap as it was, as JSON.
const configMapCopyKey = "configmap.json"

// configMapCopyName is the Secret that keeps ConfigMap name as it was.
func configMapCopyName(name string) string {
	const suffix = ".configmap" + origSuffix
	if len(name)+len(suffix) <= validation.DNS1123SubdomainMaxLength {
		return name + suffix
	}
	sum := sha256.Sum256([]byte(name))
	keep := validation.DNS1123SubdomainMaxLength - len(suffix) - 17
	return name[:keep] + "-" + hex.EncodeToString(sum[:8]) + suffix
}

// keepConfigMap copies live, once, into its Secret and returns the
// Secret's name: a copy already there is the original, kept by an apply
// that was interrupted.
func keepConfigMap(ctx context.Context, c *call, cl *cluster, live *unstructured.Unstructured) (string, error) {
	body, err := json.Marshal(clean(live.Object))
	if err != nil {
		return "", err
	}
	name := configMapCopyName(live.GetName())
	cp := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: live.GetNamespace(),
			Labels:      map[string]string{"app.kubernetes.io/managed-by": "migrate"},
			Annotations: map[string]string{"migrate/original-of": "ConfigMap " + live.GetName(), createdBy: c.Addr.String()}},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{configMapCopyKey: body},
	}
	_, err = cl.client.CoreV1().Secrets(live.GetNamespace()).Create(ctx, cp, metav1.CreateOptions{FieldManager: fieldManager})
	if apierrors.IsAlreadyExists(err) {
		return name, nil
	}
	if err != nil {
		return "", err
	}
	c.Log.Printf("kept the previous ConfigMap %s/%s in the Secret %s for rollback", live.GetNamespace(), live.GetName(), name)
	return name, nil
}

// prior is the object to apply again: Prior itself, or the ConfigMap its
// copy holds (gone: the copy was deleted, as a finished restore does).
func (u objUndo) prior(ctx context.Context, cl *cluster) (obj map[string]any, gone bool, err error) {
	if u.PriorCopy == "" {
		return u.Prior, false, nil
	}
	s, err := cl.client.CoreV1().Secrets(u.Namespace).Get(ctx, u.PriorCopy, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	if err := json.Unmarshal(s.Data[configMapCopyKey], &obj); err != nil || obj == nil {
		return nil, false, fmt.Errorf("the Secret %s does not hold a ConfigMap under %s", u.PriorCopy, configMapCopyKey)
	}
	return obj, false, nil
}
