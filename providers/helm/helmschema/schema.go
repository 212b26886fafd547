package helmschema

import (
	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// TypeName is the provider type under which cmd/migrate registers Factory.
const TypeName = "helm"

// Step type names.
const (
	Namespace = "kubernetes_namespace"
	Release   = "helm_release"
	Ready     = "kubernetes_ready"
	Manifest  = "kubernetes_manifest"
	Secret    = "kubernetes_secret"
	Job       = "kubernetes_job"
)

// Block is the provider block.
type Block struct {
	Kubeconfig         string  `cty:"kubeconfig" doc:"Path to the kubeconfig, relative to the runbook; read at first use, so an earlier talos_kubeconfig step may write it. Default $KUBECONFIG or ~/.kube/config."`
	Context            string  `cty:"context" doc:"The kubeconfig context; default its current context."`
	DefaultPodSecurity *string `cty:"default_pod_security" doc:"The PodSecurity level the cluster enforces on unlabelled namespaces: \"baseline\" (default, as Talos enforces), \"restricted\" or \"privileged\"."`
}

// NamespaceDescription describes the kubernetes_namespace step type.
const NamespaceDescription = "Ensures a Kubernetes namespace with labels, annotations and a PodSecurity level (the pod-security.kubernetes.io enforce, audit and warn labels). Rollback deletes it only if this step created it, else restores the previous labels."

// NamespaceAttrs are the attributes of a kubernetes_namespace step.
type NamespaceAttrs struct {
	Name        string            `cty:"name" doc:"The namespace; default the step name."`
	Labels      map[string]string `cty:"labels" doc:"Labels to set."`
	Annotations map[string]string `cty:"annotations" doc:"Annotations to set."`
	PodSecurity string            `cty:"pod_security" doc:"\"privileged\", \"baseline\" or \"restricted\": written as the enforce, audit and warn labels (version latest)."`
	Kubeconfig  string            `cty:"kubeconfig" doc:"Path to a kubeconfig for this step, relative to the runbook (such as talos_kubeconfig.admin.path); default the provider's."`
}

// NamespaceOutputs are the outputs of a kubernetes_namespace step.
type NamespaceOutputs struct {
	Name        string `cty:"name"`
	PodSecurity string `cty:"pod_security"`
}

// ReleaseDescription describes the helm_release step type.
const ReleaseDescription = "Installs or upgrades a Helm release (real release records, as helm list shows). The plan shows the manifest diff against the deployed release and fails when a pod template violates the PodSecurity level of its namespace; releases stuck in pending-* are recovered. Rollback returns to the previous revision, or uninstalls what this step installed."

// ReleaseAttrs are the attributes of a helm_release step.
type ReleaseAttrs struct {
	Name            string            `cty:"name" doc:"The release name; default the step name."`
	Chart           string            `cty:"chart" required:"true" doc:"The chart: a directory or packaged .tgz relative to the runbook, or a repository URL or oci:// reference."`
	Version         string            `cty:"version" doc:"The chart version required; a local chart of another version is refused."`
	Namespace       string            `cty:"namespace" doc:"The release namespace, \"default\" by default."`
	Values          cty.Value         `cty:"values" doc:"Values as an HCL object, merged over values_files."`
	ValuesFiles     []string          `cty:"values_files" doc:"Values files (YAML), relative to the runbook, merged in order; an age-encrypted one (named .age) is decrypted in memory and its values are secret."`
	SetSensitive    map[string]string `cty:"set_sensitive" sensitive:"true" doc:"Values by dot path (\"db.password\"), set last and redacted everywhere."`
	CreateNamespace bool              `cty:"create_namespace" doc:"Create the namespace when it does not exist."`
	Atomic          bool              `cty:"atomic" doc:"Roll back (or uninstall) when the install or upgrade fails; implies wait."`
	Wait            bool              `cty:"wait" doc:"Wait until the release's resources are ready."`
	Timeout         string            `cty:"timeout" doc:"How long wait may take, \"5m\" by default."`
	Kubeconfig      string            `cty:"kubeconfig" doc:"Path to a kubeconfig for this step, relative to the runbook (such as talos_kubeconfig.admin.path); default the provider's."`
}

// ReleaseOutputs are the outputs of a helm_release step.
type ReleaseOutputs struct {
	Name         string `cty:"name"`
	Namespace    string `cty:"namespace"`
	Revision     int    `cty:"revision"`
	Status       string `cty:"status"`
	ChartVersion string `cty:"chart_version"`
}

// ReadyDescription describes the kubernetes_ready step type.
const ReadyDescription = "Waits until the cluster's API server answers /readyz and every node (or the one named) has the condition Ready=True; fails after timeout with the last state seen. Changes nothing."

// ReadyAttrs are the attributes of a kubernetes_ready step (a check, or a
// step after the bootstrap).
type ReadyAttrs struct {
	Node       string `cty:"node" doc:"The node to wait for; default every node (at least one must be registered)."`
	Timeout    string `cty:"timeout" doc:"How long to wait, \"5m\" by default."`
	Kubeconfig string `cty:"kubeconfig" doc:"Path to a kubeconfig for this step, relative to the runbook (such as talos_kubeconfig.admin.path); default the provider's."`
}

// ManifestDescription describes the kubernetes_manifest step type.
const ManifestDescription = "Applies raw Kubernetes objects (YAML files or HCL objects) with server-side apply (field manager migrate). The plan shows the server-side dry-run diff per object, Secrets' data redacted, and fails when a pod template violates the PodSecurity level of its namespace. Rollback deletes the objects this step created and re-applies the ones it changed as they were (a changed Secret's data cannot be restored)."

// ManifestAttrs are the attributes of a kubernetes_manifest step.
type ManifestAttrs struct {
	Files       []string  `cty:"files" doc:"YAML files relative to the runbook, each of one or more documents."`
	Objects     cty.Value `cty:"objects" doc:"Objects as HCL: a list of { apiVersion, kind, metadata, ... }."`
	Namespace   string    `cty:"namespace" doc:"The namespace of namespaced objects that name none; default \"default\"."`
	WaitFor     string    `cty:"wait_for" doc:"A condition to wait for on every object that has a status (\"Available\", \"Bound\", \"Complete\", \"Ready\", \"Established\"): condition type=True, or status.phase."`
	WaitTimeout string    `cty:"wait_timeout" doc:"How long wait_for may take, \"5m\" by default."`
	Kubeconfig  string    `cty:"kubeconfig" doc:"Path to a kubeconfig for this step, relative to the runbook (such as talos_kubeconfig.admin.path); default the provider's."`
}

// ManifestOutputs are the outputs of a kubernetes_manifest step.
type ManifestOutputs struct {
	Objects []string `cty:"objects"`
}

// SecretDescription describes the kubernetes_secret step type.
const SecretDescription = "Applies a Kubernetes Secret from sensitive values and files (age-encrypted files are decrypted with MIGRATE_AGE_IDENTITY); its values never reach a plan, a log or the state. Rollback deletes a Secret this step created, else restores the previous one from the copy kept in the cluster as <name>.migrate-orig."

// SecretAttrs are the attributes of a kubernetes_secret step.
type SecretAttrs struct {
	Name       string            `cty:"name" required:"true" doc:"The Secret's name."`
	Namespace  string            `cty:"namespace" required:"true" doc:"The Secret's namespace."`
	Type       string            `cty:"type" doc:"The Secret's type, \"Opaque\" by default."`
	Data       map[string]string `cty:"data" sensitive:"true" doc:"Keys and their values, redacted everywhere."`
	Files      map[string]string `cty:"files" doc:"Keys and the files, relative to the runbook, holding their values; age-encrypted files are decrypted."`
	Kubeconfig string            `cty:"kubeconfig" doc:"Path to a kubeconfig for this step, relative to the runbook (such as talos_kubeconfig.admin.path); default the provider's."`
}

// SecretOutputs are the outputs of a kubernetes_secret step: never a value.
type SecretOutputs struct {
	Name      string   `cty:"name"`
	Namespace string   `cty:"namespace"`
	Keys      []string `cty:"keys"`
}

// JobDescription describes the kubernetes_job step type.
const JobDescription = "Runs a Kubernetes Job to completion, once: a Job of the same name and inputs that already completed is not run again, one still running is waited for. Streams its pods' logs; fails with the pod's reason and last log lines. Rollback deletes the Job object; what it did is not undone."

// JobAttrs are the attributes of a kubernetes_job step.
type JobAttrs struct {
	Name         string    `cty:"name" required:"true" doc:"The Job's name."`
	Namespace    string    `cty:"namespace" required:"true" doc:"The Job's namespace."`
	Job          cty.Value `cty:"job" doc:"The Job's spec as an HCL object with Kubernetes field names ({ template = { spec = { containers = [...] } } }); exactly one of job and file."`
	File         string    `cty:"file" doc:"A YAML file, relative to the runbook, holding a whole batch/v1 Job; the step's name and namespace win over its own. Exactly one of job and file."`
	Timeout      string    `cty:"timeout" doc:"How long to wait for the Job to complete, \"30m\" by default; a Job still running then is left running, and the next run waits for it."`
	BackoffLimit *int      `cty:"backoff_limit" doc:"How many failed pods the Job retries before it fails (spec.backoffLimit), 0 by default."`
	Kubeconfig   string    `cty:"kubeconfig" doc:"Path to a kubeconfig for this step, relative to the runbook (such as talos_kubeconfig.admin.path); default the provider's."`
}

// JobOutputs are the outputs of a kubernetes_job step.
type JobOutputs struct {
	Name      string `cty:"name"`
	Namespace string `cty:"namespace"`
	Succeeded bool   `cty:"succeeded"`
	Pod       string `cty:"pod"`
}

// Schema describes the provider block and the step types, derived from
// the structs above as the provider derives its own.
var Schema = phases.Schema{
	Provider: sdk.Block(Block{}),
	StepTypes: map[string]phases.StepType{
		Namespace: step[NamespaceAttrs](NamespaceDescription, NamespaceOutputs{}),
		Release:   step[ReleaseAttrs](ReleaseDescription, ReleaseOutputs{}),
		Ready:     waitsOnly(check(step[ReadyAttrs](ReadyDescription, nil))),
		Manifest:  step[ManifestAttrs](ManifestDescription, ManifestOutputs{}),
		Secret:    step[SecretAttrs](SecretDescription, SecretOutputs{}),
		Job:       step[JobAttrs](JobDescription, JobOutputs{}),
	},
}

// check marks a step type usable in a check block.
func check(st phases.StepType) phases.StepType {
	st.CanCheck = true
	return st
}

// waitsOnly marks a step type without an effect of its own: the first
// Ctrl-C ends it at once.
func waitsOnly(st phases.StepType) phases.StepType {
	st.WaitsOnly = true
	return st
}

func step[A any](description string, outputs any) phases.StepType {
	st, err := sdk.StepSchema[A](description, outputs)
	if err != nil {
		panic("helmschema: " + err.Error())
	}
	return st
}
