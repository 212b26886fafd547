package helm

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/kube"
	"helm.sh/helm/v3/pkg/release"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/cli-runtime/pkg/resource"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// Waiting for a release, as helm install --wait does (Helm's own
// ReadyChecker judges each resource: Deployments, StatefulSets and
// DaemonSets with their pods Ready, claims Bound, Jobs complete with
// wait_for_jobs), with the release's pods watched meanwhile: a container
// that crash-loops, cannot pull its image or cannot be configured fails
// the step at once, not when the timeout ends, naming the pod, its
// restarts and its last log lines. Helm's own wait cannot be cut short
// (its goroutine outlives a cancelled context and may record the release
// later), so migrate installs without it and waits here.

// releasePoll asks again soon at first: the release's workloads are
// often ready within a second, and until the step ends the service it
// starts is counted as down.
var releasePoll = interval{first: 100 * time.Millisecond, most: 2 * time.Second}

const (
	// crashRestarts restarts of a container not Ready say it crash-loops
	// even while the kubelet's back-off has not named it so yet.
	crashRestarts = 3
	// logBytes bounds what is read of a pod's log for a diagnosis.
	logBytes = 16 << 10
)

// stuckWaiting are the waiting reasons that waiting longer does not cure.
var stuckWaiting = []string{"CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError", "CreateContainerError", "InvalidImageName", "RunContainerError"}

// waitWhat is what the plan says a release's apply waits for.
func waitWhat(st relAttrs) string {
	if !st.Wait {
		return "wait = false: apply does not wait for the release's workloads"
	}
	what := "Deployments, StatefulSets and DaemonSets Ready, claims Bound"
	if st.WaitForJobs {
		what += ", Jobs complete"
	}
	return fmt.Sprintf("apply waits up to %s for its %s; a crash-looping pod fails it at once", st.Timeout, what)
}

// podLogs reads the last lines of a container's log (the run before the
// current one with previous); a variable so that tests can serve logs
// where no kubelet does.
var podLogs = func(ctx context.Context, cl *cluster, ns, pod, container string, previous bool) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return cl.client.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{
		Container: container, Previous: previous, TailLines: ptr(int64(logTail)), LimitBytes: ptr(int64(logBytes)),
	}).DoRaw(ctx)
}

// releaseWaiter waits for one revision of a release.
type releaseWaiter struct {
	c         *call
	cl        *cluster
	st        relAttrs
	resources kube.ResourceList
	checker   kube.ReadyChecker
	said      string            // the checker's last word on the resource it judges
	notReady  map[string]string // resource -> why it is not ready, from the last look
}

// waitRelease waits until the resources of rel are ready; a crash-looping
// pod or the timeout fails it. stopped: a gentle stop ended the wait.
func waitRelease(ctx context.Context, c *call, cl *cluster, cfg *action.Configuration, st relAttrs, rel *release.Release) (_ phases.Diagnostics, stopped bool) {
	resources, err := cfg.KubeClient.Build(bytes.NewBufferString(rel.Manifest), false)
	if err != nil {
		return phases.Errorf("Cannot Wait For Release", "%s: reading the objects of release %s/%s to wait for them: %v.", c.Addr, st.Namespace, st.Name, err), false
	}
	w := &releaseWaiter{c: c, cl: cl, st: st, resources: resources}
	opts := []kube.ReadyCheckerOption{kube.PausedAsReady(true)}
	if st.WaitForJobs {
		opts = append(opts, kube.CheckJobs(true))
	}
	w.checker = kube.NewReadyChecker(cl.client, func(format string, args ...any) { w.said = fmt.Sprintf(format, args...) }, opts...)
	c.Log.Printf("waiting up to %s for the %d object(s) of release %s/%s", st.Timeout, len(resources), st.Namespace, st.Name)

	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, timeout(st))
	defer cancel()
	var lastPods []corev1.Pod
	_, end, diags := poll(parent, ctx, c.Stop, releasePoll, func(ctx context.Context, _ bool) (string, phases.Diagnostics) {
		pods := w.pods(ctx)
		if ctx.Err() == nil {
			lastPods = pods
		}
		if d := w.crashing(parent, pods); d != nil {
			return "", d
		}
		return w.look(ctx), nil
	}, func(state string) { c.Log.Printf("waiting: %s", state) })
	switch end {
	case waitDone:
		c.Log.Printf("release %s/%s: every object is ready", st.Namespace, st.Name)
		return nil, false
	case waitFailed:
		return diags, false
	case waitStopped:
		return sdk.StoppedWaiting(c.Addr, fmt.Sprintf("revision %d of release %s/%s is installed", rel.Version, st.Namespace, st.Name), "its workloads becoming ready"), true
	case waitInterrupted:
		return sdk.Interrupted(c.Addr, parent.Err()), false
	}
	return phases.Errorf("Release Not Ready", "%s: release %s/%s was not ready within its timeout (%s).%s%s It is marked failed; rollback returns to the previous revision (or uninstalls it). Fix what is named above, or raise timeout.",
		c.Addr, st.Namespace, st.Name, st.Timeout, w.unready(), podStatesOf(lastPods)), false
}

// look asks each resource once; "" when all are ready, else the first
// that is not and why.
func (w *releaseWaiter) look(ctx context.Context) string {
	w.notReady = map[string]string{}
	var first string
	for _, r := range w.resources {
		w.said = ""
		ready, err := w.checker.IsReady(ctx, r)
		if ready {
			continue
		}
		why := w.said
		if err != nil {
			why = err.Error()
		}
		if why == "" {
			why = "not ready"
		}
		id := resourceID(r)
		w.notReady[id] = clipText(why)
		if first == "" {
			first = id + ": " + clipText(why)
		}
	}
	return first
}

// unready names the resources not ready at the last look.
func (w *releaseWaiter) unready() string {
	var b strings.Builder
	for _, id := range slices.Sorted(maps.Keys(w.notReady)) {
		fmt.Fprintf(&b, "\nNot ready: %s (%s)", id, w.notReady[id])
	}
	return b.String()
}

func resourceID(r *resource.Info) string {
	kind := r.Object.GetObjectKind().GroupVersionKind().Kind
	if r.Namespace == "" {
		return kind + " " + r.Name
	}
	return kind + " " + r.Namespace + "/" + r.Name
}

// pods are the pods of the release's workloads that this revision runs:
// a Deployment's newest ReplicaSet's, a StatefulSet's update revision's,
// a DaemonSet's and a Job's all. A pod of an older revision (still
// crash-looping from before the upgrade that fixes it) is not judged.
func (w *releaseWaiter) pods(ctx context.Context) []corev1.Pod {
	var out []corev1.Pod
	seen := map[string]bool{}
	for _, r := range w.resources {
		sel, current := w.selectorOf(ctx, r)
		if sel == nil {
			continue
		}
		list, err := w.cl.client.CoreV1().Pods(r.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			continue // a pod list that fails says nothing; the next look asks again
		}
		for _, p := range list.Items {
			if !seen[p.Namespace+"/"+p.Name] && (current == nil || current(p)) {
				seen[p.Namespace+"/"+p.Name] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// selectorOf is the pod selector of a workload and, for one that keeps
// older pods during a rollout, which of its pods are of the current
// revision; nil for objects without pods.
func (w *releaseWaiter) selectorOf(ctx context.Context, r *resource.Info) (labels.Selector, func(corev1.Pod) bool) {
	var ls *metav1.LabelSelector
	var current func(corev1.Pod) bool
	switch o := kube.AsVersioned(r).(type) {
	case *appsv1.Deployment:
		ls = o.Spec.Selector
		current = w.newestReplicaSet(ctx, r.Namespace, o)
	case *appsv1.StatefulSet:
		ls = o.Spec.Selector
		if live, err := w.cl.client.AppsV1().StatefulSets(r.Namespace).Get(ctx, r.Name, metav1.GetOptions{}); err == nil && live.Status.UpdateRevision != "" {
			rev := live.Status.UpdateRevision
			current = func(p corev1.Pod) bool { return p.Labels[appsv1.ControllerRevisionHashLabelKey] == rev }
		}
	case *appsv1.DaemonSet:
		ls = o.Spec.Selector
	case *batchv1.Job:
		ls = &metav1.LabelSelector{MatchLabels: map[string]string{batchv1.JobNameLabel: r.Name}}
	case *corev1.Pod:
		name := r.Name
		return labels.Everything(), func(p corev1.Pod) bool { return p.Name == name }
	default:
		return nil, nil
	}
	if ls == nil {
		return nil, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return nil, nil
	}
	return sel, current
}

// newestReplicaSet selects the pods of a Deployment's newest ReplicaSet
// (the highest deployment.kubernetes.io/revision); nil (all its pods)
// when there is none yet.
func (w *releaseWaiter) newestReplicaSet(ctx context.Context, ns string, d *appsv1.Deployment) func(corev1.Pod) bool {
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return nil
	}
	list, err := w.cl.client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil
	}
	var newest *appsv1.ReplicaSet
	best := -1
	for i, rs := range list.Items {
		if !ownedBy(rs.OwnerReferences, "Deployment", d.Name) {
			continue
		}
		if rev, _ := strconv.Atoi(rs.Annotations["deployment.kubernetes.io/revision"]); rev > best {
			newest, best = &list.Items[i], rev
		}
	}
	if newest == nil {
		return nil
	}
	return func(p corev1.Pod) bool { return ownedBy(p.OwnerReferences, "ReplicaSet", newest.Name) }
}

func ownedBy(refs []metav1.OwnerReference, kind, name string) bool {
	return slices.ContainsFunc(refs, func(r metav1.OwnerReference) bool { return r.Kind == kind && r.Name == name })
}

// crashing fails the wait when a container of pods is stuck: the first
// one found, named with its restarts, reason and last log lines.
func (w *releaseWaiter) crashing(ctx context.Context, pods []corev1.Pod) phases.Diagnostics {
	for _, p := range pods {
		for _, s := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
			reason := stuckReason(s)
			if reason == "" {
				continue
			}
			lines, previous, logErr := w.lastLines(ctx, p, s)
			report := crashReport(p, s, reason, lines, previous, logErr)
			w.c.Log.Printf("%s", strings.SplitN(report, "\n", 2)[0])
			return phases.Errorf("Release Pod Failing", "%s: release %s/%s is not ready: %s\nThe revision is marked failed; rollback returns to the previous revision (or uninstalls it).", w.c.Addr, w.st.Namespace, w.st.Name, report)
		}
	}
	return nil
}

// stuckReason is why a container will not become ready by waiting, or "".
func stuckReason(s corev1.ContainerStatus) string {
	if wt := s.State.Waiting; wt != nil && slices.Contains(stuckWaiting, wt.Reason) {
		return wt.Reason
	}
	if s.RestartCount >= crashRestarts && !s.Ready {
		return fmt.Sprintf("restarted %d times", s.RestartCount)
	}
	return ""
}

// lastLines reads the last lines of a container's log: the run that ended
// (previous) when it restarted, else the current one; scrubbed.
func (w *releaseWaiter) lastLines(ctx context.Context, p corev1.Pod, s corev1.ContainerStatus) (lines []string, previous bool, _ error) {
	var b []byte
	var err error
	if s.RestartCount > 0 || s.LastTerminationState.Terminated != nil {
		b, err = podLogs(ctx, w.cl, p.Namespace, p.Name, s.Name, true)
		previous = err == nil && len(b) > 0
	}
	if !previous {
		b, err = podLogs(ctx, w.cl, p.Namespace, p.Name, s.Name, false)
	}
	if err != nil {
		return nil, false, err
	}
	return tailLines(w.c.Scrub.Text(string(b)), logTail), previous, nil
}

// tailLines are the last n lines of text, each clipped to 300 bytes.
func tailLines(text string, n int) []string {
	text = strings.TrimRight(text, "\n")
	if text == "" {
		return nil
	}
	all := strings.Split(text, "\n")
	all = all[max(0, len(all)-n):]
	for i, l := range all {
		if len(l) > 300 {
			all[i] = l[:300] + "..."
		}
	}
	return all
}

// crashReport says what is wrong with a container of a pod: its reason,
// restarts, how its last run ended, and its last log lines (or why there
// are none).
func crashReport(p corev1.Pod, s corev1.ContainerStatus, reason string, lines []string, previous bool, logErr error) string {
	var b strings.Builder
	fmt.Fprintf(&b, "pod %s/%s, container %s: %s, %d restart(s)", p.Namespace, p.Name, s.Name, reason, s.RestartCount)
	if wt := s.State.Waiting; wt != nil && wt.Message != "" {
		fmt.Fprintf(&b, " (%s)", clipText(wt.Message))
	}
	if t := s.LastTerminationState.Terminated; t != nil {
		fmt.Fprintf(&b, "; its last run ended: %s, exit code %d", orDefault(t.Reason, "terminated"), t.ExitCode)
		if t.Message != "" {
			fmt.Fprintf(&b, " (%s)", clipText(t.Message))
		}
	}
	b.WriteString(".")
	switch {
	case logErr != nil:
		fmt.Fprintf(&b, "\nIts log cannot be read: %s.", clipText(logErr.Error()))
	case len(lines) == 0:
		b.WriteString("\nIts log is empty.")
	default:
		run := "current run"
		if previous {
			run = "run that ended"
		}
		fmt.Fprintf(&b, "\nThe last %d line(s) of its log (the %s):\n  %s", len(lines), run, strings.Join(lines, "\n  "))
	}
	return b.String()
}

// podStatesOf says, for a timeout, what the pods were doing: each one not
// Ready with its phase and its containers' waiting reasons.
func podStatesOf(pods []corev1.Pod) string {
	var b strings.Builder
	for _, p := range pods {
		if podIsReady(p) {
			continue
		}
		fmt.Fprintf(&b, "\nPod %s/%s is %s", p.Namespace, p.Name, orDefault(string(p.Status.Phase), "Pending"))
		var why []string
		for _, c := range p.Status.Conditions {
			if c.Status != corev1.ConditionTrue && c.Reason != "" {
				why = append(why, fmt.Sprintf("%s: %s", c.Reason, clipText(c.Message)))
				break
			}
		}
		for _, s := range p.Status.ContainerStatuses {
			if wt := s.State.Waiting; wt != nil {
				why = append(why, fmt.Sprintf("container %s waiting: %s", s.Name, strings.Trim(wt.Reason+": "+clipText(wt.Message), ": ")))
			} else if !s.Ready {
				why = append(why, fmt.Sprintf("container %s not ready", s.Name))
			}
		}
		if len(why) > 0 {
			b.WriteString(" (" + strings.Join(why, "; ") + ")")
		}
		b.WriteString(".")
	}
	return b.String()
}

func podIsReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// markFailed records that the revision did not become ready, as Helm's
// own wait does when it gives up; the next apply upgrades it.
func markFailed(cfg *action.Configuration, rel *release.Release, why string) error {
	rel.SetStatus(release.StatusFailed, descPrefix+"not ready: "+clipText(why))
	return cfg.Releases.Update(rel)
}
