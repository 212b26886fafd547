package incushost_test

import (
	"strings"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/lab/incushost"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
)

// waitFor runs cmd in the VM until it prints want (generous deadline:
// RestartSec and two busy cores).
func waitFor(t *testing.T, c *incusapi.Client, vm, cmd, want string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, out, _ := run(t, c, vm, "sh", "-c", cmd)
		if strings.TrimSpace(out) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %q, want %q", cmd, out, want)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// TestDebianSystemdRestart: the lab's systemctl restarts a unit whose
// main process dies as systemd does: Restart=on-failure after a kill or
// a non-zero exit, not after a clean exit nor after systemctl stop, and
// no more than StartLimitBurst= starts within StartLimitIntervalSec=.
func TestDebianSystemdRestart(t *testing.T) {
	c := debianLab(t, incushost.OldHost{})
	units := map[string]string{
		// Each start appends a line to /root/NAME.starts.
		"crash":  "ExecStart=/bin/sh -c 'echo x >> /root/crash.starts; exec sleep 1000'\nRestart=on-failure\nRestartSec=1",
		"fails":  "ExecStart=/bin/sh -c 'echo x >> /root/fails.starts; sleep 1.5; exit 1'\nRestart=on-failure\nRestartSec=0.2\nStartLimitBurst=3\nStartLimitIntervalSec=60",
		"clean":  "ExecStart=/bin/sh -c 'echo x >> /root/clean.starts; sleep 1.5; exit 0'\nRestart=on-failure\nRestartSec=0.2",
		"always": "ExecStart=/bin/sh -c 'echo x >> /root/always.starts; exec sleep 1000'\nRestart=always\nRestartSec=0.2",
	}
	for name, service := range units {
		unit := "[Unit]\nDescription=" + name + "\n[Service]\n" + service + "\n"
		if code, _, stderr := run(t, c, "services", "sh", "-c", "printf '%s' \"$1\" > /etc/systemd/system/lab-"+name+".service && systemctl start lab-"+name, "sh", unit); code != 0 {
			t.Fatalf("systemctl start lab-%s: exit %d %s", name, code, stderr)
		}
	}
	starts := func(name string) string { return "wc -l < /root/" + name + ".starts" }

	// Killed: started again after RestartSec, the unit active again.
	run(t, c, "services", "sh", "-c", "kill -9 $(cat /run/lab-systemd/lab-crash.service.pid)")
	waitFor(t, c, "services", starts("crash"), "2")
	waitFor(t, c, "services", "systemctl is-active lab-crash", "active")

	// Failing: three starts, then given up (start-limit-hit), inactive.
	waitFor(t, c, "services", starts("fails"), "3")
	waitFor(t, c, "services", "systemctl is-active lab-fails", "inactive")
	time.Sleep(2 * time.Second)
	if _, out, _ := run(t, c, "services", "sh", "-c", starts("fails")+"; grep -c start-limit-hit /var/log/lab-journal/lab-fails.service.log"); out != "3\n1\n" {
		t.Errorf("after the start limit: %q, want 3 starts and start-limit-hit once", out)
	}

	// A clean exit is no failure: not restarted.
	waitFor(t, c, "services", "systemctl is-active lab-clean", "inactive")
	if _, out, _ := run(t, c, "services", "sh", "-c", starts("clean")); out != "1\n" {
		t.Errorf("a clean exit was restarted: %q starts", out)
	}

	// Stopped by systemctl: stays stopped, even with Restart=always.
	if code, _, stderr := run(t, c, "services", "systemctl", "stop", "lab-always"); code != 0 {
		t.Fatalf("systemctl stop lab-always: exit %d %s", code, stderr)
	}
	time.Sleep(time.Second)
	if _, out, _ := run(t, c, "services", "sh", "-c", starts("always")+"; systemctl is-active lab-always"); out != "1\ninactive\n" {
		t.Errorf("a unit stopped by systemctl: %q, want 1 start and inactive", out)
	}
}
