package incushost

// A running instance's state and its changes: start, stop, restart.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"
)

func (s *Server) getState(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, err := s.lookup(r.PathValue("name"))
	if err != nil {
		failErr(w, err)
		return
	}
	syncOK(w, s.stateAPI(in))
}

// stateAPI is GET .../state; the caller holds s.mu.
func (s *Server) stateAPI(in *instance) map[string]any {
	st, code := in.status()
	out := map[string]any{"status": st, "status_code": code, "pid": 0, "processes": 0,
		"cpu": map[string]any{"usage": 0}, "memory": map[string]any{"usage": 0}}
	if in.Running {
		// Its init and the commands it runs; a VM booted from an ISO runs
		// no agent, and the daemon, which then only hears QEMU, says -1.
		out["pid"], out["processes"] = os.Getpid(), 1+len(in.execs)
		if in.guest != nil {
			out["processes"] = -1
		}
		out["network"] = s.interfaces(in)
	}
	return out
}

// interfaces is what a running instance reports: lo, and each NIC with
// the instance's loopback address (the lab's network is 127.0.0.0/8).
func (s *Server) interfaces(in *instance) map[string]any {
	out := map[string]any{"lo": map[string]any{"addresses": []map[string]string{{"family": "inet", "address": "127.0.0.1", "netmask": "8", "scope": "local"}},
		"hwaddr": "", "host_name": "", "mtu": 65536, "state": "up", "type": "loopback"}}
	cfg, devs := s.expanded(in)
	for name, d := range devs {
		if d["type"] != "nic" {
			continue
		}
		guest := d["name"]
		if guest == "" {
			guest = name
		}
		mac := nicMAC(cfg, name, d) // as the guest's kernel tells it: lower case
		addrs := []map[string]string{{"family": "inet", "address": in.IPv4, "netmask": "8", "scope": "global"}}
		if s.onLAN(d) {
			addrs = []map[string]string{} // the router's lease: Incus does not see it
		}
		out[guest] = map[string]any{"addresses": addrs,
			"hwaddr": mac, "host_name": "lab" + name, "mtu": 1500, "state": "up", "type": "broadcast"}
	}
	if _, _, lan := s.lanAddress(in); lan {
		return out // on the LAN: where, only the router knows
	}
	if _, ok := out["eth0"]; !ok && in.guest != nil { // a booted VM is reachable on its address
		out["eth0"] = map[string]any{"addresses": []map[string]string{{"family": "inet", "address": in.IPv4, "netmask": "8", "scope": "global"}},
			"hwaddr": "", "host_name": "", "mtu": 1500, "state": "up", "type": "broadcast"}
	}
	return out
}

func (s *Server) putState(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Action  string `json:"action"`
		Timeout int    `json:"timeout"`
		Force   bool   `json:"force"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		fail(w, http.StatusBadRequest, "bad request: %v", err)
		return
	}
	in, ok := s.requested(w, r)
	if !ok {
		return
	}
	desc := map[string]string{"start": "Starting instance", "stop": "Stopping instance", "restart": "Restarting instance"}[req.Action]
	if desc == "" {
		fail(w, http.StatusBadRequest, "Unknown action %q (the lab knows start, stop, restart)", req.Action)
		return
	}
	s.ops.async(w, s.ops.start("task", desc, map[string][]string{"instances": {"/1.0/instances/" + in.Name}},
		func(*operation) (map[string]any, error) {
			if req.Action != "start" && !req.Force {
				s.shutdownDebian(in)
			}
			if req.Action == "stop" && !req.Force {
				if stopped, err := s.deafStop(in, req.Timeout); stopped || err != nil {
					return nil, err
				}
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			switch req.Action {
			case "start":
				if in.Running {
					return nil, errf(http.StatusBadRequest, "The instance is already running")
				}
				return nil, s.startLocked(in)
			case "stop":
				if !in.Running {
					return nil, errf(http.StatusBadRequest, "The instance is already stopped")
				}
				return nil, s.stopLocked(in)
			}
			if in.Running {
				if err := s.stopLocked(in); err != nil {
					return nil, err
				}
			}
			return nil, s.startLocked(in)
		}))
}

// startLocked starts an instance: a container (or a VM without an ISO)
// gets its init; a VM booting an ISO gets its guest from BootVM, called
// with s.mu released.
func (s *Server) startLocked(in *instance) error {
	if err := s.checkDisks(in); err != nil {
		return err
	}
	if err := s.vmOnlyDisks(in); err != nil {
		return err
	}
	if s.needsBoot(in) {
		spec, err := s.vmSpec(in)
		if err != nil {
			return err
		}
		if s.opts.BootVM == nil {
			return errf(http.StatusBadRequest, "The lab cannot boot VM %q from %s: no BootVM hook", in.Name, spec.ISO)
		}
		if in.booting {
			return errf(http.StatusBadRequest, "The instance is already starting")
		}
		// A boot takes its time: the lab answers other calls meanwhile.
		in.booting = true
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(s.closeCtx, 5*time.Minute)
		g, err := s.opts.BootVM(ctx, spec)
		cancel()
		s.mu.Lock()
		in.booting = false
		if err != nil {
			return fmt.Errorf("Failed to boot VM %q: %w", in.Name, err)
		}
		if s.instances[in.Name] != in || s.closing { // deleted, or the lab closed, while it booted
			_ = g.Stop()
			return errf(http.StatusBadRequest, "VM %q went away while it booted", in.Name)
		}
		in.guest = g
	} else if in.init == nil {
		_, devs := s.expanded(in)
		p, err := startInit(in, append(in.usrLayer(), s.binds(devs)...))
		if err != nil {
			return err
		}
		in.init = p
		if in.UsrLayer != "" {
			s.bootDebian(in)
		}
	}
	in.Running = true
	in.LastUsedAt = time.Now().UTC()
	s.logf("incus lab: started %s", in.Name)
	s.lifecycle("instance-started", in.Name)
	return in.save()
}

// stopLocked kills the instance's commands and stops its guest.
func (s *Server) stopLocked(in *instance) error {
	in.killExecs()
	if in.forced != nil {
		close(in.forced)
		in.forced = nil
	}
	if in.guest != nil {
		if err := in.guest.Stop(); err != nil {
			return fmt.Errorf("Failed stopping VM %q: %w", in.Name, err)
		}
		in.guest = nil
	}
	in.Running = false
	s.logf("incus lab: stopped %s", in.Name)
	s.lifecycle("instance-stopped", in.Name)
	return in.save()
}

// deafStop: an instance whose raw.lxc sets lxc.signal.halt to a signal
// other than SIGPWR stands for a guest whose init ignores it: a graceful
// stop waits for its timeout (or a forced stop) and fails as the daemon's
// does, the instance still running. Any other graceful stop goes on at once.
func (s *Server) deafStop(in *instance, timeout int) (stopped bool, err error) {
	s.mu.Lock()
	halt := ""
	cfg, _ := s.expanded(in)
	for _, line := range strings.Split(cfg["raw.lxc"], "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && strings.TrimSpace(k) == "lxc.signal.halt" {
			halt = strings.TrimSpace(v)
		}
	}
	if !in.Running || halt == "" || halt == "SIGPWR" {
		s.mu.Unlock()
		return false, nil
	}
	if in.forced == nil {
		in.forced = make(chan struct{})
	}
	forced := in.forced
	s.mu.Unlock()
	if timeout < 0 || timeout > 600 {
		timeout = 600 // the daemon's cap
	}
	select {
	case <-forced: // a forced stop ended it
		return true, nil
	case <-s.closeCtx.Done():
		return false, errf(http.StatusInternalServerError, "the lab is shutting down")
	case <-time.After(time.Duration(timeout) * time.Second):
		return false, errf(http.StatusInternalServerError, "Failed shutting down instance, status is %q: context deadline exceeded", "Running")
	}
}

// vmOnlyDisks: a container cannot start with a config drive, which the
// daemon checks when it starts the device (disk.go validateEnvironment).
func (s *Server) vmOnlyDisks(in *instance) error {
	if in.Type == "virtual-machine" {
		return nil
	}
	_, devs := s.expanded(in)
	for _, name := range slices.Sorted(maps.Keys(devs)) {
		if d := devs[name]; d["type"] == "disk" && isConfigDrive(d["source"]) {
			return errf(http.StatusBadRequest, "Failed to start device %q: disks with source=%s are only supported by virtual machines", name, d["source"])
		}
	}
	return nil
}

// checkDisks: a disk device's host source must exist, as the daemon
// checks on create and start.
func (s *Server) checkDisks(in *instance) error {
	_, devs := s.expanded(in)
	for _, name := range slices.Sorted(maps.Keys(devs)) {
		d := devs[name]
		if d["type"] == "disk" && strings.HasPrefix(d["source"], "/") {
			if _, err := os.Stat(d["source"]); err != nil {
				return errf(http.StatusBadRequest, "Failed to start device %q: Missing source path %q", name, d["source"])
			}
		}
	}
	return nil
}
