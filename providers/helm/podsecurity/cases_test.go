package podsecurity

// The manifests shared by the offline table tests, the agreement test against
// the real API server and the benchmark. Each is one object whose pod
// template is the point of the case; all are valid objects the API server
// accepts as far as validation goes.

const hostPathDeployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: jellyfin
  namespace: media
spec:
  selector:
    matchLabels: {app: jellyfin}
  template:
    metadata:
      labels: {app: jellyfin}
    spec:
      containers:
      - name: jellyfin
        image: jellyfin/jellyfin:10.10
        volumeMounts:
        - {name: media, mountPath: /media}
      volumes:
      - name: media
        hostPath: {path: /var/mnt/data/media, type: Directory}
`

const driDeployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: frigate
spec:
  selector:
    matchLabels: {app: frigate}
  template:
    metadata:
      labels: {app: frigate}
    spec:
      containers:
      - name: frigate
        image: ghcr.io/blakeblackshear/frigate:stable
        volumeMounts:
        - {name: dri, mountPath: /dev/dri}
        - {name: config, mountPath: /config}
      volumes:
      - name: config
        emptyDir: {}
      - name: dri
        hostPath: {path: /dev/dri}
`

// The CI runner: a privileged container beside a clean one.
const privilegedRunner = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: runner
  namespace: ci
spec:
  selector:
    matchLabels: {app: runner}
  template:
    metadata:
      labels: {app: runner}
    spec:
      containers:
      - name: helper
        image: busybox:1.37
      - name: runner
        image: gitea/act_runner:0.2
        securityContext:
          privileged: true
`

const hostNetworkDaemonSet = `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: node-agent
spec:
  selector:
    matchLabels: {app: node-agent}
  template:
    metadata:
      labels: {app: node-agent}
    spec:
      hostNetwork: true
      containers:
      - name: agent
        image: busybox:1.37
`

// Clean for baseline; restricted wants runAsNonRoot, seccomp, no privilege
// escalation and dropped capabilities.
const cleanDeployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx:1.29
`

const restrictedDeployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: synapse
spec:
  selector:
    matchLabels: {app: synapse}
  template:
    metadata:
      labels: {app: synapse}
    spec:
      securityContext:
        runAsNonRoot: true
        runAsUser: 991
        seccompProfile: {type: RuntimeDefault}
      containers:
      - name: synapse
        image: matrixdotorg/synapse:v1.140.0
        securityContext:
          allowPrivilegeEscalation: false
          capabilities: {drop: [ALL]}
`

const hostPathCronJob = `apiVersion: batch/v1
kind: CronJob
metadata:
  name: zfs-scrub-report
spec:
  schedule: "0 3 * * 0"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers:
          - name: report
            image: busybox:1.37
            volumeMounts:
            - {name: data, mountPath: /data, readOnly: true}
          volumes:
          - name: data
            hostPath: {path: /var/mnt/data}
`

const hostPortPod = `apiVersion: v1
kind: Pod
metadata:
  name: dns
spec:
  initContainers:
  - name: init
    image: busybox:1.37
  containers:
  - name: dns
    image: coredns/coredns:1.12.0
    ports:
    - {containerPort: 53, hostPort: 53, protocol: UDP}
`

// Pod-level checks beside several containers failing the same check,
// one of them an init container.
const mixedStatefulSet = `apiVersion: apps/v1
kind: StatefulSet
metadata: {name: mixed}
spec:
  selector: {matchLabels: {app: mixed}}
  serviceName: mixed
  template:
    metadata: {labels: {app: mixed}}
    spec:
      hostPID: true
      hostIPC: true
      initContainers:
      - name: setup
        image: busybox
        securityContext: {privileged: true}
      containers:
      - name: a
        image: busybox
        securityContext: {privileged: true, capabilities: {add: [SYS_ADMIN]}}
      - name: b
        image: busybox
      - name: c
        image: busybox
        securityContext: {privileged: true}
      volumes:
      - {name: vx, hostPath: {path: /x}}
      - {name: vy, hostPath: {path: /y}}
`

// agreementCase is one pod template and what the preflight must say about
// it at each level: the expected findings' "Kind/Container: Check" keys.
type agreementCase struct {
	name     string
	manifest string
	want     map[string][]string // level -> findings as key()
}

var agreementCases = []agreementCase{
	{"hostpath-deployment", hostPathDeployment, map[string][]string{
		"privileged": nil,
		"baseline":   {"Deployment media/jellyfin: hostPath volumes"},
	}},
	{"dev-dri-hostpath", driDeployment, map[string][]string{
		"privileged": nil,
		"baseline":   {"Deployment apps/frigate: hostPath volumes"},
	}},
	{"privileged-runner", privilegedRunner, map[string][]string{
		"privileged": nil,
		"baseline":   {"Deployment ci/runner[runner]: privileged"},
	}},
	{"host-network", hostNetworkDaemonSet, map[string][]string{
		"privileged": nil,
		"baseline":   {"DaemonSet apps/node-agent: host namespaces"},
	}},
	{"clean", cleanDeployment, map[string][]string{
		"privileged": nil,
		"baseline":   nil,
		"restricted": {
			"Deployment apps/web[web]: allowPrivilegeEscalation != false",
			"Deployment apps/web[web]: unrestricted capabilities",
			"Deployment apps/web[web]: runAsNonRoot != true",
			"Deployment apps/web[web]: seccompProfile",
		},
	}},
	{"restricted-compliant", restrictedDeployment, map[string][]string{
		"baseline":   nil,
		"restricted": nil,
	}},
	{"cronjob-hostpath", hostPathCronJob, map[string][]string{
		"privileged": nil,
		"baseline":   {"CronJob apps/zfs-scrub-report: hostPath volumes"},
	}},
	{"pod-hostport", hostPortPod, map[string][]string{
		"privileged": nil,
		"baseline":   {"Pod apps/dns[dns]: hostPort"},
	}},
	{"mixed", mixedStatefulSet, map[string][]string{
		"privileged": nil,
		"baseline": {
			"StatefulSet apps/mixed[a]: non-default capabilities",
			"StatefulSet apps/mixed: host namespaces",
			"StatefulSet apps/mixed: hostPath volumes",
			"StatefulSet apps/mixed[setup]: privileged",
			"StatefulSet apps/mixed[a]: privileged",
			"StatefulSet apps/mixed[c]: privileged",
		},
	}},
}

// key is a compact form of a finding for table comparisons.
func key(f Finding) string {
	s := f.Kind + " " + f.Namespace + "/" + f.Name
	if f.Container != "" {
		s += "[" + f.Container + "]"
	}
	return s + ": " + f.Check
}

func keys(fs []Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, key(f))
	}
	return out
}
