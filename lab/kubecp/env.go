package kubecp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// A container's environment as kubelet makes it: envFrom first (each
// ConfigMap's or Secret's keys, with the source's prefix), then env, whose
// values are expanded ($(VAR)) against what came before and whose
// valueFrom takes a ConfigMap's or Secret's key or a field of the pod. A
// source that is missing fails the container with kubelet's message
// (CreateContainerConfigError), unless it is optional.

// containerEnv is the container's variables, in order, with their values.
func (c *ControlPlane) containerEnv(ctx context.Context, pod *corev1.Pod, ctr corev1.Container) ([]string, map[string]string, error) {
	var names []string

	vars := map[string]string{}
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			names = append(names, k)
		}

		vars[k] = v
	}

	for _, from := range ctr.EnvFrom {
		data, err := c.envSource(ctx, pod.Namespace, from)
		if err != nil {
			return nil, nil, err
		}

		for _, k := range slices.Sorted(maps.Keys(data)) {
			set(from.Prefix+k, data[k])
		}
	}

	for _, e := range ctr.Env {
		if e.ValueFrom == nil {
			set(e.Name, expand(e.Value, vars))

			continue
		}

		v, ok, err := c.valueFrom(ctx, pod, e)
		if err != nil {
			return nil, nil, err
		}

		if ok {
			set(e.Name, v)
		}
	}

	return names, vars, nil
}

// envSource is the data of an envFrom's ConfigMap or Secret (none for a
// missing optional one).
func (c *ControlPlane) envSource(ctx context.Context, ns string, from corev1.EnvFromSource) (map[string]string, error) {
	switch {
	case from.ConfigMapRef != nil:
		data, _, err := c.sourceData(ctx, ns, "configmap", from.ConfigMapRef.Name, from.ConfigMapRef.Optional)
		return data, err
	case from.SecretRef != nil:
		data, _, err := c.sourceData(ctx, ns, "secret", from.SecretRef.Name, from.SecretRef.Optional)
		return data, err
	default:
		return nil, errors.New("envFrom names neither a configMapRef nor a secretRef")
	}
}

// sourceData is the data of a ConfigMap or Secret (kind "configmap" or
// "secret"), a Secret's values decoded; found is false for a missing
// optional one, and a missing required one is kubelet's error.
func (c *ControlPlane) sourceData(ctx context.Context, ns, kind, name string, optional *bool) (data map[string]string, found bool, err error) {
	var typed any = &corev1.ConfigMap{}
	if kind == "secret" {
		typed = &corev1.Secret{}
	}
	if found, err = c.object(ctx, ns, kind, name, typed); err != nil || (!found && isOptional(optional)) {
		return nil, false, err
	}
	if !found {
		return nil, false, fmt.Errorf("%s %q not found", kind, name)
	}
	data = map[string]string{}
	switch o := typed.(type) {
	case *corev1.ConfigMap:
		maps.Copy(data, o.Data)
	case *corev1.Secret:
		for k, v := range o.Data {
			data[k] = string(v)
		}
	}
	return data, true, nil
}

// valueFrom is an env variable's value from its source; ok is false for
// an optional source that is missing (the variable is not set).
func (c *ControlPlane) valueFrom(ctx context.Context, pod *corev1.Pod, e corev1.EnvVar) (string, bool, error) {
	src := e.ValueFrom

	var (
		kind, key, name string
		optional        *bool
	)

	switch {
	case src.ConfigMapKeyRef != nil:
		kind, key, name, optional = "configmap", src.ConfigMapKeyRef.Key, src.ConfigMapKeyRef.Name, src.ConfigMapKeyRef.Optional
	case src.SecretKeyRef != nil:
		kind, key, name, optional = "secret", src.SecretKeyRef.Key, src.SecretKeyRef.Name, src.SecretKeyRef.Optional
	}

	if kind != "" {
		data, found, err := c.sourceData(ctx, pod.Namespace, kind, name, optional)
		if err != nil || !found {
			return "", false, err
		}

		v, ok := data[key]
		if !ok && !isOptional(optional) {
			return "", false, fmt.Errorf("couldn't find key %s in %s %s/%s", key, map[string]string{"configmap": "ConfigMap", "secret": "Secret"}[kind], pod.Namespace, name)
		}

		return v, ok, nil
	}

	switch {
	case src.FieldRef != nil:
		v, err := podField(pod, src.FieldRef.FieldPath)

		return v, err == nil, err
	default:
		return "", false, fmt.Errorf("env %s: resourceFieldRef is not supported by the lab's node (it sets no resource limits): give a value", e.Name)
	}
}

// podField is a fieldRef's value, as kubelet resolves the paths the
// downward API allows for env.
func podField(pod *corev1.Pod, path string) (string, error) {
	if k, ok := subscript(path, "metadata.labels"); ok {
		return pod.Labels[k], nil
	}

	if k, ok := subscript(path, "metadata.annotations"); ok {
		return pod.Annotations[k], nil
	}

	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP":
		return pod.Status.HostIP, nil
	case "status.podIP":
		return pod.Status.PodIP, nil
	case "status.hostIPs", "status.podIPs":
		var ips []string

		if path == "status.hostIPs" {
			for _, ip := range pod.Status.HostIPs {
				ips = append(ips, ip.IP)
			}
		} else {
			for _, ip := range pod.Status.PodIPs {
				ips = append(ips, ip.IP)
			}
		}

		return strings.Join(ips, ","), nil
	}

	return "", fmt.Errorf("unsupported fieldPath: %s", path)
}

// subscript is KEY of PREFIX['KEY'].
func subscript(path, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(path, prefix+"['")
	if !ok || !strings.HasSuffix(rest, "']") {
		return "", false
	}

	return strings.TrimSuffix(rest, "']"), true
}

func isOptional(o *bool) bool { return o != nil && *o }

// object gets a namespaced ConfigMap or Secret (kind "configmap",
// "secret") into out; found is false when it does not exist.
func (c *ControlPlane) object(ctx context.Context, ns, kind, name string, out any) (bool, error) {
	err := c.do(ctx, http.MethodGet, "/api/v1/namespaces/"+ns+"/"+kind+"s/"+name, "application/json", nil, out)

	var he *httpError
	if errors.As(err, &he) && he.code == http.StatusNotFound {
		return false, nil
	}

	if err != nil {
		return false, fmt.Errorf("getting %s %q: %w", kind, name, err)
	}

	return true, nil
}

// keysVolume writes a Secret's or ConfigMap's keys as files in dir (its
// items only, at their paths, when it lists some), as kubelet projects
// them: mode defaultMode (0644), the files of a Secret readable by the
// pod only as it asks. A missing source fails the pod unless optional.
func (c *ControlPlane) keysVolume(ctx context.Context, ns, kind, name string, items []corev1.KeyToPath, mode *int32, optional *bool, dir string) error {
	data, found, err := c.sourceData(ctx, ns, kind, name, optional)
	if err != nil {
		return err
	}

	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}

	if !found {
		return nil // optional and missing: an empty directory
	}

	perm := os.FileMode(0o644)
	if mode != nil {
		perm = os.FileMode(*mode) & 0o777
	}

	files := map[string]string{}

	for k := range data {
		files[k] = k
	}

	if len(items) > 0 {
		files = map[string]string{}

		for _, it := range items {
			if _, ok := data[it.Key]; !ok {
				return cannot("FailedMount", "configmap or secret %s/%s: couldn't find key %s", ns, name, it.Key)
			}

			files[it.Key] = it.Path
		}
	}

	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close() //nolint:errcheck

	for key, p := range files {
		if d := filepath.Dir(p); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}

		if err := root.WriteFile(p, []byte(data[key]), perm); err != nil {
			return fmt.Errorf("%s %s key %s: %w", kind, name, key, err)
		}
	}

	return nil
}
