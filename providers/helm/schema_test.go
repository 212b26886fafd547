package helm_test

import (
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/helm"
	"github.com/homelab-migrate/migrate/providers/helm/helmschema"
	"github.com/homelab-migrate/migrate/providers/plugin"
	"github.com/homelab-migrate/migrate/providers/providertest"
)

// TestSchemaUnchanged: the schema derived from the attribute structs is
// the one written by hand before the SDK, word for word, both as the
// provider serves it and as migrate compiles it in (helmschema); the
// plugin handshake needs the two equal.
func TestSchemaUnchanged(t *testing.T) {
	for what, got := range map[string]phases.Schema{"the provider": helm.New().Schema(), "helmschema": helmschema.Schema} {
		providertest.SameAttributes(t, what+" provider block", got.Provider.Attributes, schema.Provider.Attributes)
		if len(got.StepTypes) != len(schema.StepTypes) {
			t.Fatalf("%s: %d step types, want %d", what, len(got.StepTypes), len(schema.StepTypes))
		}
		for name, want := range schema.StepTypes {
			providertest.SameStepType(t, what+" "+name, got.StepTypes[name], want)
		}
	}
	if a, b := plugin.SchemaDigest(helm.New().Schema()), plugin.SchemaDigest(helmschema.Schema); a != b {
		t.Errorf("the provider's schema digest %s differs from helmschema's %s", a, b)
	}
}

// kubeconfigAttr is the per-step kubeconfig attribute both step types share.
var kubeconfigAttr = phases.Attribute{Type: cty.String, Description: "Path to a kubeconfig for this step, relative to the runbook (such as talos_kubeconfig.admin.path); default the provider's."}

// schema is the helm provider's schema as written by hand before the SDK.
var schema = phases.Schema{
	Provider: phases.Block{Attributes: map[string]phases.Attribute{
		"kubeconfig":           {Type: cty.String, Description: "Path to the kubeconfig, relative to the runbook; read at first use, so an earlier talos_kubeconfig step may write it. Default $KUBECONFIG or ~/.kube/config."},
		"context":              {Type: cty.String, Description: "The kubeconfig context; default its current context."},
		"default_pod_security": {Type: cty.String, Description: "The PodSecurity level the cluster enforces on unlabelled namespaces: \"baseline\" (default, as Talos enforces), \"restricted\" or \"privileged\"."},
	}},
	StepTypes: map[string]phases.StepType{
		helm.Namespace: {
			Description: "Ensures a Kubernetes namespace with labels, annotations and a PodSecurity level (the pod-security.kubernetes.io enforce, audit and warn labels). Rollback deletes it only if this step created it, else restores the previous labels.",
			Attributes: map[string]phases.Attribute{
				"name":         {Type: cty.String, Description: "The namespace; default the step name."},
				"labels":       {Type: cty.Map(cty.String), Description: "Labels to set."},
				"annotations":  {Type: cty.Map(cty.String), Description: "Annotations to set."},
				"pod_security": {Type: cty.String, Description: "\"privileged\", \"baseline\" or \"restricted\": written as the enforce, audit and warn labels (version latest)."},
				"kubeconfig":   kubeconfigAttr,
			},
			Outputs: map[string]cty.Type{"name": cty.String, "pod_security": cty.String},
		},
		helm.Release: {
			Description: "Installs or upgrades a Helm release (real release records, as helm list shows). The plan shows the manifest diff against the deployed release and fails when a pod template violates the PodSecurity level of its namespace; releases stuck in pending-* are recovered. Rollback returns to the previous revision, or uninstalls what this step installed.",
			Attributes: map[string]phases.Attribute{
				"name":             {Type: cty.String, Description: "The release name; default the step name."},
				"chart":            {Type: cty.String, Required: true, Description: "The chart: a directory or packaged .tgz relative to the runbook, or a repository URL or oci:// reference."},
				"version":          {Type: cty.String, Description: "The chart version required; a local chart of another version is refused."},
				"namespace":        {Type: cty.String, Description: "The release namespace, \"default\" by default."},
				"values":           {Type: cty.DynamicPseudoType, Description: "Values as an HCL object, merged over values_files."},
				"values_files":     {Type: cty.List(cty.String), Description: "Values files (YAML), relative to the runbook, merged in order; an age-encrypted one (named .age) is decrypted in memory and its values are secret."},
				"set_sensitive":    {Type: cty.Map(cty.String), Sensitive: true, Description: "Values by dot path (\"db.password\"), set last and redacted everywhere."},
				"create_namespace": {Type: cty.Bool, Description: "Create the namespace when it does not exist."},
				"atomic":           {Type: cty.Bool, Description: "Roll back (or uninstall) when the install or upgrade fails; implies wait."},
				"wait":             {Type: cty.Bool, Description: "Wait until the release's resources are ready."},
				"timeout":          {Type: cty.String, Description: "How long wait may take, \"5m\" by default."},
				"kubeconfig":       kubeconfigAttr,
			},
			Outputs: map[string]cty.Type{"name": cty.String, "namespace": cty.String, "revision": cty.Number, "status": cty.String, "chart_version": cty.String},
		},
		helm.Ready: {
			Description: "Waits until the cluster's API server answers /readyz and every node (or the one named) has the condition Ready=True; fails after timeout with the last state seen. Changes nothing.",
			Attributes: map[string]phases.Attribute{
				"node":       {Type: cty.String, Description: "The node to wait for; default every node (at least one must be registered)."},
				"timeout":    {Type: cty.String, Description: "How long to wait, \"5m\" by default."},
				"kubeconfig": kubeconfigAttr,
			},
			CanCheck: true,
		},
		helm.Manifest: {
			Description: "Applies raw Kubernetes objects (YAML files or HCL objects) with server-side apply (field manager migrate). The plan shows the server-side dry-run diff per object, Secrets' data redacted, and fails when a pod template violates the PodSecurity level of its namespace. Rollback deletes the objects this step created and re-applies the ones it changed as they were (a changed Secret's data cannot be restored).",
			Attributes: map[string]phases.Attribute{
				"files":        {Type: cty.List(cty.String), Description: "YAML files relative to the runbook, each of one or more documents."},
				"objects":      {Type: cty.DynamicPseudoType, Description: "Objects as HCL: a list of { apiVersion, kind, metadata, ... }."},
				"namespace":    {Type: cty.String, Description: "The namespace of namespaced objects that name none; default \"default\"."},
				"wait_for":     {Type: cty.String, Description: "A condition to wait for on every object that has a status (\"Available\", \"Bound\", \"Complete\", \"Ready\", \"Established\"): condition type=True, or status.phase."},
				"wait_timeout": {Type: cty.String, Description: "How long wait_for may take, \"5m\" by default."},
				"kubeconfig":   kubeconfigAttr,
			},
			Outputs: map[string]cty.Type{"objects": cty.List(cty.String)},
		},
		helm.Secret: {
			Description: "Applies a Kubernetes Secret from sensitive values and files (age-encrypted files are decrypted with MIGRATE_AGE_IDENTITY); its values never reach a plan, a log or the state. Rollback deletes a Secret this step created, else restores the previous one from the copy kept in the cluster as <name>.migrate-orig.",
			Attributes: map[string]phases.Attribute{
				"name":       {Type: cty.String, Required: true, Description: "The Secret's name."},
				"namespace":  {Type: cty.String, Required: true, Description: "The Secret's namespace."},
				"type":       {Type: cty.String, Description: "The Secret's type, \"Opaque\" by default."},
				"data":       {Type: cty.Map(cty.String), Sensitive: true, Description: "Keys and their values, redacted everywhere."},
				"files":      {Type: cty.Map(cty.String), Description: "Keys and the files, relative to the runbook, holding their values; age-encrypted files are decrypted."},
				"kubeconfig": kubeconfigAttr,
			},
			Outputs: map[string]cty.Type{"name": cty.String, "namespace": cty.String, "keys": cty.List(cty.String)},
		},
		helm.Job: {
			Description: "Runs a Kubernetes Job to completion, once: a Job of the same name and inputs that already completed is not run again, one still running is waited for. Streams its pods' logs; fails with the pod's reason and last log lines. Rollback deletes the Job object; what it did is not undone.",
			Attributes: map[string]phases.Attribute{
				"name":          {Type: cty.String, Required: true, Description: "The Job's name."},
				"namespace":     {Type: cty.String, Required: true, Description: "The Job's namespace."},
				"job":           {Type: cty.DynamicPseudoType, Description: "The Job's spec as an HCL object with Kubernetes field names ({ template = { spec = { containers = [...] } } }); exactly one of job and file."},
				"file":          {Type: cty.String, Description: "A YAML file, relative to the runbook, holding a whole batch/v1 Job; the step's name and namespace win over its own. Exactly one of job and file."},
				"timeout":       {Type: cty.String, Description: "How long to wait for the Job to complete, \"30m\" by default; a Job still running then is left running, and the next run waits for it."},
				"backoff_limit": {Type: cty.Number, Description: "How many failed pods the Job retries before it fails (spec.backoffLimit), 0 by default."},
				"kubeconfig":    kubeconfigAttr,
			},
			Outputs: map[string]cty.Type{"name": cty.String, "namespace": cty.String, "succeeded": cty.Bool, "pod": cty.String},
		},
	},
}
