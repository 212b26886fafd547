package torture

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/lab/home"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
)

// The invariants, by the names the summary counts them under.
const (
	invCompletes  = "every phase and the rollback complete"
	invReadable   = "the state is readable (status --json, state show --json)"
	invOnce       = "once-only effects happened once (lab events)"
	invPulledOnce = "the Synapse export made once (data volume)"
	invThrowaway  = "no throwaway VM left running"
	invEtcd       = "no cluster without etcd"
	invRefusal    = "a refused command changed nothing"
	invNoSurvivor = "no provider program outlives a killed migrate"
	invOldVMs     = "the rollback brings the old VMs back"
	invWindow     = "a service's window is whole across kills"
)

var invariantOrder = []string{invCompletes, invReadable, invOnce, invPulledOnce, invThrowaway, invEtcd, invRefusal, invNoSurvivor, invOldVMs, invWindow}

// tally counts the checks of each invariant and their failures.
type tally struct {
	checked, failed map[string]int
	said            map[string]bool // failures reported, without where they were seen
}

func newTally() *tally {
	return &tally{checked: map[string]int{}, failed: map[string]int{}, said: map[string]bool{}}
}

// attemptPrefix is how a message says where it was seen.
var attemptPrefix = regexp.MustCompile(`^round \d+ pass \d+ \S+ attempt \d+: `)

// expect counts a check of invariant inv; when !ok it fails the test
// with the message (the test goes on: later checks say more). The same
// failure seen again after a later attempt is counted, not repeated.
func (w *world) expect(t *testing.T, inv string, ok bool, format string, args ...any) bool {
	t.Helper()
	w.tally.checked[inv]++
	if !ok {
		w.tally.failed[inv]++
		msg := fmt.Sprintf(format, args...)
		if key := inv + attemptPrefix.ReplaceAllString(msg, ""); !w.tally.said[key] {
			w.tally.said[key] = true
			t.Errorf("INVARIANT %q FAILED: %s", inv, msg)
		}
	}
	return ok
}

// effect is a once-only effect of a pass, counted from the lab's events.
type effect struct {
	what  string // as the messages say it
	phase string // complete, the effect must have happened ("rollback": the rollback)
	step  string // the step that makes it
	// redoable: the step cannot observe its effect (no creates), so a kill
	// that found it running (reverting, for a rollback effect) allows
	// one more
	redoable bool
	match    func(home.Event) bool
}

var effects = []effect{
	{"the rehearsal VM's etcd bootstrapped", "rehearsal", "group.rehearsal.talos_bootstrap.etcd", false, bootstrapOf("rehearsal")},
	{"the rehearsal's Job data-share-write run", "rehearsal", "kubernetes_job.rehearsal_write", false, podOf("rehearsal", "media", "data-share-write")},
	{"the node's etcd bootstrapped", "platform", "group.node.talos_bootstrap.etcd", false, bootstrapOf("talos")},
	{"Jellyfin stopped in the old VM services", "data-apps", "group.jellyfin.incus_exec.stop", true, execOf("services", "systemctl stop jellyfin")},
	{"Frigate stopped in the old VM services", "data-apps", "group.frigate.incus_exec.stop", true, execOf("services", "docker compose -p frigate stop")},
	{"Jellyfin's export run in the old VM services", "data-apps", "group.jellyfin.incus_exec.export", false, execOf("services", "touch /root/.jellyfin-exported")},
	{"Frigate's export run in the old VM services", "data-apps", "group.frigate.incus_exec.export", false, execOf("services", "touch /root/.frigate-exported")},
	{"the Job data-share-probe run", "data-apps", "kubernetes_job.data_probe", false, podOf("talos", "media", "data-share-probe")},
	{"Synapse stopped in the old VM matrix", "ingress-matrix", "incus_exec.stop_synapse", true, execOf("matrix", "systemctl stop matrix-synapse")},
	{"Synapse's export run in the old VM matrix", "ingress-matrix", "incus_exec.export_synapse", false, execOf("matrix", "touch /root/.synapse-exported")},
	{"Synapse's configuration rewritten in the old VM matrix", "ingress-matrix", "incus_exec.synapse_config", false, execOf("matrix", "mv homeserver.yaml.partial homeserver.yaml")},
	{"the Job synapse-restore run", "ingress-matrix", "kubernetes_job.restore_synapse", false, podOf("talos", "matrix", "synapse-restore")},
	{"Synapse started again in the old VM matrix", "rollback", "incus_exec.stop_synapse", true, execOf("matrix", "systemctl start matrix-synapse")},
	{"Jellyfin started again in the old VM services", "rollback", "group.jellyfin.incus_exec.stop", true, execOf("services", "systemctl start jellyfin")},
	{"Frigate started again in the old VM services", "rollback", "group.frigate.incus_exec.stop", true, execOf("services", "docker compose -p frigate start")},
	{"Samba stopped in the old VM services", "host-services", "incus_exec.stop_samba", true, execOf("services", "systemctl stop smbd")},
	{"Samba started again in the old VM services", "rollback", "incus_exec.stop_samba", true, execOf("services", "systemctl start smbd")},
}

func bootstrapOf(vm string) func(home.Event) bool {
	return func(e home.Event) bool { return e.Kind == home.EventBootstrap && e.Instance == vm }
}

func podOf(vm, namespace, job string) func(home.Event) bool {
	return func(e home.Event) bool {
		return e.Kind == home.EventPod && e.Instance == vm && e.Namespace == namespace && e.Job == job
	}
}

// execOf matches a command in the instance whose argv, joined by
// spaces, contains text.
func execOf(instance, text string) func(home.Event) bool {
	return func(e home.Event) bool {
		return e.Kind == home.EventExec && e.Instance == instance && strings.Contains(strings.Join(e.Command, " "), text)
	}
}

// clusters are the runbook's two Talos VMs: the step that bootstraps
// each one's etcd, the one that fetches its kubeconfig after the
// bootstrap, and the one that waits for its Kubernetes.
var clusters = []struct{ vm, phase, bootstrap, kubeconfig, ready string }{
	{"rehearsal", "rehearsal", "group.rehearsal.talos_bootstrap.etcd", "group.rehearsal.talos_kubeconfig.admin", "group.rehearsal.kubernetes_ready.node"},
	{"talos", "platform", "group.node.talos_bootstrap.etcd", "group.node.talos_kubeconfig.admin", "group.node.kubernetes_ready.node"},
}

// checkWorld checks, after an attempt (killed or not), what must hold at
// any moment of the pass.
func (w *world) checkWorld(t *testing.T) {
	t.Helper()
	st := w.readStatus(t)
	w.checkEffects(t, st)
	w.checkThrowaway(t, st)
	w.checkEtcd(t, st)
	w.checkPulledOnce(t, st)
}

// checkEffects: no once-only effect happened more often than allowed,
// and those of the phases completed happened.
func (w *world) checkEffects(t *testing.T, st *status) {
	t.Helper()
	for _, e := range effects {
		n := w.count(t, e.match)
		key, verb := "run "+e.step, "running"
		if e.phase == "rollback" {
			key, verb = "revert "+e.step, "reverting"
		}
		allowed := 1
		if e.redoable {
			allowed += w.interrupted[key]
		}
		w.expect(t, invOnce, n <= allowed, "%s: %s %d times this pass, at most %d allowed (%d kill(s) found %s %s; it is %s now)",
			w.where, e.what, n, allowed, w.interrupted[key], e.step, verb, w.recorded(st.step(e.step)))
		if e.phase == "rollback" && w.rolledBack || w.completed[e.phase] && !w.rolledBack {
			w.expect(t, invOnce, n >= 1, "%s: %s never happened this pass, though %s is complete (%s is %s)",
				w.where, e.what, e.phase, e.step, w.recorded(st.step(e.step)))
		}
	}
}

// checkThrowaway: the rehearsal's VM is gone once the rehearsal is
// complete (and, after the rollback, every Talos VM).
func (w *world) checkThrowaway(t *testing.T, st *status) {
	t.Helper()
	deleted := st.step("incus_instance.rehearsal_deleted")
	if w.inRollback {
		return // the rollback deletes what is left; checkCompleted looks after it
	}
	if w.completed["rehearsal"] || w.doneThisPass(deleted) {
		in := w.lab.instance(t, "rehearsal")
		w.expect(t, invThrowaway, in == nil, "%s: the throwaway VM rehearsal is %s after the rehearsal completed (incus_instance.rehearsal_deleted is %s)",
			w.where, statusOf(in), w.recorded(deleted))
	}
}

// checkEtcd: a Talos VM whose kubeconfig was fetched this pass (after
// its bootstrap, which it waits for) was bootstrapped this pass: every
// pass makes its VMs anew. A bootstrap recorded done this pass has a
// healthy etcd on its VM while the VM runs; a complete platform's node
// runs etcd.
func (w *world) checkEtcd(t *testing.T, st *status) {
	t.Helper()
	if w.inRollback {
		return // the rollback takes the clusters down
	}
	for _, c := range clusters {
		b, kc := st.step(c.bootstrap), st.step(c.kubeconfig)
		if w.doneThisPass(kc) {
			n := w.count(t, bootstrapOf(c.vm))
			w.expect(t, invEtcd, n > 0, "%s: %s ran this pass (finished %s), after %s, but the VM %s, made anew this pass, was never bootstrapped: %d bootstrap(s) of it this pass; %s is %s",
				w.where, c.kubeconfig, when(kc.FinishedAt), c.bootstrap, c.vm, n, c.bootstrap, w.recorded(b))
		}
		in := w.lab.instance(t, c.vm)
		if !w.doneThisPass(b) && !(w.completed[c.phase] && c.vm == "talos") {
			continue
		}
		if in != nil && in.Status != "Running" || in == nil && c.vm == "rehearsal" {
			continue // stopped, or deleted with its cluster at the end of the rehearsal: no cluster at all
		}
		w.expect(t, invEtcd, in != nil && w.lab.etcdHealthy(t, c.vm, 2*time.Minute),
			"%s: %s is %s and phase %s is %s, but the VM %s (%s) has no etcd answering after 2 minutes (%d bootstrap(s) of it this pass)",
			w.where, c.bootstrap, w.recorded(b), c.phase, st.phase(c.phase), c.vm, statusOf(in), w.count(t, bootstrapOf(c.vm)))
	}
}

// checkPulledOnce: once the restore Job ran this pass, the data volume
// holds what it made of the export (the archive unpacked and removed): a
// second export would bring it back.
func (w *world) checkPulledOnce(t *testing.T, st *status) {
	t.Helper()
	restore := st.step("kubernetes_job.restore_synapse")
	if w.rolledBack || !w.doneThisPass(restore) {
		return
	}
	dir := filepath.Join(home.DataDirIn(w.lab.dir), "matrix")
	var back []string
	for _, name := range []string{"media.tar"} {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			back = append(back, name)
		}
	}
	pull := st.step("incus_exec.export_synapse")
	verb := "is"
	if len(back) > 1 {
		verb = "are"
	}
	w.expect(t, invPulledOnce, len(back) == 0,
		"%s: %s %s back in %s after kubernetes_job.restore_synapse (finished %s) removed them: the export was made again over the restored data (incus_exec.export_synapse is %s)",
		w.where, strings.Join(back, " and "), verb, dir, when(restore.FinishedAt), w.recorded(pull))
}

// checkCompleted checks a command that exited 0: its phase is complete,
// or, after the rollback, every phase is rolled back, no Talos VM is left
// and the old VMs run again with Synapse.
func (w *world) checkCompleted(t *testing.T, name string) {
	t.Helper()
	st := w.readStatus(t)
	if name != "rollback" {
		w.expect(t, invCompletes, st.phase(name) == "complete", "%s: migrate exited 0 but phase %s is %s", w.where, name, st.phase(name))
		w.checkWindows(t, st)
		return
	}
	for _, ph := range st.Phases {
		w.expect(t, invCompletes, ph.Status == "rolled back", "%s: the rollback exited 0 but phase %s is %s", w.where, ph.Name, ph.Status)
	}
	for _, vm := range []string{"rehearsal", "talos"} {
		in := w.lab.instance(t, vm)
		w.expect(t, invThrowaway, in == nil, "%s: the Talos VM %s is %s after the rollback", w.where, vm, statusOf(in))
	}
	for _, vm := range []string{"services", "matrix", "k3s"} {
		in := w.lab.instance(t, vm)
		w.expect(t, invOldVMs, in != nil && in.Status == "Running", "%s: the old VM %s is %s after the rollback", w.where, vm, statusOf(in))
	}
	// The services the move stopped, as the Debian old VMs run them.
	for _, u := range []struct {
		vm, name string
		check    []string
	}{
		{"matrix", "matrix-synapse", []string{"systemctl", "is-active", "matrix-synapse"}},
		{"services", "jellyfin", []string{"systemctl", "is-active", "jellyfin"}},
		{"services", "smbd", []string{"systemctl", "is-active", "smbd"}},
		{"services", "frigate", []string{"sh", "-c", `docker compose ls --format json | grep -q '"Name": *"frigate", *"Status": *"running'`}},
	} {
		code, err := w.lab.exec(t, u.vm, u.check...)
		w.expect(t, invOldVMs, err == nil && code == 0, "%s: %s is not running in the old VM %s after the rollback (%s: %d, %v)", w.where, u.name, u.vm, strings.Join(u.check, " "), code, err)
	}
}

// statusOf is an instance's status as the Incus host says it, or absent.
func statusOf(in *incusapi.Instance) string {
	if in == nil {
		return "absent"
	}
	return in.Status
}

func when(t *time.Time) string {
	if t == nil {
		return "never"
	}
	return t.Local().Format("15:04:05")
}

// commandStats is what the summary says of one command of a pass.
type commandStats struct {
	round    int
	pass     int
	name     string
	kills    int
	resumes  int
	attempts int
	failures int
	took     time.Duration
	points   []string
	result   string
}

// summary is the closing report: the kills and resumes per command, and
// how often each invariant was checked (and failed).
type summary struct {
	cfg      config
	tally    *tally
	commands []*commandStats
}

func (s *summary) add(round, pass int, name string) *commandStats {
	c := &commandStats{round: round, pass: pass, name: name}
	s.commands = append(s.commands, c)
	return c
}

func (s *summary) String(took time.Duration) string {
	var b strings.Builder
	kills, resumes := map[bool]int{}, 0
	for _, c := range s.commands {
		kills[c.name == "rollback"] += c.kills
		resumes += c.resumes
	}
	fmt.Fprintf(&b, "torture summary: seed %d (TORTURE_SEED=%d), %s mode, %s in all\n", s.cfg.seed, s.cfg.seed, s.cfg.mode, took.Round(time.Second))
	for i, r := range s.cfg.rounds {
		fmt.Fprintf(&b, "  round %d: %s\n", i+1, r.name)
	}
	fmt.Fprintf(&b, "  %-5s %-4s %-14s %5s %7s %8s %6s  %s\n", "round", "pass", "command", "kills", "resumes", "failures", "time", "kill points [where they landed]")
	for _, c := range s.commands {
		result := ""
		if c.result != "ok" {
			result = "  <" + c.result + ">"
		}
		fmt.Fprintf(&b, "  %-5d %-4d %-14s %5d %7d %8d %6s  %s%s\n", c.round, c.pass, c.name, c.kills, c.resumes, c.failures, c.took.Round(time.Second), strings.Join(c.points, "; "), result)
	}
	fmt.Fprintf(&b, "  %d kills in phases, %d in rollbacks, %d resumes\n", kills[false], kills[true], resumes)
	fmt.Fprintf(&b, "  invariants: times checked, failures\n")
	for _, inv := range invariantOrder {
		fmt.Fprintf(&b, "    %-58s %4d  %s\n", inv, s.tally.checked[inv], failedText(s.tally.failed[inv]))
	}
	return b.String()
}

func failedText(n int) string {
	if n == 0 {
		return "ok"
	}
	return fmt.Sprintf("FAILED %d", n)
}

// checkWindows: each service stopped in this pass is down since its stop
// first started in this pass, in the attempt a kill may have cut short,
// not since the attempt that resumed it; and it serves again after that.
func (w *world) checkWindows(t *testing.T, st *status) {
	t.Helper()
	for _, svc := range st.Services {
		var first time.Time
		for _, stop := range svc.Stops {
			if at, ok := w.firstStart[stop]; ok && (first.IsZero() || at.Before(first)) {
				first = at
			}
		}
		if first.IsZero() {
			continue // not stopped in this pass (yet)
		}
		down := svc.DownSince
		// The fact is stamped just before the step's start event (which a
		// kill may keep from reaching the test): not after the first
		// start seen, not before the pass.
		ok := down != nil && !down.After(first) && !down.Before(w.passStart)
		w.expect(t, invWindow, ok, "%s: service %s is down since %s, but its stop first started in this pass (which began at %s) at %s", w.where, svc.Name, when(down), w.passStart.Format("15:04:05.000"), first.Format("15:04:05.000"))
		if svc.ServingSince != nil && down != nil {
			w.expect(t, invWindow, !svc.ServingSince.Before(*down), "%s: service %s serves since %s, before it went down at %s", w.where, svc.Name, when(svc.ServingSince), when(down))
		}
	}
}
