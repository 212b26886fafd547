package kubecp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/homelab-migrate/migrate/lab/apps"
	"github.com/homelab-migrate/migrate/lab/sandbox"
)

// The pod runner: kwok plays the kubelet but runs no container, so the
// control plane itself runs the commands of the Job pods kwok turned
// Running on its node, each container in lab/sandbox, and writes the
// pod's terminal status as a kubelet would.

// PollInterval is how often the runner lists the node's running pods.
var PollInterval = 300 * time.Millisecond

// DefaultPodDeadline bounds a pod without activeDeadlineSeconds.
var DefaultPodDeadline = 30 * time.Minute

// tailSize is how much of a container's output its terminated message keeps.
const tailSize = 1024

// defaultPath is a container's PATH when its env sets none (the runtime's).
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// podResult is what a pod's run ended with, kept in its directory
// (result.json) before the status is written: a runner started again
// writes it again instead of running the pod twice.
type podResult struct {
	Phase      corev1.PodPhase          `json:"phase"`
	Reason     string                   `json:"reason,omitempty"`
	Message    string                   `json:"message,omitempty"`
	Init       []corev1.ContainerStatus `json:"initContainerStatuses,omitempty"`
	Containers []corev1.ContainerStatus `json:"containerStatuses"`
}

// podError is a pod the lab cannot start: it fails with Reason and Message.
type podError struct{ reason, message string }

func (e *podError) Error() string { return e.message }

func cannot(reason, format string, args ...any) error {
	return &podError{reason: reason, message: fmt.Sprintf(format, args...)}
}

// runPods runs, until ctx ends, the Job pods of the node.
func (c *ControlPlane) runPods(ctx context.Context) {
	defer c.runners.Done()

	started := map[string]context.CancelFunc{} // pods being run, by UID
	done := make(chan string)
	query := "/api/v1/pods?fieldSelector=" + url.QueryEscape("spec.nodeName="+c.cfg.NodeName+",status.phase=Running")

	for {
		var list corev1.PodList
		if err := c.do(ctx, http.MethodGet, query, "application/json", nil, &list); err == nil {
			listed := map[string]bool{}

			for _, pod := range list.Items {
				uid := string(pod.UID)
				listed[uid] = pod.DeletionTimestamp == nil

				if started[uid] != nil || !ownedByJob(&pod) || pod.DeletionTimestamp != nil {
					continue
				}

				if _, fails := pod.Annotations["migrate.test/fail"]; fails {
					continue // the pod-fail stage's (kwok-stages/)
				}

				podCtx, cancel := context.WithCancel(ctx)
				started[uid] = cancel

				c.runners.Add(1)

				go func() {
					defer c.runners.Done()
					c.runPod(ctx, podCtx, pod)

					select {
					case done <- uid:
					case <-ctx.Done():
					}
				}()
			}

			// a pod deleted (or being deleted) while it runs is killed, as
			// kubelet kills its containers
			for uid, cancel := range started {
				if !listed[uid] {
					cancel()
				}
			}
		}

		select {
		case <-ctx.Done():
			return
		case uid := <-done:
			started[uid]()
			delete(started, uid) // a pod still Running on the next list: its status is written again
		case <-time.After(PollInterval):
		}
	}
}

func ownedByJob(pod *corev1.Pod) bool {
	return slices.ContainsFunc(pod.OwnerReferences, func(o metav1.OwnerReference) bool { return o.Kind == "Job" })
}

// jobOf is the name of the Job that owns the pod ("" for none).
func jobOf(pod *corev1.Pod) string {
	for _, o := range pod.OwnerReferences {
		if o.Kind == "Job" {
			return o.Name
		}
	}

	return ""
}

// runPod runs the pod once (its result kept in Dir/pods/UID) and writes
// its status. ctx is the runner's, podCtx ends too when the pod is deleted.
func (c *ControlPlane) runPod(ctx, podCtx context.Context, pod corev1.Pod) {
	dir := filepath.Join(c.cfg.Dir, "pods", string(pod.UID))
	resultFile := filepath.Join(dir, "result.json")

	var res podResult

	b, err := os.ReadFile(resultFile)

	switch {
	case err == nil && json.Unmarshal(b, &res) == nil:
		// ran already: only the status is left to write
	case dirExists(dir):
		// started by a control plane that stopped under it: as a node that
		// rebooted, the pod failed (its Job makes another)
		res = failed(&pod, "NodeShutdown", "the lab's node stopped while the pod ran: its commands were killed")
	default:
		if err := os.MkdirAll(dir, 0o700); err != nil {
			c.cfg.logf("kubecp: pod %s/%s: %v", pod.Namespace, pod.Name, err)

			return
		}

		if c.cfg.OnPodRun != nil {
			c.cfg.OnPodRun(pod.Namespace, pod.Name, jobOf(&pod))
		}

		res = c.runPodOnce(podCtx, &pod, dir)
		if ctx.Err() != nil {
			return // stopped: the next start fails it
		}

		if podCtx.Err() != nil {
			res = failed(&pod, "Killed", "the pod was deleted while it ran: its commands were killed")
		}

		// the containers' roots and emptyDirs end with the pod; the binds
		// were in the sandboxes' mount namespaces only: plain directories here
		for _, d := range []string{"containers", "volumes"} {
			if err := os.RemoveAll(filepath.Join(dir, d)); err != nil {
				c.cfg.logf("kubecp: pod %s/%s: %v", pod.Namespace, pod.Name, err)
			}
		}
	}

	b, _ = json.Marshal(res) //nolint:errcheck
	if err := os.WriteFile(resultFile, b, 0o600); err != nil {
		c.cfg.logf("kubecp: pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}

	if podCtx.Err() != nil {
		return // deleted: no status to write
	}

	if err := c.writeStatus(ctx, &pod, res); err != nil && ctx.Err() == nil {
		c.cfg.logf("kubecp: pod %s/%s: writing its status: %v", pod.Namespace, pod.Name, err)
	}
}

func dirExists(p string) bool {
	fi, err := os.Stat(p)

	return err == nil && fi.IsDir()
}

// runPodOnce runs the init containers, then the containers, one after the other.
func (c *ControlPlane) runPodOnce(ctx context.Context, pod *corev1.Pod, dir string) podResult {
	deadline := DefaultPodDeadline
	if s := pod.Spec.ActiveDeadlineSeconds; s != nil && *s > 0 {
		deadline = time.Duration(*s) * time.Second
	}

	runCtx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()

	logDir := filepath.Join(c.cfg.Dir, "logs", "pods")
	if err := os.MkdirAll(logDir, 0o700); err != nil {
		return failed(pod, "RunContainerError", err.Error())
	}

	logFile, err := os.OpenFile(filepath.Join(logDir, pod.Namespace+"_"+pod.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return failed(pod, "RunContainerError", err.Error())
	}
	defer logFile.Close() //nolint:errcheck

	volumes, err := c.volumes(ctx, pod, dir)
	if err != nil {
		var pe *podError
		if !errors.As(err, &pe) {
			pe = &podError{reason: "FailedMount", message: err.Error()}
		}

		fmt.Fprintf(logFile, "== the lab could not start the pod: %s\n", pe.message)

		return failed(pod, pe.reason, pe.message)
	}

	res := podResult{Phase: corev1.PodSucceeded}

	for i, ctr := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
		isInit := i < len(pod.Spec.InitContainers)

		var st corev1.ContainerStatus

		if isInit && res.Phase == corev1.PodFailed {
			st = waiting(ctr, "PodInitializing", "an init container failed")
		} else {
			st = c.runContainer(runCtx, pod, ctr, dir, volumes, logFile)
		}

		if t := st.State.Terminated; t != nil && t.ExitCode != 0 {
			res.Phase = corev1.PodFailed
		}

		if isInit {
			res.Init = append(res.Init, st)
		} else {
			res.Containers = append(res.Containers, st)
		}
	}

	if errors.Is(runCtx.Err(), context.DeadlineExceeded) {
		res.Phase, res.Reason = corev1.PodFailed, "DeadlineExceeded"
		res.Message = fmt.Sprintf("Pod was active on the node longer than the specified deadline (%s)", deadline)
	}

	return res
}

// runContainer runs one container's command in its own root under dir,
// its output appended to the pod's log.
func (c *ControlPlane) runContainer(ctx context.Context, pod *corev1.Pod, ctr corev1.Container, dir string, volumes map[string]string, log io.Writer) corev1.ContainerStatus {
	if ctx.Err() != nil {
		return waiting(ctr, "DeadlineExceeded", "the pod's deadline passed before the container started")
	}

	var spec sandbox.Spec

	names, vars, err := c.containerEnv(ctx, pod, ctr)
	if err == nil {
		spec, err = containerSpec(pod, ctr, filepath.Join(dir, "containers", ctr.Name), volumes, names, vars)
	}

	if err == nil {
		err = c.writeHosts(ctx, pod, spec.Root)
	}

	if err != nil {
		fmt.Fprintf(log, "== container %s: %v\n", ctr.Name, err)

		return terminated(ctr, 128, "CreateContainerConfigError", err.Error(), time.Now())
	}

	// the container's own log, which the kubelet's endpoint serves (logs.go)
	// (live before it exists: a follow that finds it follows it)
	logPath := c.containerLogPath(pod, ctr.Name)

	c.live.set(logPath, true)
	defer c.live.set(logPath, false)

	cri, err := openCRILog(logPath)
	if err != nil {
		return terminated(ctr, 128, "RunContainerError", err.Error(), time.Now())
	}
	defer cri.Close() //nolint:errcheck

	// as written, not expanded: a $(VAR) may be a Secret's value
	fmt.Fprintf(log, "== container %s: %q\n", ctr.Name, append(slices.Clone(ctr.Command), ctr.Args...))

	var tail tailBuffer

	start := time.Now()
	cmd := sandbox.Command(ctx, spec)
	// one pipe for both streams (as 2>&1): their lines stay in the order
	// written, where two pipes could swap them; all tagged stdout
	cmd.Stdout = io.MultiWriter(log, &tail, cri.stream("stdout"))
	cmd.Stderr = cmd.Stdout
	cmd.WaitDelay = 5 * time.Second
	err = cmd.Run()

	code := 0

	var ee *exec.ExitError

	switch {
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		code = ee.ExitCode()
	case err != nil: // killed (deadline, stop) or not started
		code = 137
		fmt.Fprintf(&tail, "\n%v", err)
	}

	fmt.Fprintf(log, "== container %s exited with %d after %s\n", ctr.Name, code, time.Since(start).Round(time.Millisecond))

	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}

	return terminated(ctr, int32(code), reason, tail.String(), start) //nolint:gosec // an exit code
}

// containerSpec is a container as a sandbox command: its command and args,
// its env (names in order, their values: containerEnv), its volume mounts.
func containerSpec(pod *corev1.Pod, ctr corev1.Container, root string, volumes map[string]string, names []string, vars map[string]string) (sandbox.Spec, error) {
	imageEnv, err := imageUserland(pod, &ctr, root)
	if err != nil {
		return sandbox.Spec{}, err
	}

	if len(ctr.Command) == 0 {
		return sandbox.Spec{}, fmt.Errorf("container %q has no command: the lab's node runs no images, so it cannot run an image's entrypoint; give the container a command (and args) from the host's /usr", ctr.Name)
	}

	env := []string{"HOSTNAME=" + pod.Name, "HOME=/root"}
	for _, k := range names {
		env = append(env, k+"="+vars[k])
	}

	for _, k := range slices.Sorted(maps.Keys(imageEnv)) {
		if _, ok := vars[k]; !ok {
			env = append(env, k+"="+imageEnv[k])
		}
	}

	if _, ok := vars["PATH"]; !ok && imageEnv["PATH"] == "" {
		env = append(env, defaultPath)
	}

	argv := make([]string, 0, len(ctr.Command)+len(ctr.Args))
	for _, a := range append(slices.Clone(ctr.Command), ctr.Args...) {
		argv = append(argv, expand(a, vars))
	}

	var binds []sandbox.Bind

	for _, m := range ctr.VolumeMounts {
		src, ok := volumes[m.Name]
		if !ok {
			continue // the service account token's volume: not mounted (see doc.go)
		}

		if m.SubPath != "" {
			if filepath.IsAbs(m.SubPath) || slices.Contains(strings.Split(m.SubPath, "/"), "..") {
				return sandbox.Spec{}, fmt.Errorf("container %q: subPath %q must be a relative path without \"..\"", ctr.Name, m.SubPath)
			}

			src = filepath.Join(src, m.SubPath)
			if err := os.MkdirAll(src, 0o755); err != nil { // as kubelet creates a missing subPath
				return sandbox.Spec{}, err
			}
		}

		binds = append(binds, sandbox.Bind{Source: src, Path: m.MountPath, ReadOnly: m.ReadOnly})
	}

	for _, d := range []string{root, filepath.Join(root, "proc"), filepath.Join(root, "tmp")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return sandbox.Spec{}, err
		}
	}

	if err := os.Chmod(filepath.Join(root, "tmp"), 0o1777); err != nil {
		return sandbox.Spec{}, err
	}

	return sandbox.Spec{Root: root, Binds: binds, Argv: argv, Env: env, Dir: ctr.WorkingDir}, nil
}

// imageUserland lays out the root of a userland image that has more than
// the host's programs (apps.Image.Userland: postgres) and returns the env
// its image sets; a container without a command gets the image's
// entrypoint and, without args, its default command.
func imageUserland(pod *corev1.Pod, ctr *corev1.Container, root string) (map[string]string, error) {
	im, err := apps.Lookup(ctr.Image)
	if err != nil || im.Userland == nil {
		return nil, nil //nolint:nilerr // not such an image: the host's programs only
	}

	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}

	env, err := im.Userland(root, pod.Status.PodIP)
	if err != nil {
		return nil, fmt.Errorf("container %q: %w", ctr.Name, err)
	}

	if len(ctr.Command) == 0 {
		ctr.Command = im.Entrypoint
		if len(ctr.Args) == 0 {
			ctr.Args = im.Cmd
		}
	}

	return env, nil
}

// volumes are the host directories (or files) of the pod's volumes, by
// name: a hostPath where the node's path lives on the host, a claim's
// bound hostPath PV the same way, an emptyDir a new directory.
func (c *ControlPlane) volumes(ctx context.Context, pod *corev1.Pod, dir string) (map[string]string, error) {
	out := map[string]string{}

	for _, v := range pod.Spec.Volumes {
		var (
			src string
			err error
		)

		switch {
		case v.HostPath != nil:
			src, err = c.hostPath(v.HostPath)
		case v.PersistentVolumeClaim != nil:
			src, err = c.claimPath(ctx, pod.Namespace, v.PersistentVolumeClaim.ClaimName)
		case v.EmptyDir != nil:
			src = filepath.Join(dir, "volumes", v.Name)
			err = os.MkdirAll(src, 0o777) //nolint:gosec // as kubelet's
		case v.Secret != nil:
			src = filepath.Join(dir, "volumes", v.Name)
			err = c.keysVolume(ctx, pod.Namespace, "secret", v.Secret.SecretName, v.Secret.Items, v.Secret.DefaultMode, v.Secret.Optional, src)
		case v.ConfigMap != nil:
			src = filepath.Join(dir, "volumes", v.Name)
			err = c.keysVolume(ctx, pod.Namespace, "configmap", v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.DefaultMode, v.ConfigMap.Optional, src)
		case v.Projected != nil && strings.HasPrefix(v.Name, "kube-api-access-"):
			continue // the service account token: not mounted (see doc.go)
		default:
			return nil, cannot("FailedMount", "volume %q is of a kind the lab's node cannot mount (it mounts hostPath, persistentVolumeClaim bound to a hostPath PersistentVolume, emptyDir, secret and configMap)", v.Name)
		}

		if err != nil {
			return nil, fmt.Errorf("volume %q: %w", v.Name, err)
		}

		out[v.Name] = src
	}

	return out, nil
}

// hostPath resolves a hostPath volume on the host and checks its type as
// kubelet does (an empty type creates a missing directory, as the
// container runtime does).
func (c *ControlPlane) hostPath(hp *corev1.HostPathVolumeSource) (string, error) {
	p, err := c.cfg.HostPath(hp.Path)
	if err != nil {
		return "", err
	}

	typ := corev1.HostPathUnset
	if hp.Type != nil {
		typ = *hp.Type
	}

	fi, statErr := os.Stat(p)

	switch typ {
	case corev1.HostPathUnset, corev1.HostPathDirectoryOrCreate:
		if statErr != nil {
			err = os.MkdirAll(p, 0o755)
		}
	case corev1.HostPathDirectory:
		if statErr != nil || !fi.IsDir() {
			return "", cannot("FailedMount", "hostPath type check failed: %s is not a directory", hp.Path)
		}
	case corev1.HostPathFileOrCreate:
		if statErr != nil {
			if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
				err = os.WriteFile(p, nil, 0o644)
			}
		}
	case corev1.HostPathFile:
		if statErr != nil || !fi.Mode().IsRegular() {
			return "", cannot("FailedMount", "hostPath type check failed: %s is not a file", hp.Path)
		}
	case corev1.HostPathCharDev:
		if statErr != nil || fi.Mode()&os.ModeCharDevice == 0 {
			return "", cannot("FailedMount", "hostPath type check failed: %s is not a character device", hp.Path)
		}
	default:
		return "", cannot("FailedMount", "hostPath %s of type %s: the lab's node has no sockets or block devices to mount", hp.Path, typ)
	}

	return p, err
}

// claimPath is the host path of a claim's bound PersistentVolume, which
// must be a hostPath one.
func (c *ControlPlane) claimPath(ctx context.Context, ns, claim string) (string, error) {
	var pvc corev1.PersistentVolumeClaim
	if err := c.do(ctx, http.MethodGet, "/api/v1/namespaces/"+ns+"/persistentvolumeclaims/"+claim, "application/json", nil, &pvc); err != nil {
		return "", fmt.Errorf("claim %s: %w", claim, err)
	}

	if pvc.Spec.VolumeName == "" || pvc.Status.Phase != corev1.ClaimBound {
		return "", cannot("FailedMount", "claim %s is not bound to a PersistentVolume", claim)
	}

	var pv corev1.PersistentVolume
	if err := c.do(ctx, http.MethodGet, "/api/v1/persistentvolumes/"+pvc.Spec.VolumeName, "application/json", nil, &pv); err != nil {
		return "", fmt.Errorf("claim %s: %w", claim, err)
	}

	if pv.Spec.HostPath == nil {
		return "", cannot("FailedMount", "claim %s is bound to PersistentVolume %s, which is not a hostPath one: the lab's node mounts only hostPath volumes", claim, pv.Name)
	}

	return c.hostPath(pv.Spec.HostPath)
}

func failed(pod *corev1.Pod, reason, message string) podResult {
	res := podResult{Phase: corev1.PodFailed, Reason: reason, Message: message}
	for _, ctr := range pod.Spec.InitContainers {
		res.Init = append(res.Init, waiting(ctr, reason, message))
	}

	for _, ctr := range pod.Spec.Containers {
		res.Containers = append(res.Containers, waiting(ctr, reason, message))
	}

	return res
}

func waiting(ctr corev1.Container, reason, message string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: ctr.Name, Image: ctr.Image,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}}
}

func terminated(ctr corev1.Container, code int32, reason, message string, started time.Time) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: ctr.Name, Image: ctr.Image, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: code, Reason: reason, Message: message,
		StartedAt: metav1.NewTime(started), FinishedAt: metav1.NewTime(time.Now()),
	}}}
}

// writeStatus writes the pod's terminal status as a kubelet does.
func (c *ControlPlane) writeStatus(ctx context.Context, pod *corev1.Pod, res podResult) error {
	now := metav1.NewTime(time.Now())
	cond := func(t corev1.PodConditionType, s corev1.ConditionStatus) corev1.PodCondition {
		return corev1.PodCondition{Type: t, Status: s, LastTransitionTime: now, Reason: "PodCompleted"}
	}

	status := map[string]any{
		"phase": res.Phase, "reason": res.Reason, "message": res.Message,
		"conditions": []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			cond(corev1.PodReady, corev1.ConditionFalse), cond(corev1.ContainersReady, corev1.ConditionFalse),
		},
		"containerStatuses": res.Containers,
	}
	if len(pod.Spec.InitContainers) > 0 {
		status["initContainerStatuses"] = res.Init
	}

	b, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}

	return c.do(ctx, http.MethodPatch, "/api/v1/namespaces/"+pod.Namespace+"/pods/"+pod.Name+"/status",
		"application/merge-patch+json", bytes.NewReader(b), nil)
}

// expand replaces $(NAME) in s by NAME's value, as kubelet expands command,
// args and env: "$$" is "$", and a name not in vars stays as written.
func expand(s string, vars map[string]string) string {
	var b strings.Builder

	for i := 0; i < len(s); i++ {
		switch {
		case s[i] != '$' || i+1 == len(s):
			b.WriteByte(s[i])
		case s[i+1] == '$':
			b.WriteByte('$')
			i++
		case s[i+1] == '(' && strings.IndexByte(s[i+2:], ')') >= 0:
			end := i + 2 + strings.IndexByte(s[i+2:], ')')
			if v, ok := vars[s[i+2:end]]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : end+1])
			}

			i = end
		default:
			b.WriteByte('$')
		}
	}

	return b.String()
}

// tailBuffer keeps the last tailSize bytes written to it.
type tailBuffer struct{ b []byte }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > tailSize {
		t.b = t.b[len(t.b)-tailSize:]
	}

	return len(p), nil
}

func (t *tailBuffer) String() string { return strings.ToValidUTF8(string(t.b), "") }
