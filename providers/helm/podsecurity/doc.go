// Package podsecurity is the Helm provider's PodSecurity preflight: it
// evaluates every pod template a release would create against a Pod Security
// Standards level, offline, at plan time.
//
// Talos enforces PodSecurity "baseline" cluster-wide by default. A pod that
// mounts the ZFS data through a hostPath, opens /dev/dri for the iGPU or runs
// privileged (the CI runner) is only admitted in a namespace deliberately
// labelled privileged, so the exceptions are visible in git. The API server
// checks this only for Pods: a Deployment (StatefulSet, DaemonSet, Job,
// CronJob, ReplicaSet) whose template violates the namespace's level is
// ACCEPTED with a warning, and its controller then silently fails to create
// pods. This package catches that before anything is applied.
//
// Evaluate parses the multi-document YAML that Helm renders, takes the pod
// template of every workload kind (Deployment, StatefulSet, DaemonSet,
// ReplicaSet, Job, CronJob, Pod, ReplicationController; List kinds are
// unwrapped; every other kind is ignored) and runs the checks of
// k8s.io/pod-security-admission/policy at the given level and version
// "latest" — the same code the API server's admission plugin runs, at the
// same release as the cluster (v0.37 / Kubernetes 1.37). Each violated check
// becomes one Finding per offending container, or one pod-level Finding
// (Container "") for checks about the pod as a whole, such as hostPath
// volumes, host namespaces or sysctls. Finding.Check is the check's reason
// exactly as the API server prints it ("hostPath volumes", "privileged",
// "host namespaces", "runAsNonRoot != true", ...), so a server rejection
// message contains it verbatim.
//
// Message turns findings into the plan diagnostic: which release, which
// objects and containers, which checks, and the fix (a kubernetes_namespace
// step with pod_security = "privileged").
package podsecurity
