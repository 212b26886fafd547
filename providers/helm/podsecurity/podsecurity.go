package podsecurity

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Finding is one violated PodSecurity check in one pod template.
type Finding struct {
	// Kind, Namespace and Name identify the object that carries the pod
	// template (for a CronJob, the CronJob). Namespace is the object's
	// metadata.namespace, or the defaultNamespace given to Evaluate.
	Kind, Namespace, Name string
	// Container is the offending container (init, regular or ephemeral),
	// or "" when the check is about the pod as a whole (hostPath volumes,
	// host namespaces, sysctls, a pod-level securityContext).
	Container string
	// Check is the check's reason exactly as the API server prints it in
	// a rejection ("hostPath volumes", "privileged", "host namespaces",
	// "runAsNonRoot != true", ...).
	Check string
	// Detail is the check's detail: for a container finding it names that
	// container only (`container "runner" must not set
	// securityContext.privileged=true`); for a pod-level one it lists what
	// the pod does (`volumes "media", "dri"`). May be empty.
	Detail string
}

// String formats the finding as one line of Message:
// "Deployment media/jellyfin, container jellyfin: privileged (...)".
func (f Finding) String() string {
	var b strings.Builder
	b.WriteString(f.Kind)
	b.WriteByte(' ')
	if f.Namespace != "" {
		b.WriteString(f.Namespace)
		b.WriteByte('/')
	}
	b.WriteString(f.Name)
	if f.Container != "" {
		b.WriteString(", container ")
		b.WriteString(f.Container)
	}
	b.WriteString(": ")
	b.WriteString(f.Check)
	if f.Detail != "" {
		b.WriteString(" (")
		b.WriteString(f.Detail)
		b.WriteByte(')')
	}
	return b.String()
}

// Levels returns the Pod Security Standards levels, most permissive first.
func Levels() []string {
	return []string{string(psaapi.LevelPrivileged), string(psaapi.LevelBaseline), string(psaapi.LevelRestricted)}
}

func parseLevel(level string) (psaapi.Level, error) {
	if slices.Contains(Levels(), level) {
		return psaapi.Level(level), nil
	}
	return "", fmt.Errorf("podsecurity: unknown PodSecurity level %q (want one of %s)", level, strings.Join(Levels(), ", "))
}

// The evaluator is built once: it precomputes the checks of every policy
// version, which is too much work to repeat for every plan.
var evaluator = sync.OnceValues(func() (policy.Evaluator, error) {
	return policy.NewEvaluator(policy.DefaultChecks(), nil)
})

// Evaluate parses manifests (multi-document YAML as Helm renders it) and
// evaluates the pod template of every workload object at level (version
// "latest"). Findings come in document order, then in the order the API
// server reports checks, then container order. A clean manifest, and any
// manifest at level "privileged", gives no findings. An unknown level or a
// document that is not valid YAML, or not a valid object of its kind, is an
// error naming the document (1-based, counting non-empty documents), its kind
// if known and Helm's "# Source:" template if present.
func Evaluate(manifests []byte, level string, defaultNamespace string) ([]Finding, error) {
	lvl, err := parseLevel(level)
	if err != nil {
		return nil, err
	}
	ev, err := evaluator()
	if err != nil {
		return nil, fmt.Errorf("podsecurity: building the policy evaluator: %w", err)
	}
	lv := psaapi.LevelVersion{Level: lvl, Version: psaapi.LatestVersion()}

	templates, err := PodTemplates(manifests, defaultNamespace)
	if err != nil {
		return nil, err
	}
	var findings []Finding
	for _, t := range templates {
		for _, f := range evaluatePod(ev, lv, t.Meta, t.Spec) {
			f.Kind, f.Namespace, f.Name = t.Kind, t.Namespace, t.Name
			findings = append(findings, f)
		}
	}
	return findings, nil
}

// PodTemplate is the pod template of one workload object of a manifest.
type PodTemplate struct {
	// Kind, Namespace and Name identify the object that carries it, as in
	// Finding.
	Kind, Namespace, Name string
	Meta                  *metav1.ObjectMeta
	Spec                  *corev1.PodSpec
}

// PodTemplates parses manifests as Evaluate does and returns the pod
// template of every workload object, in document order, for other checks
// of pod templates (package scheduling). Errors are Evaluate's.
func PodTemplates(manifests []byte, defaultNamespace string) ([]PodTemplate, error) {
	var out []PodTemplate
	n := 0
	for _, d := range splitDocuments(manifests) {
		doc := d.text
		if isBlank(doc) {
			continue
		}
		n++
		raw, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, docError(n, d.line, doc, guessKind(doc), err)
		}
		raw = bytes.TrimSpace(raw)
		if bytes.Equal(raw, []byte("null")) {
			continue
		}
		objs, err := workloads(raw, "", "")
		if err != nil {
			return nil, docError(n, d.line, doc, "", err)
		}
		for _, o := range objs {
			ns := o.namespace
			if ns == "" {
				ns = defaultNamespace
			}
			out = append(out, PodTemplate{Kind: o.kind, Namespace: ns, Name: o.name, Meta: o.podMeta, Spec: o.podSpec})
		}
	}
	return out, nil
}

// evaluatePod runs the checks and attributes each failed check either to
// the pod as a whole or to the containers that fail it on their own. The
// attribution re-evaluates the pod without containers (a check that still
// fails is pod-level) and with each container alone; the evaluator returns
// one result per check in a fixed order, so results are compared by index.
func evaluatePod(ev policy.Evaluator, lv psaapi.LevelVersion, meta *metav1.ObjectMeta, spec *corev1.PodSpec) []Finding {
	full := ev.EvaluatePod(lv, meta, spec)
	if policy.AggregateCheckResults(full).Allowed {
		return nil
	}
	bare := *spec
	bare.InitContainers, bare.Containers, bare.EphemeralContainers = nil, nil, nil
	podLevel := ev.EvaluatePod(lv, meta, &bare)

	type alone struct {
		name    string
		results []policy.CheckResult
	}
	var perContainer []alone // evaluated lazily: most failures are pod-level or none
	containerResults := func() []alone {
		if perContainer != nil {
			return perContainer
		}
		perContainer = []alone{}
		for i := range spec.InitContainers {
			one := bare
			one.InitContainers = spec.InitContainers[i : i+1]
			perContainer = append(perContainer, alone{spec.InitContainers[i].Name, ev.EvaluatePod(lv, meta, &one)})
		}
		for i := range spec.Containers {
			one := bare
			one.Containers = spec.Containers[i : i+1]
			perContainer = append(perContainer, alone{spec.Containers[i].Name, ev.EvaluatePod(lv, meta, &one)})
		}
		for i := range spec.EphemeralContainers {
			one := bare
			one.EphemeralContainers = spec.EphemeralContainers[i : i+1]
			perContainer = append(perContainer, alone{spec.EphemeralContainers[i].Name, ev.EvaluatePod(lv, meta, &one)})
		}
		return perContainer
	}

	var out []Finding
	for i, r := range full {
		if r.Allowed {
			continue
		}
		reason := r.ForbiddenReason
		if reason == "" {
			reason = policy.UnknownForbiddenReason
		}
		if i < len(podLevel) && podLevel[i].Allowed {
			var attributed []Finding
			for _, c := range containerResults() {
				if i < len(c.results) && !c.results[i].Allowed {
					attributed = append(attributed, Finding{Container: c.name, Check: reason, Detail: c.results[i].ForbiddenDetail})
				}
			}
			if len(attributed) > 0 {
				out = append(out, attributed...)
				continue
			}
		}
		// Pod-level, or only the combination of containers fails: report the
		// check once for the pod, with the full detail.
		detail := r.ForbiddenDetail
		if reason == "hostPath volumes" {
			detail += hostPaths(spec) // which host directories and devices: the review's question
		}
		out = append(out, Finding{Check: reason, Detail: detail})
	}
	return out
}

// hostPaths lists the host paths of a pod's hostPath volumes, in volume
// order: "; host paths /var/mnt/data/media, /dev/dri".
func hostPaths(spec *corev1.PodSpec) string {
	var paths []string
	for _, v := range spec.Volumes {
		if v.HostPath != nil && !slices.Contains(paths, v.HostPath.Path) {
			paths = append(paths, v.HostPath.Path)
		}
	}
	switch len(paths) {
	case 0:
		return ""
	case 1:
		return "; host path " + paths[0]
	}
	return "; host paths " + strings.Join(paths, ", ")
}

// workload is one pod template found in a document.
type workload struct {
	kind, namespace, name string
	podMeta               *metav1.ObjectMeta
	podSpec               *corev1.PodSpec
}

// kinds maps each workload kind to the API groups it is served in and the
// extraction of its pod template. A kind of the same name in another group
// (a CRD) is not a workload of Kubernetes's and is ignored.
var kinds = map[string]struct {
	groups  []string
	extract func([]byte) (obj metav1.ObjectMeta, podMeta *metav1.ObjectMeta, spec *corev1.PodSpec, err error)
}{
	"Deployment": {[]string{"apps", "extensions"}, func(b []byte) (metav1.ObjectMeta, *metav1.ObjectMeta, *corev1.PodSpec, error) {
		var o appsv1.Deployment
		err := kjson.UnmarshalCaseSensitivePreserveInts(b, &o)
		return o.ObjectMeta, &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec, err
	}},
	"StatefulSet": {[]string{"apps"}, func(b []byte) (metav1.ObjectMeta, *metav1.ObjectMeta, *corev1.PodSpec, error) {
		var o appsv1.StatefulSet
		err := kjson.UnmarshalCaseSensitivePreserveInts(b, &o)
		return o.ObjectMeta, &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec, err
	}},
	"DaemonSet": {[]string{"apps", "extensions"}, func(b []byte) (metav1.ObjectMeta, *metav1.ObjectMeta, *corev1.PodSpec, error) {
		var o appsv1.DaemonSet
		err := kjson.UnmarshalCaseSensitivePreserveInts(b, &o)
		return o.ObjectMeta, &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec, err
	}},
	"ReplicaSet": {[]string{"apps", "extensions"}, func(b []byte) (metav1.ObjectMeta, *metav1.ObjectMeta, *corev1.PodSpec, error) {
		var o appsv1.ReplicaSet
		err := kjson.UnmarshalCaseSensitivePreserveInts(b, &o)
		return o.ObjectMeta, &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec, err
	}},
	"Job": {[]string{"batch"}, func(b []byte) (metav1.ObjectMeta, *metav1.ObjectMeta, *corev1.PodSpec, error) {
		var o batchv1.Job
		err := kjson.UnmarshalCaseSensitivePreserveInts(b, &o)
		return o.ObjectMeta, &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec, err
	}},
	"CronJob": {[]string{"batch"}, func(b []byte) (metav1.ObjectMeta, *metav1.ObjectMeta, *corev1.PodSpec, error) {
		var o batchv1.CronJob
		err := kjson.UnmarshalCaseSensitivePreserveInts(b, &o)
		t := &o.Spec.JobTemplate.Spec.Template
		return o.ObjectMeta, &t.ObjectMeta, &t.Spec, err
	}},
	"Pod": {[]string{""}, func(b []byte) (metav1.ObjectMeta, *metav1.ObjectMeta, *corev1.PodSpec, error) {
		var o corev1.Pod
		err := kjson.UnmarshalCaseSensitivePreserveInts(b, &o)
		return o.ObjectMeta, &o.ObjectMeta, &o.Spec, err
	}},
	"ReplicationController": {[]string{""}, func(b []byte) (metav1.ObjectMeta, *metav1.ObjectMeta, *corev1.PodSpec, error) {
		var o corev1.ReplicationController
		err := kjson.UnmarshalCaseSensitivePreserveInts(b, &o)
		if o.Spec.Template == nil {
			return o.ObjectMeta, &metav1.ObjectMeta{}, &corev1.PodSpec{}, err
		}
		return o.ObjectMeta, &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec, err
	}},
}

// header is what every object is probed for before it is decoded as its kind.
type header struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// workloads returns the pod templates in one JSON object; a List (v1 List or
// a typed list such as DeploymentList, whose items may omit kind and
// apiVersion) is unwrapped.
func workloads(raw []byte, inheritAPIVersion, inheritKind string) ([]workload, error) {
	if len(raw) == 0 || raw[0] != '{' {
		return nil, fmt.Errorf("not a Kubernetes object (a YAML mapping with apiVersion and kind)")
	}
	var h header
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &h); err != nil {
		return nil, err
	}
	if h.Kind == "" {
		h.Kind = inheritKind
	}
	if h.APIVersion == "" {
		h.APIVersion = inheritAPIVersion
	}
	_, typedList := kinds[strings.TrimSuffix(h.Kind, "List")]
	if inheritKind == "" && (h.Kind == "List" || strings.HasSuffix(h.Kind, "List") && typedList) {
		itemKind := strings.TrimSuffix(h.Kind, "List")
		itemAPIVersion := h.APIVersion
		if h.Kind == "List" {
			itemKind, itemAPIVersion = "", ""
		}
		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &list); err != nil {
			return nil, fmt.Errorf("%s: %w", h.Kind, err)
		}
		var out []workload
		for i, item := range list.Items {
			ws, err := workloads(bytes.TrimSpace(item), itemAPIVersion, itemKind)
			if err != nil {
				return nil, fmt.Errorf("%s item %d: %w", h.Kind, i+1, err)
			}
			out = append(out, ws...)
		}
		return out, nil
	}
	k, ok := kinds[h.Kind]
	if !ok {
		return nil, nil
	}
	if h.APIVersion != "" {
		group := ""
		if i := strings.LastIndexByte(h.APIVersion, '/'); i >= 0 {
			group = h.APIVersion[:i]
		}
		if !slices.Contains(k.groups, group) {
			return nil, nil
		}
	}
	obj, podMeta, spec, err := k.extract(raw)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", h.Kind, objName(obj), err)
	}
	return []workload{{kind: h.Kind, namespace: obj.Namespace, name: obj.Name, podMeta: podMeta, podSpec: spec}}, nil
}

func objName(m metav1.ObjectMeta) string {
	switch {
	case m.Name == "":
		return "(unnamed)"
	case m.Namespace == "":
		return m.Name
	default:
		return m.Namespace + "/" + m.Name
	}
}

// document is one document of a YAML stream and the stream's line (1-based)
// it starts on.
type document struct {
	text []byte
	line int
}

// splitDocuments splits a YAML stream on "---" separator lines (which may
// carry a trailing comment). Empty documents are kept, so callers decide.
func splitDocuments(b []byte) []document {
	var docs []document
	start, startLine, line := 0, 1, 1
	for pos := 0; pos <= len(b); line++ {
		end := bytes.IndexByte(b[pos:], '\n')
		if end < 0 {
			end = len(b)
		} else {
			end += pos
		}
		text := bytes.TrimRight(b[pos:end], "\r")
		if bytes.HasPrefix(text, []byte("---")) {
			rest := bytes.TrimSpace(text[3:])
			if len(rest) == 0 || rest[0] == '#' {
				docs = append(docs, document{b[start:pos], startLine})
				start, startLine = end+1, line+1
			}
		}
		pos = end + 1
	}
	if start < len(b) {
		docs = append(docs, document{b[start:], startLine})
	}
	return docs
}

// isBlank reports whether a document holds only whitespace and comments.
func isBlank(doc []byte) bool {
	for line := range bytes.SplitSeq(doc, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] != '#' {
			return false
		}
	}
	return true
}

var (
	kindLine   = regexp.MustCompile(`(?m)^kind:[ \t]*["']?([A-Za-z0-9]+)`)
	sourceLine = regexp.MustCompile(`(?m)^# Source: (.+?)\s*$`)
)

// guessKind finds a top-level kind in a document that does not parse.
func guessKind(doc []byte) string {
	if m := kindLine.FindSubmatch(doc); m != nil {
		return string(m[1])
	}
	return ""
}

// docError names the failing document: its number, its kind if known, the
// Helm template it came from and the line of the stream it starts on (YAML
// errors count lines within the document).
func docError(n, line int, doc []byte, kind string, err error) error {
	var where []string
	if kind != "" {
		where = append(where, kind)
	}
	if m := sourceLine.FindSubmatch(doc); m != nil {
		where = append(where, "from "+string(m[1]))
	}
	where = append(where, fmt.Sprintf("starting at line %d", line))
	return fmt.Errorf("podsecurity: document %d (%s): %w", n, strings.Join(where, ", "), err)
}

// Message explains findings as a plan diagnostic: release would create pods
// that namespace (enforcing level) rejects, one line per finding, then the
// fix and why this is checked at plan time. It returns "" for no findings.
func Message(release, namespace, level string, f []Finding) string {
	if len(f) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "helm release %q would create pods that namespace %q (PodSecurity %q) rejects:\n", release, namespace, level)
	var namespaces []string
	for _, x := range f {
		fmt.Fprintf(&b, "  - %s\n", x)
		ns := x.Namespace
		if ns == "" {
			ns = namespace
		}
		if !slices.Contains(namespaces, ns) {
			namespaces = append(namespaces, ns)
		}
	}
	b.WriteString("Fix: if these pods really need host access (hostPath for the data, /dev/dri for the GPU, a privileged\n")
	b.WriteString("CI runner), label the namespace privileged with a kubernetes_namespace step, so the exception is\n")
	b.WriteString("visible in git:\n")
	for _, ns := range namespaces {
		fmt.Fprintf(&b, "    step \"kubernetes_namespace\" %q {\n      pod_security = \"privileged\"\n    }\n", ns)
	}
	fmt.Fprintf(&b, "and make the helm_release depend on it; otherwise change the chart's values until its pods meet %q.\n", level)
	b.WriteString("Why at plan time: the API server checks PodSecurity only when a Pod is created. A Deployment (or\n")
	b.WriteString("StatefulSet, DaemonSet, Job, CronJob) with this template is ACCEPTED with only a warning; its\n")
	b.WriteString("ReplicaSet (or controller) then silently fails to create any pod, and the release looks installed.")
	return b.String()
}
