package kubecp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/homelab-migrate/migrate/lab/apps"
	"github.com/homelab-migrate/migrate/lab/sandbox"
)

// The app pods' runner: kwok leaves the pods of Deployments,
// StatefulSets and DaemonSets Pending on the lab's node
// (podReadyForOthers), and the control plane runs them as kubelet does:
// each container side by side, its program chosen by its image
// (lab/apps: a stand-in, or its command with the host's programs),
// restarted with back-off when it exits, Ready only while its
// readinessProbe passes (probes.go), its status written as kubelet
// writes it.

// CrashLoopBackOff is kubelet's first back-off before restarting a
// container that exited again (doubled each time, up to MaxBackOff).
var CrashLoopBackOff = 10 * time.Second

// MaxBackOff is kubelet's longest back-off.
var MaxBackOff = 5 * time.Minute

// appOwners are the kinds whose pods the app runner runs.
var appOwners = []string{"ReplicaSet", "StatefulSet", "DaemonSet"}

func ownedByApp(pod *corev1.Pod) bool {
	return slices.ContainsFunc(pod.OwnerReferences, func(o metav1.OwnerReference) bool { return slices.Contains(appOwners, o.Kind) })
}

// podReadyForOthers writes kwok's pod-ready stage (the file f) with one
// more requirement, that the pod is not one the app runner runs, and
// returns the new file's path.
func (c *ControlPlane) podReadyForOthers(f string) (string, error) {
	b, err := os.ReadFile(f)
	if err != nil {
		return "", err
	}

	const at = "    matchExpressions:\n"
	if !bytes.Contains(b, []byte(at)) {
		return "", fmt.Errorf("kubecp: kwok's stage %s has no matchExpressions to add to", f)
	}

	req := "    - key: '.metadata.ownerReferences.[].kind'\n      operator: 'NotIn'\n      values: ['" + strings.Join(appOwners, "', '") + "']\n"
	b = bytes.Replace(b, []byte(at), []byte(at+req), 1)

	out := filepath.Join(c.cfg.Dir, "kwok-pod-ready.yaml")

	return out, os.WriteFile(out, b, 0o600)
}

// runAppPods runs, until ctx ends, the node's app pods, and stops those
// deleted.
func (c *ControlPlane) runAppPods(ctx context.Context) {
	defer c.runners.Done()

	started := map[string]context.CancelFunc{}
	done := make(chan string)
	query := "/api/v1/pods?fieldSelector=" + url.QueryEscape("spec.nodeName="+c.cfg.NodeName)

	for {
		var list corev1.PodList
		if err := c.do(ctx, http.MethodGet, query, "application/json", nil, &list); err == nil {
			listed := map[string]bool{}

			for _, pod := range list.Items {
				uid := string(pod.UID)
				live := pod.DeletionTimestamp == nil && (pod.Status.Phase == corev1.PodPending || pod.Status.Phase == corev1.PodRunning)
				listed[uid] = live

				if started[uid] != nil || !live || !ownedByApp(&pod) {
					continue
				}

				podCtx, cancel := context.WithCancel(ctx)
				started[uid] = cancel

				c.runners.Add(1)

				go func() {
					defer c.runners.Done()
					c.runAppPod(podCtx, pod)

					select {
					case done <- uid:
					case <-ctx.Done():
					}
				}()
			}

			for uid, cancel := range started {
				if !listed[uid] {
					cancel() // deleted: its containers are killed
				}
			}
		}

		select {
		case <-ctx.Done():
			return
		case uid := <-done:
			started[uid]()
			delete(started, uid)
		case <-time.After(PollInterval):
		}
	}
}

// appPod is one running app pod: its containers' statuses, written to
// the API whenever one changes.
type appPod struct {
	c   *ControlPlane
	pod corev1.Pod
	ip  string
	dir string
	log io.Writer // the pod's lab log (Dir/logs/pods/NS_NAME.log)

	mu       sync.Mutex
	statuses []corev1.ContainerStatus
	started  bool // a container started: the pod is Running
	changed  chan struct{}
}

// runAppPod runs the pod's containers until ctx ends (the pod deleted,
// or the control plane stopping).
func (c *ControlPlane) runAppPod(ctx context.Context, pod corev1.Pod) {
	if pod.Status.StartTime == nil { // when the node took the pod (kept by a control plane started again)
		now := metav1.Now()
		pod.Status.StartTime = &now
	}

	p := &appPod{c: c, pod: pod, dir: filepath.Join(c.cfg.Dir, "pods", string(pod.UID)), changed: make(chan struct{}, 1)}
	defer c.releasePodIP(string(pod.UID))

	logFile, err := p.openPodLog()
	if err != nil {
		c.cfg.logf("kubecp: pod %s/%s: %v", pod.Namespace, pod.Name, err)

		return
	}
	defer logFile.Close() //nolint:errcheck

	p.log = logFile

	if p.ip, err = c.podIP(&pod); err != nil {
		fmt.Fprintf(p.log, "== the lab could not give the pod an address: %v\n", err)

		return
	}

	for _, ctr := range pod.Spec.Containers {
		st := waiting(ctr, "ContainerCreating", "")
		st.RestartCount = p.previousRestarts(ctr.Name)
		p.statuses = append(p.statuses, st)
	}

	var writers sync.WaitGroup

	writers.Add(1)

	go func() {
		defer writers.Done()
		p.writeStatuses(ctx)
	}()

	defer writers.Wait()

	volumes, err := c.volumes(ctx, &pod, p.dir)
	if err != nil {
		var pe *podError
		if !errors.As(err, &pe) {
			pe = &podError{reason: "FailedMount", message: err.Error()}
		}

		fmt.Fprintf(p.log, "== the lab could not mount the pod's volumes: %s\n", pe.message)
		p.setAll(pe.reason, pe.message)
		<-ctx.Done()

		return
	}

	defer func() {
		// its emptyDirs and Secret files end with the pod
		for _, d := range []string{"containers", "volumes"} {
			os.RemoveAll(filepath.Join(p.dir, d)) //nolint:errcheck
		}
	}()

	var containers sync.WaitGroup

	for i := range pod.Spec.Containers {
		containers.Add(1)

		go func() {
			defer containers.Done()
			p.keepRunning(ctx, i, volumes)
		}()
	}

	containers.Wait()
}

func (p *appPod) openPodLog() (*os.File, error) {
	logDir := filepath.Join(p.c.cfg.Dir, "logs", "pods")
	if err := os.MkdirAll(logDir, 0o700); err != nil {
		return nil, err
	}

	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return nil, err
	}

	return os.OpenFile(filepath.Join(logDir, p.pod.Namespace+"_"+p.pod.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
}

// previousRestarts is the container's restartCount in the pod's status:
// a control plane started again (a node rebooted) goes on counting.
func (p *appPod) previousRestarts(name string) int32 {
	for _, st := range p.pod.Status.ContainerStatuses {
		if st.Name == name {
			return st.RestartCount
		}
	}

	return 0
}

// keepRunning runs container i again and again as kubelet does for
// restartPolicy Always (and OnFailure while it fails): at once after its
// first exit, then after a back-off doubling from CrashLoopBackOff.
func (p *appPod) keepRunning(ctx context.Context, i int, volumes map[string]string) {
	ctr := p.pod.Spec.Containers[i]
	backoff := time.Duration(0)

	for ctx.Err() == nil {
		run, err := p.prepare(ctx, ctr, volumes)
		if err != nil {
			p.failedToStart(ctx, i, err)

			continue
		}

		start := time.Now()
		code, reason := p.runOnce(ctx, i, run)

		if ctx.Err() != nil {
			return
		}

		terminated := &corev1.ContainerStateTerminated{ExitCode: int32(code), Reason: reason, //nolint:gosec // an exit code
			StartedAt: metav1.NewTime(start), FinishedAt: metav1.NewTime(time.Now())}

		if !p.restarts(code) {
			p.update(i, func(st *corev1.ContainerStatus) {
				st.State = corev1.ContainerState{Terminated: terminated}
				st.Ready, st.Started = false, ptr(false)
			})
			<-ctx.Done()

			return
		}

		if time.Since(start) > 10*time.Minute {
			backoff = 0 // it ran long enough: kubelet forgets the back-off
		}

		message := fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", backoff, ctr.Name, p.pod.Name, p.pod.Namespace, p.pod.UID)
		p.update(i, func(st *corev1.ContainerStatus) {
			st.LastTerminationState = corev1.ContainerState{Terminated: terminated}
			st.State = corev1.ContainerState{Terminated: terminated}
			st.Ready, st.Started = false, ptr(false)

			if backoff > 0 {
				st.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: message}}
			}
		})
		fmt.Fprintf(p.log, "== container %s exited with %d (%s); restarting after %s\n", ctr.Name, code, reason, backoff)

		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}

		backoff = min(max(2*backoff, CrashLoopBackOff), MaxBackOff)

		p.update(i, func(st *corev1.ContainerStatus) { st.RestartCount++ })
	}
}

// restarts says whether kubelet starts the container again after it
// exited with code.
func (p *appPod) restarts(code int) bool {
	switch p.pod.Spec.RestartPolicy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return code != 0
	default:
		return true
	}
}

// failedToStart shows why the container cannot start (an image without
// stand-in: ErrImagePull then ImagePullBackOff) and waits before trying
// again, as kubelet does.
func (p *appPod) failedToStart(ctx context.Context, i int, err error) {
	reason := "CreateContainerConfigError"
	if errors.Is(err, apps.ErrUnknownImage) {
		reason = "ErrImagePull"
	}

	fmt.Fprintf(p.log, "== container %s: %s: %v\n", p.pod.Spec.Containers[i].Name, reason, err)
	p.update(i, func(st *corev1.ContainerStatus) {
		st.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: err.Error()}}
	})

	select {
	case <-ctx.Done():
		return
	case <-time.After(CrashLoopBackOff):
	}

	if reason == "ErrImagePull" {
		p.update(i, func(st *corev1.ContainerStatus) {
			st.State.Waiting.Reason = "ImagePullBackOff"
			st.State.Waiting.Message = "Back-off pulling image \"" + p.pod.Spec.Containers[i].Image + "\": " + err.Error()
		})

		select {
		case <-ctx.Done():
		case <-time.After(CrashLoopBackOff):
		}
	}
}

// containerRun is a container ready to start: a stand-in, or a command.
type containerRun struct {
	ctr     corev1.Container
	program apps.Program // nil: the command of spec
	app     *apps.Container
	spec    sandbox.Spec
}

// runOnce runs the container once, probing it, and returns its exit code
// and the reason kubelet gives (Completed, Error).
func (p *appPod) runOnce(ctx context.Context, i int, run *containerRun) (int, string) {
	ctr := run.ctr

	restart := p.restartCount(i)
	logPath := p.c.containerLogPathN(&p.pod, ctr.Name, int(restart))

	p.c.live.set(logPath, true)
	defer p.c.live.set(logPath, false)

	if restart >= 2 { // kubelet keeps the current log and the previous one
		os.Remove(p.c.containerLogPathN(&p.pod, ctr.Name, int(restart)-2)) //nolint:errcheck
	}

	cri, err := openCRILog(logPath)
	if err != nil {
		return 128, "StartError"
	}
	defer cri.Close() //nolint:errcheck

	out := io.MultiWriter(p.log, cri.stream("stdout"))

	runCtx, kill := context.WithCancel(ctx)
	defer kill()

	fmt.Fprintf(p.log, "== container %s (%s) started on %s\n", ctr.Name, ctr.Image, p.ip)

	p.update(i, func(st *corev1.ContainerStatus) {
		st.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}
		st.ContainerID = fmt.Sprintf("lab://%s-%s-%d", p.pod.UID, ctr.Name, restart)
		st.Ready, st.Started = false, ptr(false)
	})

	exited := make(chan int, 1)

	go func() { exited <- run.start(runCtx, out) }()

	probing := make(chan struct{})

	go func() {
		defer close(probing)
		p.probe(runCtx, i, run, kill)
	}()

	code := <-exited

	kill()
	<-probing

	if code == 0 {
		return 0, "Completed"
	}

	return code, "Error"
}

func (p *appPod) restartCount(i int) int32 {
	p.mu.Lock()
	defer p.mu.Unlock()

	return p.statuses[i].RestartCount
}

// update changes container i's status and has it written.
func (p *appPod) update(i int, change func(*corev1.ContainerStatus)) {
	p.mu.Lock()
	change(&p.statuses[i])

	if p.statuses[i].State.Running != nil {
		p.started = true
	}
	p.mu.Unlock()

	select {
	case p.changed <- struct{}{}:
	default:
	}
}

// setAll makes every container wait for reason.
func (p *appPod) setAll(reason, message string) {
	for i := range p.statuses {
		p.update(i, func(st *corev1.ContainerStatus) {
			st.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}
		})
	}
}

// writeStatuses writes the pod's status each time it changes, until ctx
// ends; a failed write is tried again.
func (p *appPod) writeStatuses(ctx context.Context) {
	retry := time.Duration(0)
	pending := true // the first status: its address, containers creating

	for {
		if pending {
			if err := p.writeStatus(ctx); err != nil && ctx.Err() == nil {
				retry = time.Second
			} else {
				retry, pending = 0, false
			}
		}

		var again <-chan time.Time
		if retry > 0 {
			again = time.After(retry)
		}

		select {
		case <-ctx.Done():
			return
		case <-p.changed:
			pending = true
		case <-again:
		}
	}
}

func (p *appPod) writeStatus(ctx context.Context) error {
	p.mu.Lock()
	statuses := slices.Clone(p.statuses)
	running := p.started
	p.mu.Unlock()

	now := metav1.Now()
	ready := corev1.ConditionTrue

	for _, st := range statuses {
		if !st.Ready {
			ready = corev1.ConditionFalse
		}
	}

	phase := corev1.PodPending
	if running {
		phase = corev1.PodRunning
	}

	hostIP := p.c.cfg.Addr
	status := map[string]any{
		"phase": phase,
		"conditions": []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: ready, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: ready, LastTransitionTime: now},
		},
		"containerStatuses": statuses,
		"hostIP":            hostIP, "hostIPs": []corev1.HostIP{{IP: hostIP}},
		"podIP": p.ip, "podIPs": []corev1.PodIP{{IP: p.ip}},
		"startTime": p.pod.Status.StartTime,
	}

	b, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}

	err = p.c.do(ctx, http.MethodPatch, "/api/v1/namespaces/"+p.pod.Namespace+"/pods/"+p.pod.Name+"/status",
		"application/merge-patch+json", bytes.NewReader(b), nil)

	var he *httpError
	if errors.As(err, &he) && he.code == http.StatusNotFound {
		return nil // deleted: nothing to write
	}

	return err
}

func ptr[T any](v T) *T { return &v }

// podIP gives the pod its address: the node's for hostNetwork, else
// 127.(A+128).C.N for a node at 127.A.B.C (N from 2 to 254, one per pod
// of the node; the pod's earlier address if it had one).
func (c *ControlPlane) podIP(pod *corev1.Pod) (string, error) {
	if pod.Spec.HostNetwork {
		return c.cfg.Addr, nil
	}

	node := net.ParseIP(c.cfg.Addr).To4()
	if node == nil || node[0] != 127 || node[1] >= 128 {
		return "", fmt.Errorf("the node's address %s is not in 127.0.0.0/9: its pods' addresses would not be local", c.cfg.Addr)
	}

	c.podIPs.Lock()
	defer c.podIPs.Unlock()

	if c.podIPs.byUID == nil {
		c.podIPs.byUID = map[string]string{}
	}

	taken := map[string]bool{}
	for _, ip := range c.podIPs.byUID {
		taken[ip] = true
	}

	if ip := pod.Status.PodIP; ip != "" && !taken[ip] && strings.HasPrefix(ip, fmt.Sprintf("127.%d.%d.", node[1]+128, node[3])) {
		c.podIPs.byUID[string(pod.UID)] = ip

		return ip, nil
	}

	for n := 2; n < 255; n++ {
		ip := fmt.Sprintf("127.%d.%d.%d", node[1]+128, node[3], n)
		if !taken[ip] {
			c.podIPs.byUID[string(pod.UID)] = ip

			return ip, nil
		}
	}

	return "", errors.New("all 253 pod addresses of the node are taken")
}

func (c *ControlPlane) releasePodIP(uid string) {
	c.podIPs.Lock()
	defer c.podIPs.Unlock()

	delete(c.podIPs.byUID, uid)
}
