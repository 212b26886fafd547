package helm

import (
	"bufio"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// The pods of a kubernetes_job step: their logs streamed into the step's
// log while it runs, and the failure told from their states and last lines.

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
