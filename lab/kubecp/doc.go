// Package kubecp is the Kubernetes control plane of a lab Talos node
// (lab/talosnode through lab/talosvm) after its bootstrap: real processes,
// no simulation. etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and kwok (the node's kubelet: it registers no container
// runtime, it turns the Node Ready and Job pods Running; Job pods'
// commands run in lab/sandbox, app pods through lab/apps, see below) are
// the binaries
// build-kube.sh (beside this file, embedded: the program carries it, and
// scripts/kube-up.sh runs it from the checkout) builds from the Go module
// proxy into a cache,
// once (Binaries).
//
// Start runs them on one loopback address, as on a Talos control plane
// node: etcd on Addr:2379 (peer 2380, plain HTTP: only loopback), the API
// server on Addr:6443 with a serving certificate for Addr signed by the
// cluster CA of the machine config (so the node's Kubeconfig RPC, which
// signs an admin certificate with that CA, works against it), the service
// account key of the machine config, and PodSecurity admission as Talos
// configures it (enforce baseline, audit and warn restricted, kube-system
// exempt; the same file as scripts/kube-up.sh), and Secrets encrypted at
// rest in etcd as Talos configures it (encryption.go: an
// EncryptionConfiguration, Dir/encryption.yaml, mode 0600, whose secretbox
// key is the machine config's cluster.secretboxEncryptionSecret, then
// aescbc with cluster.aescbcEncryptionSecret for older configs, then
// identity; a key that is not 32 bytes of base64 is refused by Start).
// The node's kubelet endpoint (logs.go) listens on Addr:10250: over HTTPS,
// a client authenticated by a certificate of the cluster CA (the API
// server's --kubelet-client-certificate, system:masters) and authorized
// by a SubjectAccessReview of nodes/proxy, as a kubelet in webhook mode;
// it serves GET /containerLogs/NS/POD/CONTAINER (pods/log: `kubectl
// logs`) from the output the pod runner keeps, with follow (streamed
// while the container runs, ended when it ends), tailLines, limitBytes,
// timestamps, sinceSeconds and sinceTime. The Node object is
// registered under the node's hostname, with the taints and labels of the
// machine config (Config.Taints, Config.Labels), its InternalIP Addr and
// kubelet port 10250 (kwok, run without --node-port, leaves both), the
// VM's size as its capacity (Config.CPU, Config.Memory) and as
// allocatable that minus Talos' kubelet reservation and hard eviction, so
// the real scheduler leaves a pod that asks for more Pending; and kwok
// keeps it Ready.
//
// EtcdSnapshot streams a snapshot of that etcd (its Maintenance API: the
// bbolt file, then its SHA-256), and RestoreEtcd makes a data directory
// from one with etcdutl's snapshot restore (built beside etcd), as a
// Talos bootstrap with recover_etcd does (etcd.go).
//
// Stop ends them in order (kwok, scheduler, controller manager, API
// server, etcd): TERM, then KILL after a grace period, each waited for, so
// no zombie stays. The processes are started with a parent-death signal:
// a test or lab killed hard does not leave them running.
//
// Job pods run for real when Config.HostPath is set (lab/talosvm sets it
// to the node's): kwok turns the node's pods Running but runs nothing, so
// the control plane itself (jobs.go) polls the Running pods of its node
// that a Job owns (every 300ms; not those annotated migrate.test/fail,
// which kwok-stages/pod-fail.yaml, embedded too, fails) and runs each container's
// command and args, init containers first, one after the other, each in
// lab/sandbox: chrooted in its own directory under Dir/pods/UID, with the
// host's /usr, the pod's volumes at their mountPaths and its environment
// as kubelet makes it (env.go): envFrom (a ConfigMap's or Secret's keys,
// with its prefix), then env, values with $(VAR) expanded (in command and
// args too), valueFrom a Secret's or ConfigMap's key or a field of the
// pod (metadata.name, namespace, uid, labels and annotations,
// spec.nodeName, serviceAccountName, status.podIP(s), hostIP(s)); a
// missing source or key not optional fails the container with kubelet's
// CreateContainerConfigError message (`secret "x" not found`, `couldn't
// find key k in Secret ns/x`).
// hostPath volumes are where the node path lives on the host (a virtiofs
// share, or under the node's root), type-checked as kubelet checks them
// (Directory must exist: "hostPath type check failed: PATH is not a
// directory"; DirectoryOrCreate and an empty type create it); a
// persistentVolumeClaim is its bound PV's hostPath; an emptyDir a new
// directory. Then it writes the pod's status (a merge patch of
// pods/NAME/status): Succeeded or Failed, each container terminated with
// its exit code, reason Completed or Error and the last KiB of its output
// as message (whatever its terminationMessagePolicy: a kubelet reads
// /dev/termination-log, and the output only on error with
// FallbackToLogsOnError); the Job controller completes or fails the Job.
// Each container's output is kept as a kubelet keeps it, in the CRI's
// format (Dir/logs/pods/NS_NAME_UID/CONTAINER/0.log: what the kubelet
// endpoint serves), and all of the pod's, with what the lab did, in
// Dir/logs/pods/NS_NAME.log. A pod is bounded by its
// activeDeadlineSeconds or 30 minutes (DeadlineExceeded, counted from
// when its first command starts); a pod deleted while it runs has its
// commands killed. Its result is
// kept in Dir/pods/UID before the status is written: a control plane
// started again writes it again and never runs a pod twice; a pod that was
// running when the control plane stopped fails (NodeShutdown), as on a
// node that rebooted. Without Config.HostPath, kwok's pod-complete stage
// marks Job pods Succeeded without running anything.
//
// The pods of Deployments, StatefulSets and DaemonSets (a ReplicaSet,
// StatefulSet or DaemonSet owner) run too when Config.HostPath is set
// (apppods.go): kwok's pod-ready stage is given one more requirement
// (not such a pod: podReadyForOthers), so they stay Pending until the
// control plane runs them as kubelet does. Each gets an address of its
// own, 127.(A+128).C.N for a node at 127.A.B.C (the node's address with
// hostNetwork), written as its podIP. Each container runs side by side
// with the others: its program chosen by its image (lab/apps: a stand-in
// of the app, in this process, given the pod's mounts, env, arguments and
// address; for busybox-like images, or an unknown image with a command,
// that command in lab/sandbox as for Jobs; an unknown image without one
// waits ErrImagePull, then ImagePullBackOff, with the reason). Its status
// is kubelet's: Running, started once its startupProbe passed, Ready only
// while its readinessProbe (httpGet, tcpSocket, exec for command
// containers; periodSeconds, thresholds, initialDelaySeconds, the first
// probe 200ms after the start) passes, the pod Ready when all are; a
// container that exits is started again at once, then after a back-off
// of 10s doubling to 5m (CrashLoopBackOff, MaxBackOff), Waiting
// CrashLoopBackOff meanwhile, restartCount counting, lastState.terminated
// with its exit code (restartPolicy OnFailure restarts only failures,
// Never none); a livenessProbe failing failureThreshold times kills it
// (137) and it restarts. Each run's output is its own log
// (CONTAINER/RESTARTS.log: `kubectl logs --previous` serves the run
// before; kubelet's two are kept). Volumes: hostPath, a claim's hostPath
// PV, emptyDir, and secret and configMap (their keys written as files in
// the pod's directory, removed when the pod ends; kubelet uses a tmpfs).
// A pod deleted has its containers killed. NodePort Services are served
// as kube-proxy does for them (nodeports.go): the control plane listens on
// Addr at each NodePort and forwards to a Ready pod of the selector on the
// node, at its targetPort (no ClusterIP routing). A stand-in resolves a
// Service's name (NAME, NAME.NS, NAME.NS.svc[.cluster.local]) to a
// Ready pod's address behind it (apps.Container.Resolve: the cluster DNS
// for stand-ins). Commands in lab/sandbox (Job pods, app pods of userland
// images) get an /etc/hosts written into their root at each start
// (hosts.go): kubelet's lines (localhost, the pod's name) and each
// Service with a Ready pod on the node as NAME.NS, NAME.NS.svc and
// NAME.NS.svc.cluster.local (NAME too in the pod's namespace) -> that
// pod's address; no ClusterIP, so a client connects to the pod's port
// (the Service's targetPort: a Service port that differs from it is not
// remapped), and a Service started after the container does not resolve
// until its next start. The ingress-nginx stand-in reads the cluster's
// Ingresses, their TLS Secrets and their Services' Ready pods through
// apps.Container.Routes (ingresses.go). An image whose
// lab/apps entry has a Userland (postgres:MAJOR) gets its root laid out
// by it, its env defaults (PATH with the PostgreSQL programs, PGDATA)
// and, without a command, the image's entrypoint and command, in app
// and Job pods alike.
//
// Differences from a real node: etcd without TLS (Secrets in it are
// encrypted, as on Talos; see above); one client certificate
// (system:masters) for the controller manager, scheduler and kwok; no
// kube-proxy (but NodePorts, above), CoreDNS (but /etc/hosts, above),
// flannel or kubelet. kwok
// runs no container: only Job and app pods run (above), and Job pods not
// as a kubelet runs them: no image (the
// command must exist in the host's /usr, /bin, /sbin), containers one
// after the other instead of side by side, no restart (restartPolicy
// OnFailure is Never), no service account token mounted, no network
// namespace (the host's network), no resource limits (resourceFieldRef
// is refused), no probes, no exec, attach or port-forward on the kubelet
// endpoint (only logs), no previous logs for Jobs (no restart), stdout and stderr
// through one pipe (their order kept, all tagged stdout); the API server
// prefers the node's InternalIP to reach the kubelet
// (--kubelet-preferred-address-types: the hostname resolves on a Talos
// node, not on the lab's host); securityContext ignored (the
// commands run as root of their user namespace, with every capability but
// CAP_SYS_ADMIN and CAP_SYS_CHROOT). A pod the lab cannot run fails
// saying so: volumes other than hostPath, a claim bound to a hostPath PV
// and emptyDir (FailedMount), a container without command
// (CreateContainerConfigError; kubelet would leave such a pod Pending and
// retry, the lab fails it). The commands run as root
// in a user namespace: as root on the host, uids 0-65535 are the host's
// (chown works); as another user only that user is mapped, so a chown to
// another uid fails (Synapse's restore chowns to 991).
package kubecp
