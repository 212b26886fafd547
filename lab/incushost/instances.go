package incushost

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// instance is one instance: a directory Dir/instances/NAME with its
// rootfs, its snapshots and meta.json (this struct's exported fields).
type instance struct {
	Name         string                       `json:"name"`
	Type         string                       `json:"type"`
	Description  string                       `json:"description"`
	Architecture string                       `json:"architecture"`
	Config       map[string]string            `json:"config"`
	Devices      map[string]map[string]string `json:"devices"`
	Profiles     []string                     `json:"profiles"`
	Ephemeral    bool                         `json:"ephemeral"`
	Stateful     bool                         `json:"stateful"`
	CreatedAt    time.Time                    `json:"created_at"`
	LastUsedAt   time.Time                    `json:"last_used_at"`
	Running      bool                         `json:"running"`
	IPv4         string                       `json:"ipv4"`
	Snapshots    []*snapshot                  `json:"snapshots"`
	// UsrLayer: a Debian old VM's /usr is this directory (the Debian
	// root's), read-only below its rootfs/usr (OldHost, debian.go).
	UsrLayer string `json:"lab_usr_layer,omitempty"`

	dir     string
	guest   Guest           // a booted VM's guest
	forced  chan struct{}   // closed by a stop, to end a graceful stop that waits
	booting bool            // BootVM runs, s.mu released
	init    *initProc       // a running container's init
	execs   map[string]bool // running commands by operation ID
	agent   GuestAgent      // a VM's agent made to answer listings (agent.go)
	booted  chan struct{}   // a Debian VM's boot is done (closed; debian.go)
}

type snapshot struct {
	Name      string                       `json:"name"`
	CreatedAt time.Time                    `json:"created_at"`
	Config    map[string]string            `json:"config"`
	Devices   map[string]map[string]string `json:"devices"`
	Profiles  []string                     `json:"profiles"`
}

// put is the writable part, as the API's InstancePut.
type put struct {
	Architecture string                       `json:"architecture"`
	Config       map[string]string            `json:"config"`
	Devices      map[string]map[string]string `json:"devices"`
	Ephemeral    bool                         `json:"ephemeral"`
	Profiles     []string                     `json:"profiles"`
	Stateful     bool                         `json:"stateful"`
	Description  string                       `json:"description"`
	Restore      string                       `json:"restore,omitempty"`
}

func (in *instance) rootfs() string { return filepath.Join(in.dir, "rootfs") }

func (in *instance) etag() string {
	b, _ := json.Marshal(put{Architecture: in.Architecture, Config: in.Config, Devices: in.Devices, Ephemeral: in.Ephemeral,
		Profiles: in.Profiles, Stateful: in.Stateful, Description: in.Description})
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func (in *instance) save() error {
	b, err := json.MarshalIndent(in, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(in.dir, "meta.json.tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(in.dir, "meta.json"))
}

func (in *instance) status() (string, int) {
	if in.Running {
		return "Running", 103
	}
	return "Stopped", 102
}

func (s *Server) instAPI(in *instance) map[string]any {
	st, code := in.status()
	cfg, devs := s.expanded(in)
	return map[string]any{"name": in.Name, "type": in.Type, "status": st, "status_code": code,
		"description": in.Description, "architecture": in.Architecture, "config": in.Config,
		"devices": in.Devices, "profiles": in.Profiles, "ephemeral": in.Ephemeral, "stateful": in.Stateful,
		"expanded_config": cfg, "expanded_devices": devs,
		"created_at": in.CreatedAt, "last_used_at": lastUsed(in.LastUsedAt), "location": "none", "project": "default"}
}

// load reads the instances and volumes kept in Dir; New starts again
// those that were running.
func (s *Server) load() error {
	if err := s.loadVolumes(); err != nil { // first: an ISO volume says which VMs boot
		return err
	}
	dirs, _ := filepath.Glob(filepath.Join(s.dir, "instances", "*", "meta.json"))
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		in := &instance{}
		if err := json.Unmarshal(b, in); err != nil {
			return fmt.Errorf("incushost: %s: %w", f, err)
		}
		in.dir = filepath.Dir(f)
		s.instances[in.Name] = in
		s.useIP(in.IPv4)
	}
	return nil
}

// ipFor is the n-th address the lab gives in its block (127.block.0.0/16):
// 127.block.1.1 on, 250 a third octet.
func ipFor(block, n int) string {
	return fmt.Sprintf("127.%d.%d.%d", block, 1+(n-1)/250, 1+(n-1)%250)
}

func (s *Server) useIP(ip string) {
	var blk, a, b int
	if _, err := fmt.Sscanf(ip, "127.%d.%d.%d", &blk, &a, &b); err == nil && blk == s.opts.AddressBlock {
		if n := (a-1)*250 + b; n >= s.nextIP {
			s.nextIP = n + 1
		}
	}
}

// newIP takes the next address; the caller holds s.mu.
func (s *Server) newIP() string {
	ip := ipFor(s.opts.AddressBlock, s.nextIP)
	s.nextIP++
	return ip
}

var nameRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9-]{0,62}$`)

func (s *Server) instanceRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /1.0/instances", s.listInstances)
	mux.HandleFunc("POST /1.0/instances", s.createInstance)
	mux.HandleFunc("GET /1.0/instances/{name}", s.getInstance)
	mux.HandleFunc("PUT /1.0/instances/{name}", s.putInstance)
	mux.HandleFunc("PATCH /1.0/instances/{name}", s.putInstance)
	mux.HandleFunc("DELETE /1.0/instances/{name}", s.deleteInstance)
	mux.HandleFunc("GET /1.0/instances/{name}/state", s.getState)
	mux.HandleFunc("PUT /1.0/instances/{name}/state", s.putState)
	mux.HandleFunc("GET /1.0/instances/{name}/snapshots", s.listSnapshots)
	mux.HandleFunc("POST /1.0/instances/{name}/snapshots", s.createSnapshot)
	mux.HandleFunc("GET /1.0/instances/{name}/snapshots/{snap}", s.getSnapshot)
	mux.HandleFunc("DELETE /1.0/instances/{name}/snapshots/{snap}", s.deleteSnapshot)
	s.execRoutes(mux)
	s.fileRoutes(mux)
}

// lookup finds an instance; the caller holds s.mu.
func (s *Server) lookup(name string) (*instance, error) {
	in := s.instances[name]
	if in == nil {
		return nil, errf(http.StatusNotFound, "Instance not found")
	}
	return in, nil
}

func (s *Server) listInstances(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := slices.Sorted(maps.Keys(s.instances))
	clauses, err := parseFilter(r.URL.Query().Get("filter"))
	if err != nil {
		failErr(w, err)
		return
	}
	if clauses != nil {
		var kept []string
		for _, n := range names {
			if matchFilter(s.instAPI(s.instances[n]), clauses) {
				kept = append(kept, n)
			}
		}
		names = kept
	}
	if recursive(r) {
		full := r.URL.Query().Get("recursion") == "2" // the view `incus list` asks for
		out := []map[string]any{}
		for _, n := range names {
			in := s.instances[n]
			a := s.instAPI(in)
			if full {
				snaps := []map[string]any{}
				for _, sn := range in.Snapshots {
					snaps = append(snaps, in.snapAPI(sn))
				}
				a["state"], a["snapshots"], a["backups"] = s.stateAPI(in), snaps, []any{}
			}
			out = append(out, a)
		}
		syncOK(w, out)
		return
	}
	out := []string{}
	for _, n := range names {
		out = append(out, "/1.0/instances/"+n)
	}
	syncOK(w, out)
}

func (s *Server) getInstance(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, err := s.lookup(r.PathValue("name"))
	if err != nil {
		failErr(w, err)
		return
	}
	w.Header().Set("ETag", `"`+in.etag()+`"`)
	syncOK(w, s.instAPI(in))
}

// hwaddr is a NIC's MAC as the daemon makes one (volatile.<dev>.hwaddr):
// Incus's prefix 10:66:6a (not LXD's 00:16:3e), then random.
func hwaddr() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return fmt.Sprintf("10:66:6a:%02x:%02x:%02x", b[0], b[1], b[2])
}

// uuid4 is a random (version 4) UUID.
func uuid4() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// setVolatile gives the instance its UUID (volatile.uuid: an instance
// deleted and made again under its name has another) and each NIC a MAC,
// as the daemon does; the caller holds s.mu.
func (s *Server) setVolatile(in *instance) {
	if in.Config["volatile.uuid"] == "" {
		in.Config["volatile.uuid"] = uuid4()
	}
	_, devs := s.expanded(in)
	for name, d := range devs {
		if d["type"] == "nic" && in.Config["volatile."+name+".hwaddr"] == "" && d["hwaddr"] == "" {
			in.Config["volatile."+name+".hwaddr"] = hwaddr()
		}
	}
}

// createSource checks a creation's name, type (container by default) and
// source, and returns the root file system to copy ("" for none); not ok
// when it has answered w with the error.
func (s *Server) createSource(w http.ResponseWriter, req *instancesPost) (src string, ok bool) {
	if !nameRE.MatchString(req.Name) {
		fail(w, http.StatusBadRequest, "Invalid instance name %q: letters, digits and dashes, starting with a letter", req.Name)
		return "", false
	}
	if req.Type == "" {
		req.Type = "container"
	}
	if req.Type != "container" && req.Type != "virtual-machine" {
		fail(w, http.StatusBadRequest, "Invalid instance type %q", req.Type)
		return "", false
	}
	switch req.Source.Type {
	case "image":
		src = filepath.Join(s.dir, "images", req.Source.Alias, "rootfs")
		if st, err := os.Stat(src); err != nil || !st.IsDir() || req.Source.Alias == "" || strings.Contains(req.Source.Alias, "/") {
			fail(w, http.StatusNotFound, "Image alias %q not found (the lab's images: ImportImage)", req.Source.Alias)
			return "", false
		}
	case "none", "":
	default:
		fail(w, http.StatusBadRequest, "The lab cannot create an instance from a source of type %q", req.Source.Type)
		return "", false
	}
	return src, true
}

// instancesPost is the body of POST /1.0/instances, as far as the lab
// reads it.
type instancesPost struct {
	put
	Name   string `json:"name"`
	Type   string `json:"type"`
	Source struct {
		Type  string `json:"type"`
		Alias string `json:"alias"`
	} `json:"source"`
	Start bool `json:"start"`
}

func (s *Server) createInstance(w http.ResponseWriter, r *http.Request) {
	var req instancesPost
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		fail(w, http.StatusBadRequest, "bad request: %v", err)
		return
	}
	src, ok := s.createSource(w, &req)
	if !ok {
		return
	}
	s.mu.Lock()
	for _, p := range req.Profiles {
		if s.profiles[p] == nil {
			s.mu.Unlock()
			fail(w, http.StatusNotFound, "Profile %q not found", p)
			return
		}
	}
	if s.instances[req.Name] != nil {
		s.mu.Unlock()
		fail(w, http.StatusConflict, "Instance %q already exists", req.Name)
		return
	}
	now := time.Now().UTC()
	in := &instance{Name: req.Name, Type: req.Type, Description: req.Description, Architecture: "x86_64",
		Config: orEmpty(req.Config), Devices: orEmptyDevices(req.Devices), Profiles: req.Profiles,
		Ephemeral: req.Ephemeral, CreatedAt: now, dir: filepath.Join(s.dir, "instances", req.Name),
		IPv4: s.newIP()}
	if in.Profiles == nil {
		in.Profiles = []string{"default"}
	}
	s.setVolatile(in)
	s.instances[in.Name] = in // reserved: the copy below runs unlocked
	s.mu.Unlock()
	op := s.ops.start("task", "Creating instance", map[string][]string{"instances": {"/1.0/instances/" + in.Name}},
		func(*operation) (map[string]any, error) {
			s.mu.Lock()
			err := s.createRejection(in)
			s.mu.Unlock()
			if err == nil {
				err = s.checkDisks(in)
			}
			if err == nil {
				err = s.makeInstance(in, src)
			}
			if err != nil {
				s.mu.Lock()
				delete(s.instances, in.Name)
				s.mu.Unlock()
				_ = os.RemoveAll(in.dir)
				return nil, err
			}
			if !req.Start {
				return nil, nil
			}
			s.mu.Lock() // a failed start leaves the instance created, as the daemon does
			defer s.mu.Unlock()
			return nil, s.startLocked(in)
		})
	s.ops.async(w, op)
}

func (s *Server) makeInstance(in *instance, src string) error {
	if err := os.MkdirAll(filepath.Join(in.dir, "logs"), 0o755); err != nil {
		return err
	}
	var err error
	if src != "" {
		err = copyTree(src, in.rootfs())
	} else {
		err = os.MkdirAll(in.rootfs(), 0o755)
	}
	if err != nil {
		return fmt.Errorf("Failed creating the instance's root: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := in.save(); err != nil {
		return err
	}
	s.logf("incus lab: created %s %s", in.Type, in.Name)
	s.lifecycle("instance-created", in.Name)
	return nil
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func orEmptyDevices(m map[string]map[string]string) map[string]map[string]string {
	if m == nil {
		return map[string]map[string]string{}
	}
	return m
}

func checkETag(r *http.Request, in *instance) error {
	want := strings.Trim(r.Header.Get("If-Match"), `"`)
	if want != "" && want != in.etag() {
		return errf(http.StatusPreconditionFailed, "ETag doesn't match: %s vs %s", want, in.etag())
	}
	return nil
}

func (s *Server) putInstance(w http.ResponseWriter, r *http.Request) {
	var req put
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		fail(w, http.StatusBadRequest, "bad request: %v", err)
		return
	}
	s.mu.Lock()
	in, err := s.lookup(r.PathValue("name"))
	if err == nil {
		err = checkETag(r, in)
	}
	s.mu.Unlock()
	if err != nil {
		failErr(w, err)
		return
	}
	res := map[string][]string{"instances": {"/1.0/instances/" + in.Name}}
	if req.Restore != "" {
		s.ops.async(w, s.ops.start("task", "Restoring snapshot", res, func(*operation) (map[string]any, error) {
			return nil, s.restore(in, req.Restore)
		}))
		return
	}
	patch := r.Method == http.MethodPatch
	s.mu.Lock()
	config, devices := req.Config, req.Devices
	if patch {
		config, devices = maps.Clone(in.Config), maps.Clone(in.Devices)
		maps.Copy(config, req.Config)
		maps.Copy(devices, req.Devices)
	}
	err = s.updateRejection(in.Type, config, devices)
	s.mu.Unlock()
	if err != nil {
		failErr(w, err) // the daemon answers the request itself
		return
	}
	s.ops.async(w, s.ops.start("task", "Updating instance", res, func(*operation) (map[string]any, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		was := *in
		was.Config, was.Devices = maps.Clone(in.Config), maps.Clone(in.Devices)
		_, before := s.expanded(in)
		if patch {
			maps.Copy(in.Config, req.Config)
			maps.Copy(in.Devices, req.Devices)
			if req.Description != "" {
				in.Description = req.Description
			}
		} else {
			// A PUT replaces the config, but the daemon keeps the
			// volatile keys it was not given (the instance's UUID).
			cfg := orEmpty(req.Config)
			for k, v := range in.Config {
				if _, given := cfg[k]; !given && strings.HasPrefix(k, "volatile.") {
					cfg[k] = v
				}
			}
			in.Config, in.Devices, in.Description = cfg, orEmptyDevices(req.Devices), req.Description
			in.Ephemeral, in.Stateful = req.Ephemeral, req.Stateful
			if req.Profiles != nil {
				in.Profiles = req.Profiles
			}
		}
		_, after := s.expanded(in)
		if err := s.hotplugDisks(in, before, after); err != nil {
			in.Config, in.Devices, in.Description, in.Ephemeral, in.Stateful, in.Profiles = was.Config, was.Devices, was.Description, was.Ephemeral, was.Stateful, was.Profiles
			return nil, err
		}
		s.setVolatile(in)
		return nil, in.save()
	}))
}

func (s *Server) deleteInstance(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, err := s.lookup(r.PathValue("name"))
	if err != nil {
		failErr(w, err)
		return
	}
	if in.Running || in.booting {
		fail(w, http.StatusBadRequest, "Instance is running")
		return
	}
	delete(s.instances, in.Name)
	s.ops.async(w, s.ops.start("task", "Deleting instance", map[string][]string{"instances": {"/1.0/instances/" + in.Name}},
		func(*operation) (map[string]any, error) {
			s.logf("incus lab: deleted %s", in.Name)
			s.lifecycle("instance-deleted", in.Name)
			return nil, os.RemoveAll(in.dir)
		}))
}

// lastUsed is last_used_at as the daemon says it: the Unix epoch for an
// instance that never ran.
func lastUsed(t time.Time) time.Time {
	if t.IsZero() {
		return time.Unix(0, 0).UTC()
	}
	return t
}

// requested is the instance the request names; false when it has
// answered the request with the daemon's error.
func (s *Server) requested(w http.ResponseWriter, r *http.Request) (*instance, bool) {
	s.mu.Lock()
	in, err := s.lookup(r.PathValue("name"))
	s.mu.Unlock()
	if err != nil {
		failErr(w, err)
		return nil, false
	}
	return in, true
}
