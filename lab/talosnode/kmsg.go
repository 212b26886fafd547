package talosnode

import (
	"fmt"
	"time"
)

const (
	facilityKern = "kern"
	facilityUser = "user"

	maxKmsg = 4096
)

type kmsgLine struct {
	seq      int
	facility string
	priority string
	time     time.Time
	message  string
}

// format renders a line the way machined's Dmesg does:
// "<facility>: <priority padded to 7>: [<RFC3339Nano>]: <message>\n" (the
// kernel record's text keeps its newline).
func (l kmsgLine) format() string {
	return fmt.Sprintf("%s: %7s: [%s]: %s\n", l.facility, l.priority, l.time.Format(time.RFC3339Nano), l.message)
}

// logf appends a kernel log line and wakes followers.
func (n *Node) logf(facility, priority, format string, args ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()

	n.logfLocked(facility, priority, format, args...)
}

func (n *Node) logfLocked(facility, priority, format string, args ...any) {
	seq := 0
	if len(n.kmsg) > 0 {
		seq = n.kmsg[len(n.kmsg)-1].seq + 1
	}

	n.kmsg = append(n.kmsg, kmsgLine{seq: seq, facility: facility, priority: priority, time: time.Now(), message: fmt.Sprintf(format, args...)})
	if len(n.kmsg) > maxKmsg {
		n.kmsg = append([]kmsgLine(nil), n.kmsg[len(n.kmsg)-maxKmsg:]...)
	}

	close(n.kmsgNotify)
	n.kmsgNotify = make(chan struct{})
}

// kmsgSince returns lines with seq >= from and a channel closed on the next line.
func (n *Node) kmsgSince(from int) ([]kmsgLine, int, <-chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()

	var out []kmsgLine

	next := from

	for _, l := range n.kmsg {
		if l.seq >= from {
			out = append(out, l)
			next = l.seq + 1
		}
	}

	if len(n.kmsg) > 0 && next < n.kmsg[len(n.kmsg)-1].seq+1 {
		next = n.kmsg[len(n.kmsg)-1].seq + 1
	}

	return out, next, n.kmsgNotify
}

// bootLogLocked writes the kernel and machined lines of a (simulated) boot.
func (n *Node) bootLogLocked(reason string) {
	n.logfLocked(facilityKern, "notice", "Linux version 6.18.0-talos (root@buildkitsandbox) (gcc (GCC) 15.2.0, GNU ld (GNU Binutils) 2.45) #1 SMP")
	n.logfLocked(facilityKern, "info", "Command line: talos.platform=metal console=ttyS0 init_on_alloc=1 slab_nomerge pti=on")
	n.logfLocked(facilityKern, "info", "virtiofs virtio1: discovered new tag: data")
	n.logfLocked(facilityUser, "warning", "[talos] talosctl version %s booting (%s)", n.state.Version, reason)
	n.logfLocked(facilityUser, "warning", "[talos] loaded machine config from %s", ConfigPath)
	n.logfLocked(facilityUser, "warning", "[talos] setting hostname {\"hostname\": %q}", n.opts.Hostname)
	n.logfLocked(facilityUser, "warning", "[talos] volume %q mounted at %s {\"source\": \"virtiofs\"}", "data", DataMount)
	n.logfLocked(facilityUser, "warning", "[talos] service[apid](Running): Health check successful")
	n.logfLocked(facilityUser, "warning", "[talos] service[kubelet](Running): Health check successful")

	if n.state.Bootstrapped {
		n.logfLocked(facilityUser, "warning", "[talos] service[etcd](Running): Health check successful")
	} else {
		n.logfLocked(facilityUser, "warning", "[talos] etcd is waiting to join the cluster, if this node is the first node in the cluster, please run `talosctl bootstrap`")
	}
}
