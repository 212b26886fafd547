package incushost

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

func (in *instance) snapDir(name string) string { return filepath.Join(in.dir, "snapshots", name) }

func (in *instance) findSnap(name string) *snapshot {
	for _, sn := range in.Snapshots {
		if sn.Name == name {
			return sn
		}
	}
	return nil
}

func (in *instance) snapAPI(sn *snapshot) map[string]any {
	return map[string]any{"name": sn.Name, "created_at": sn.CreatedAt, "last_used_at": time.Time{}, "expires_at": time.Time{},
		"stateful": false, "architecture": in.Architecture, "config": sn.Config, "devices": sn.Devices,
		"profiles": sn.Profiles, "ephemeral": false, "size": 0}
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, err := s.lookup(r.PathValue("name"))
	if err != nil {
		failErr(w, err)
		return
	}
	if recursive(r) {
		out := []map[string]any{}
		for _, sn := range in.Snapshots {
			out = append(out, in.snapAPI(sn))
		}
		syncOK(w, out)
		return
	}
	out := []string{}
	for _, sn := range in.Snapshots {
		out = append(out, "/1.0/instances/"+in.Name+"/snapshots/"+sn.Name)
	}
	syncOK(w, out)
}

// snapOf finds the instance and snapshot a request names, or answers
// the error; the caller holds s.mu.
func (s *Server) snapOf(w http.ResponseWriter, r *http.Request) (*instance, *snapshot) {
	in, err := s.lookup(r.PathValue("name"))
	if err != nil {
		failErr(w, err)
		return nil, nil
	}
	sn := in.findSnap(r.PathValue("snap"))
	if sn == nil {
		fail(w, http.StatusNotFound, "Snapshot not found")
	}
	return in, sn
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, sn := s.snapOf(w, r)
	if sn == nil {
		return
	}
	syncOK(w, in.snapAPI(sn))
}

func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name string `json:"name"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		fail(w, http.StatusBadRequest, "bad request: %v", err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in, err := s.lookup(r.PathValue("name"))
	if err != nil {
		failErr(w, err)
		return
	}
	if req.Name == "" {
		req.Name = fmt.Sprintf("snap%d", len(in.Snapshots))
	}
	if !validSnapshotName(req.Name) {
		fail(w, http.StatusBadRequest, "Invalid snapshot name %q", req.Name)
		return
	}
	if in.findSnap(req.Name) != nil {
		fail(w, http.StatusConflict, "Snapshot %q already exists", req.Name)
		return
	}
	sn := &snapshot{Name: req.Name, CreatedAt: time.Now().UTC(), Config: maps.Clone(in.Config),
		Devices: maps.Clone(in.Devices), Profiles: slices.Clone(in.Profiles)}
	in.Snapshots = append(in.Snapshots, sn) // reserved; the copy runs in the operation
	s.ops.async(w, s.ops.start("task", "Snapshotting instance", map[string][]string{"instances": {"/1.0/instances/" + in.Name}},
		func(*operation) (map[string]any, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			err := copyTree(in.rootfs(), filepath.Join(in.snapDir(sn.Name), "rootfs"))
			if err == nil {
				err = in.save()
			}
			if err != nil {
				in.Snapshots = slices.DeleteFunc(in.Snapshots, func(x *snapshot) bool { return x == sn })
				_ = os.RemoveAll(in.snapDir(sn.Name))
			}
			return nil, err
		}))
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, sn := s.snapOf(w, r)
	if sn == nil {
		return
	}
	in.Snapshots = slices.DeleteFunc(in.Snapshots, func(x *snapshot) bool { return x == sn })
	s.ops.async(w, s.ops.start("task", "Deleting snapshot", map[string][]string{"instances": {"/1.0/instances/" + in.Name}},
		func(*operation) (map[string]any, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if err := in.save(); err != nil {
				return nil, err
			}
			return nil, os.RemoveAll(in.snapDir(sn.Name))
		}))
}

// restore puts a snapshot's rootfs and config back; a running instance is
// stopped first and started again after, as the daemon does.
func (s *Server) restore(in *instance, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sn := in.findSnap(name)
	if sn == nil {
		return errf(http.StatusNotFound, "Snapshot %q of instance %q not found", name, in.Name)
	}
	wasRunning := in.Running
	if wasRunning {
		if err := s.stopLocked(in); err != nil {
			return err
		}
	}
	tmp := in.rootfs() + ".restore"
	_ = os.RemoveAll(tmp)
	if err := copyTree(filepath.Join(in.snapDir(name), "rootfs"), tmp); err != nil {
		return fmt.Errorf("Failed restoring snapshot %q: %w", name, err)
	}
	old := in.rootfs() + ".old"
	_ = os.RemoveAll(old)
	if err := os.Rename(in.rootfs(), old); err != nil {
		return err
	}
	if err := os.Rename(tmp, in.rootfs()); err != nil {
		return err
	}
	_ = os.RemoveAll(old)
	in.Config, in.Devices, in.Profiles = maps.Clone(sn.Config), maps.Clone(sn.Devices), slices.Clone(sn.Profiles)
	if err := in.save(); err != nil {
		return err
	}
	s.logf("incus lab: restored %s to %s", in.Name, name)
	if wasRunning {
		return s.startLocked(in)
	}
	return nil
}

// validSnapshotName is the daemon's rule, looser than an instance's: any
// name but one with a slash or a path element of its own ("migrate-
// old_matrix-1796110050" is valid; underscores are common).
func validSnapshotName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\x00") && len(name) <= 255
}
