// Package helm is the provider for Kubernetes workloads: namespaces with
// their PodSecurity level, and Helm releases installed with the Helm SDK
// (helm.sh/helm/v3's action package), so the cluster holds real release
// records that helm list and helm history show.
//
// Step types:
//
//   - kubernetes_namespace: a namespace with labels, annotations and a
//     PodSecurity level written as the pod-security.kubernetes.io enforce,
//     audit and warn labels. Rollback deletes the namespace only if the step
//     created it, else restores the labels and annotations it changed.
//   - helm_release: install or upgrade of a chart (a local directory or
//     .tgz, a repository URL, or an oci:// reference: source.go, oci.go;
//     a remote chart is resolved to a digest that the plan shows and
//     records, and that apply and the digest attribute hold it to). The plan
//     renders the chart with a server-side dry run and shows, like
//     helm-diff, the objects added, changed (with a unified diff) and
//     removed against the deployed revision, Secrets' values redacted. A
//     release stuck in pending-install, pending-upgrade or pending-rollback
//     (a client that died mid-operation) is recovered explicitly: rolled
//     back to its last deployed revision, or uninstalled when none was,
//     before the upgrade. Apply waits, as helm --wait does and unless
//     wait = false (releasewait.go): Helm's ReadyChecker judges each
//     object until all are ready, while the pods of the revision are
//     watched; a container in CrashLoopBackOff, ImagePullBackOff,
//     ErrImagePull or CreateContainerConfigError (or restarted 3 times
//     and not Ready) fails the step at once, naming the pod, container,
//     restarts, last exit and the last 20 lines of its log (the run that
//     ended), scrubbed; a timeout names the objects not ready and the
//     pods' states. The revision is then marked failed. Helm's own wait
//     is not used: it cannot be cut short. Rollback returns to the
//     previous revision, or uninstalls what the step installed.
//   - kubernetes_ready (ready.go; a step or a check): waits until the API
//     server answers /readyz and every node (or the one named) reports
//     Ready=True, within timeout, and fails naming the last state seen.
//     The plan does not contact the cluster, whose kubeconfig an earlier
//     step of the run may write.
//   - kubernetes_manifest (manifest.go): raw objects from YAML files or
//     HCL objects, applied with server-side apply (field manager
//     migrate, never forced). The plan is each object's server-side dry
//     run diffed against the live object (diff.go, Secrets' values as
//     keyed fingerprints); pod templates go through the PodSecurity
//     preflight; wait_for waits for a condition or phase. Rollback
//     deletes the objects the step created (marked with the annotation
//     migrate/created-by) and applies the others again as they were; a
//     Secret's prior is never kept, so its data is not restored.
//   - kubernetes_secret (secret.go): a Secret from sensitive values and
//     files, age-encrypted ones decrypted (secret/agefile). Values are
//     taught to the scrubber and never leave the provider; a Secret that
//     existed is copied in the cluster to <name>.migrate-orig, which
//     rollback restores and then deletes.
//   - kubernetes_job (job.go): a Job run to completion once. The Job
//     carries the SHA-256 of its inputs (annotation migrate.dev/inputs-hash):
//     found complete with the same hash it is not run again, found running
//     it is waited for (a crash or a timeout leaves it running), found
//     failed or made with other inputs it is deleted (Foreground) and
//     created anew. Its pods' logs are followed into the step log; a
//     failure names the pod's reason, exit code and last log lines.
//     Rollback deletes the Job object; its effect stays.
//
// The PodSecurity preflight: Talos enforces "baseline" on every namespace
// not labelled otherwise, and a Deployment whose pods violate it is
// accepted by the API server while its pods are refused, at 2 a.m. Every
// pod template a release would create is therefore checked (package
// podsecurity) against the level its namespace will have: the level of its
// kubernetes_namespace step (remembered from Plan, Apply and Read of that
// step in the same provider), else its live label, else the provider's
// default_pod_security. A violation fails the plan, before anything is
// applied; Apply checks again. The plan lists the level of every namespace
// a release touches, so exceptions are visible in review. The preflight
// does not wait for the cluster: when a release's kubeconfig is not known
// or not written yet, the plan renders the chart client-side (as helm
// template does) and checks it all the same; only the live diff is
// deferred, marked as the SDK marks a deferred diff, so that run plans the
// release again against the cluster before applying it.
//
// The kubeconfig is read at first use, not when the provider is
// configured: an earlier talos_kubeconfig step of the same run may write
// it. Sensitive values (set_sensitive, any value marked sensitive, and the
// values of age-encrypted values_files, decrypted in memory with
// MIGRATE_AGE_IDENTITY) are scrubbed from plans, logs, diagnostics,
// revert data and state; the release
// record in the cluster holds them, as Helm stores every release's values.
//
// A cluster that does not answer is told once (reach.go): each step dials
// its API server first, and the first to find it down names the server,
// the kubeconfig and context it comes from and what to check; the others
// say in one line that it did not answer, pointing at that step.
// kubernetes_ready does not dial first: it waits for the server.
//
// The provider is built on providers/sdk, which decodes the attributes,
// gates, dispatches and scrubs every call. Each step type is one
// declaration (an sdk.StepType: name, description, attributes and outputs
// structs, rollback sentence, handlers) in its own file: namespace.go,
// release.go, ready.go, manifest.go, secret.go and job.go; provider.go
// lists them and holds the provider block.
//
// The engine (package engine) drives the provider through
// providers.Interface. It runs as the plugin program migrate-provider-helm
// (cmd/migrate-provider-helm, providers/plugin); its schema, derived from
// the declarations, is generated into helmschema, which cmd/migrate
// compiles in: after changing a step type, run go generate ./providers/helm
// (or make generate).
// Its tests run against a real kube-apiserver started by scripts/kube-up.sh,
// and OCI charts against a real registry each test starts (ocitest).
package helm

//go:generate go run ../internal/genschema helm helmschema/schema.json
