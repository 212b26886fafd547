package talosvm_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// kubeClient is a client of the node's Kubernetes through the kubeconfig
// of its Talos API.
func kubeClient(t *testing.T, ctx context.Context, c *client.Client) kubernetes.Interface {
	t.Helper()

	kc, err := c.Kubeconfig(ctx)
	if err != nil {
		t.Fatal(err)
	}

	rc, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		t.Fatal(err)
	}

	k, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}

	return k
}

// privileged creates a namespace where hostPath pods are admitted.
func privileged(t *testing.T, ctx context.Context, k kubernetes.Interface, name string) {
	t.Helper()

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}
	if _, err := k.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

var dataDir = corev1.HostPathDirectory

// runJob creates a Job of one pod (no retry) and returns it once it is
// complete or failed, with its pod.
func runJob(t *testing.T, ctx context.Context, k kubernetes.Interface, ns, name string, spec corev1.PodSpec) (*batchv1.Job, *corev1.Pod) {
	t.Helper()

	spec.RestartPolicy = corev1.RestartPolicyNever
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: batchv1.JobSpec{
			BackoffLimit: new(int32),
			Template:     corev1.PodTemplateSpec{Spec: spec},
		},
	}

	if _, err := k.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	for {
		j, err := k.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}

		for _, c := range j.Status.Conditions {
			if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
				pods, err := k.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + name})
				if err != nil || len(pods.Items) != 1 {
					t.Fatalf("the pods of job %s: %v %v", name, pods, err)
				}

				return j, &pods.Items[0]
			}
		}

		if ctx.Err() != nil {
			t.Fatalf("job %s neither complete nor failed: %+v", name, j.Status)
		}

		time.Sleep(300 * time.Millisecond)
	}
}

func jobCondition(j *batchv1.Job) batchv1.JobConditionType {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return c.Type
		}
	}

	return ""
}

// testJobs: the node runs the commands of Job pods (lab/kubecp), with
// their hostPath, claim and emptyDir volumes, as the homelab's rehearsal
// and Synapse restore need.
func testJobs(t *testing.T, ctx context.Context, k kubernetes.Interface, c *client.Client, data, vmDir string) {
	t.Helper()
	privileged(t, ctx, k, "jobs")

	// the Synapse restore's claim: bound to a hostPath PV on the share
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "matrix"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName:       "manual",
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/mnt/data/matrix"}},
		},
	}
	if _, err := k.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	manual := "manual"
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "matrix"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &manual, VolumeName: "matrix",
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if _, err := k.CoreV1().PersistentVolumeClaims("jobs").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	j, pod := runJob(t, ctx, k, "jobs", "rehearsal-write", corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init", Image: "busybox", Command: []string{"sh", "-c", "echo from the init container > /work/init"},
			VolumeMounts: []corev1.VolumeMount{{Name: "work", MountPath: "/work"}}}},
		Containers: []corev1.Container{{Name: "write", Image: "busybox",
			Command: []string{"sh", "-c"},
			Args: []string{`set -e; mkdir -p $(DIR); cat /work/init > /var/mnt/data/.migrate/rehearsal
				echo "$GREETING" >> /var/mnt/data/.migrate/rehearsal
				mkdir /restore/media && echo restored > /restore/media/file && chown -R 991:991 /restore
				echo done`},
			Env: []corev1.EnvVar{{Name: "GREETING", Value: "hello from the pod"}, {Name: "DIR", Value: "/var/mnt/data/.migrate"}}, // $(DIR): kubelet's expansion
			VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/var/mnt/data"}, {Name: "restore", MountPath: "/restore"},
				{Name: "work", MountPath: "/work"}}}},
		Volumes: []corev1.Volume{
			{Name: "data", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/mnt/data", Type: &dataDir}}},
			{Name: "restore", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "matrix"}}},
			{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
	})
	if jobCondition(j) != batchv1.JobComplete || pod.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("job %v, pod %s %s %+v", j.Status.Conditions, pod.Status.Phase, pod.Status.Message, pod.Status.ContainerStatuses)
	}

	if st := pod.Status.ContainerStatuses; len(st) != 1 || st[0].State.Terminated == nil || st[0].State.Terminated.Reason != "Completed" || st[0].State.Terminated.Message != "done\n" {
		t.Errorf("container statuses %+v", st)
	}

	// its output, as `kubectl logs` asks the node for it (lab/kubecp's
	// kubelet endpoint on the node's address)
	if b, err := k.CoreV1().Pods("jobs").GetLogs(pod.Name, &corev1.PodLogOptions{Container: "write"}).DoRaw(ctx); err != nil || string(b) != "done\n" {
		t.Errorf("the pod's log: %q %v", b, err)
	}

	if b, err := k.CoreV1().Pods("jobs").GetLogs(pod.Name, &corev1.PodLogOptions{Container: "init"}).DoRaw(ctx); err != nil || string(b) != "" {
		t.Errorf("the init container's log (its output went to a file): %q %v", b, err)
	}

	want := "from the init container\nhello from the pod\n"
	if b, err := os.ReadFile(filepath.Join(data, ".migrate/rehearsal")); err != nil || string(b) != want {
		t.Errorf("the pod's file in the VM's data dir: %q %v", b, err)
	}

	if got, err := read(ctx, c, "/var/mnt/data/.migrate/rehearsal"); err != nil || got != want {
		t.Errorf("the pod's file through the Talos API: %q %v", got, err)
	}

	// what the pod ran in is gone, its result kept (never run twice)
	podDir := filepath.Join(vmDir, "kube", "pods", string(pod.UID))
	if _, err := os.Stat(filepath.Join(podDir, "result.json")); err != nil {
		t.Errorf("the pod's result: %v", err)
	}

	for _, d := range []string{"containers", "volumes"} {
		if _, err := os.Stat(filepath.Join(podDir, d)); !os.IsNotExist(err) {
			t.Errorf("the pod's %s still there: %v", d, err)
		}
	}

	if fi, err := os.Stat(filepath.Join(data, "matrix/media/file")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 991 { //nolint:forcetypeassert
		t.Errorf("the restored file on the claim's PV, chowned to 991: %v %v", fi, err)
	}

	// a failing command: the Job fails, its exit code in the pod's status
	j, pod = runJob(t, ctx, k, "jobs", "exit-3", corev1.PodSpec{
		Containers: []corev1.Container{{Name: "fail", Image: "busybox", Command: []string{"sh", "-c", "echo about to fail >&2; exit 3"}}},
	})
	if jobCondition(j) != batchv1.JobFailed || pod.Status.Phase != corev1.PodFailed {
		t.Fatalf("job %v, pod %s", j.Status.Conditions, pod.Status.Phase)
	}

	if st := pod.Status.ContainerStatuses; len(st) != 1 || st[0].State.Terminated == nil || st[0].State.Terminated.ExitCode != 3 ||
		st[0].State.Terminated.Reason != "Error" || st[0].State.Terminated.Message != "about to fail\n" {
		t.Errorf("container statuses %+v", st)
	}

	// a pod past its activeDeadlineSeconds is killed and fails
	two := int64(2)
	j, pod = runJob(t, ctx, k, "jobs", "deadline", corev1.PodSpec{ActiveDeadlineSeconds: &two,
		Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"sleep", "60"}}}})
	if jobCondition(j) != batchv1.JobFailed || pod.Status.Reason != "DeadlineExceeded" || !strings.Contains(pod.Status.Message, "longer than the specified deadline") {
		t.Errorf("a pod past its deadline: %v, pod %s %s %q", j.Status.Conditions, pod.Status.Phase, pod.Status.Reason, pod.Status.Message)
	}

	// a Job deleted while its pod runs: the command is killed
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "deleted"}, Spec: batchv1.JobSpec{BackoffLimit: new(int32),
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"sh", "-c", "sleep 567"}}}}}}}
	if _, err := k.BatchV1().Jobs("jobs").Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	waitFor(t, ctx, "the deleted job's command to start", func() bool { return sleeping("567") })

	background := metav1.DeletePropagationBackground
	if err := k.BatchV1().Jobs("jobs").Delete(ctx, "deleted", metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
		t.Fatal(err)
	}

	waitFor(t, ctx, "the deleted job's command to be killed", func() bool { return !sleeping("567") })

	// what the lab cannot do, or kubelet would not, fails the pod, saying so
	for name, spec := range map[string]corev1.PodSpec{
		"value-from": {Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"true"},
			Env: []corev1.EnvVar{{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "k", LocalObjectReference: corev1.LocalObjectReference{Name: "s"}}}}}}}},
		"no-command": {Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		"config-map": {Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"true"}}},
			Volumes: []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}}},
		"nfs": {Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"true"}}},
			Volumes: []corev1.Volume{{Name: "share", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nas", Path: "/share"}}}}},
	} {
		want := map[string]string{"value-from": `secret "s" not found`, // kubelet's CreateContainerConfigError
			"no-command": "the lab's node runs no images", "config-map": `configmap "cfg" not found`,
			"nfs": `volume "share" is of a kind the lab's node cannot mount`}[name]

		j, pod := runJob(t, ctx, k, "jobs", name, spec)
		if jobCondition(j) != batchv1.JobFailed || pod.Status.Phase != corev1.PodFailed || !strings.Contains(podMessage(pod), want) {
			t.Errorf("job %s: %v, pod %s %q, want %q", name, j.Status.Conditions, pod.Status.Phase, podMessage(pod), want)
		}
	}
}

// podMessage is the pod's message, else its first container's.
func podMessage(pod *corev1.Pod) string {
	if pod.Status.Message != "" {
		return pod.Status.Message
	}

	for _, st := range pod.Status.ContainerStatuses {
		if t := st.State.Terminated; t != nil {
			return t.Message
		}

		if w := st.State.Waiting; w != nil {
			return w.Message
		}
	}

	return ""
}

// startInterrupted starts a Job whose pod runs until the node reboots; the
// returned check says that, the node back, the pod failed as on a node
// that rebooted, its command run once (never again for the same pod).
func startInterrupted(t *testing.T, ctx context.Context, k kubernetes.Interface, data string) func(*testing.T) {
	t.Helper()

	spec := corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{{Name: "long", Image: "busybox", Command: []string{"sh", "-c", "echo started >> /data/starts; sleep 600"},
			VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
		Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/mnt/data", Type: &dataDir}}}},
	}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "interrupted"}, Spec: batchv1.JobSpec{BackoffLimit: new(int32), Template: corev1.PodTemplateSpec{Spec: spec}}}

	if _, err := k.BatchV1().Jobs("jobs").Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	starts := filepath.Join(data, "starts")
	for {
		if _, err := os.Stat(starts); err == nil {
			break
		}

		if ctx.Err() != nil {
			t.Fatal("the interrupted job's command never started")
		}

		time.Sleep(200 * time.Millisecond)
	}

	return func(t *testing.T) {
		t.Helper()

		for {
			j, err := k.BatchV1().Jobs("jobs").Get(ctx, "interrupted", metav1.GetOptions{})
			if err == nil && jobCondition(j) != "" {
				pods, err := k.CoreV1().Pods("jobs").List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=interrupted"})
				if err != nil || len(pods.Items) != 1 {
					t.Fatalf("the pods of the interrupted job: %v %v", pods, err)
				}

				if pod := pods.Items[0]; jobCondition(j) != batchv1.JobFailed || pod.Status.Reason != "NodeShutdown" {
					t.Errorf("the job running across a reboot: %v, pod %s %s %q", j.Status.Conditions, pod.Status.Phase, pod.Status.Reason, pod.Status.Message)
				}

				break
			}

			if ctx.Err() != nil {
				t.Fatal("the job running across a reboot neither complete nor failed")
			}

			time.Sleep(300 * time.Millisecond)
		}

		if b, err := os.ReadFile(starts); err != nil || string(b) != "started\n" {
			t.Errorf("the interrupted command's starts: %q %v", b, err)
		}
	}
}

// sleeping says whether a process runs `sleep SECONDS`.
func sleeping(seconds string) bool {
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline") //nolint:errcheck
	for _, f := range cmdlines {
		if b, err := os.ReadFile(f); err == nil && string(b) == "sleep\x00"+seconds+"\x00" {
			return true
		}
	}

	return false
}

func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()

	for !cond() {
		if ctx.Err() != nil {
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		}

		time.Sleep(200 * time.Millisecond)
	}
}

// testRenderNode: the i915 driver's render node is on the node (its
// sysfs entry read through the Talos API, as the rehearsal reads it) and
// a pod given /dev/dri by hostPath opens it read-write, as VA-API does.
func testRenderNode(t *testing.T, ctx context.Context, k kubernetes.Interface, c *client.Client) {
	t.Helper()

	if got, err := read(ctx, c, "/sys/class/drm/renderD128/dev"); err != nil || got != "226:128\n" {
		t.Fatalf("/sys/class/drm/renderD128/dev: %q %v", got, err)
	}

	// as `talosctl ls /dev/dri` lists it
	stream, err := c.LS(ctx, &machine.ListRequest{Root: "/dev/dri"})
	if err != nil {
		t.Fatal(err)
	}

	listed := map[string]os.FileMode{}

	for {
		fi, err := stream.Recv()
		if err != nil {
			break
		}

		listed[fi.GetRelativeName()] = os.FileMode(fi.GetMode())
	}

	if m, ok := listed["renderD128"]; !ok || m&os.ModeCharDevice == 0 || listed["card0"]&os.ModeCharDevice == 0 {
		t.Fatalf("talosctl ls /dev/dri: %v", listed)
	}

	dir := corev1.HostPathDirectory
	j, pod := runJob(t, ctx, k, "jobs", "render-node", corev1.PodSpec{
		Containers: []corev1.Container{{Name: "open", Image: "busybox",
			Command:      []string{"sh", "-c", "test -c /dev/dri/renderD128 && exec 3<>/dev/dri/renderD128 && echo opened"},
			VolumeMounts: []corev1.VolumeMount{{Name: "dri", MountPath: "/dev/dri"}}}},
		Volumes: []corev1.Volume{{Name: "dri", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/dev/dri", Type: &dir}}}},
	})
	if jobCondition(j) != batchv1.JobComplete {
		t.Fatalf("a pod opening /dev/dri/renderD128: job %v, pod %s %s", j.Status.Conditions, pod.Status.Phase, podMessage(pod))
	}
}
