package incushost

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// volume is a custom volume of a pool: metadata in
// Dir/storage/POOL/NAME.json, an ISO's bytes in NAME.iso beside it, a
// filesystem volume's files in Dir/storage/POOL/custom/NAME/ (what a disk
// device naming it mounts). A block volume has no bytes here: its size is
// what a VM's guest is told.
type volume struct {
	Pool        string            `json:"pool"`
	Name        string            `json:"name"`
	ContentType string            `json:"content_type"`
	Description string            `json:"description"`
	Config      map[string]string `json:"config"`
}

// defaultPool is the default profile's root disk pool: the first of
// Options.Pools.
func (s *Server) defaultPool() string { return s.opts.Pools[0] }

func (s *Server) hasPool(p string) bool { return slices.Contains(s.opts.Pools, p) }

// volDir is where a filesystem volume keeps its files.
func (s *Server) volDir(pool, name string) string { return VolumeDir(s.dir, pool, name) }

// VolumeDir is where the host in dir (Options.Dir) keeps the files of the
// filesystem volume pool/name: for tests that look at them from outside.
func VolumeDir(dir, pool, name string) string {
	return filepath.Join(dir, "storage", pool, "custom", name)
}

func (s *Server) volPath(pool, name, ext string) string {
	return filepath.Join(s.dir, "storage", pool, name+ext)
}

func (v *volume) etag() string {
	b, _ := json.Marshal([]any{v.Config, v.Description})
	return fingerprint(b)
}

func (s *Server) saveVolume(v *volume) error {
	b, _ := json.MarshalIndent(v, "", "  ")
	if err := os.MkdirAll(filepath.Join(s.dir, "storage", v.Pool), 0o755); err != nil {
		return err
	}
	return os.WriteFile(s.volPath(v.Pool, v.Name, ".json"), b, 0o644)
}

func (s *Server) loadVolumes() error {
	files, _ := filepath.Glob(filepath.Join(s.dir, "storage", "*", "*.json"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		v := &volume{}
		if err := json.Unmarshal(b, v); err != nil {
			return err
		}
		s.volumes[v.Pool+"/"+v.Name] = v
	}
	return nil
}

// usedBy lists the instances whose disks name the volume; caller holds s.mu.
func (s *Server) usedBy(v *volume) []string {
	out := []string{}
	for _, n := range slices.Sorted(maps.Keys(s.instances)) {
		_, devs := s.expanded(s.instances[n])
		for _, d := range devs {
			if d["type"] == "disk" && d["source"] == v.Name && orStr(d["pool"], s.defaultPool()) == v.Pool {
				out = append(out, "/1.0/instances/"+n)
				break
			}
		}
	}
	return out
}

func (s *Server) volAPI(v *volume) map[string]any {
	return map[string]any{"name": v.Name, "type": "custom", "content_type": v.ContentType, "config": v.Config,
		"description": v.Description, "used_by": s.usedBy(v), "location": "none"}
}

func (s *Server) volumeRoutes(mux *http.ServeMux) {
	base := "/1.0/storage-pools/{pool}/volumes/custom"
	mux.HandleFunc("GET /1.0/storage-pools", s.listPools)
	mux.HandleFunc("GET /1.0/storage-pools/{pool}", s.getPool)
	mux.HandleFunc("GET "+base, s.listVolumes)
	mux.HandleFunc("POST "+base, s.createVolume)
	mux.HandleFunc("GET "+base+"/{name}", s.volume(func(w http.ResponseWriter, r *http.Request, v *volume) {
		w.Header().Set("ETag", `"`+v.etag()+`"`)
		syncOK(w, s.volAPI(v))
	}))
	put := s.volume(func(w http.ResponseWriter, r *http.Request, v *volume) {
		var req struct {
			Config      map[string]string `json:"config"`
			Description string            `json:"description"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			fail(w, http.StatusBadRequest, "bad request: %v", err)
			return
		}
		if m := strings.Trim(r.Header.Get("If-Match"), `"`); m != "" && m != v.etag() {
			fail(w, http.StatusPreconditionFailed, "ETag doesn't match: %s vs %s", m, v.etag())
			return
		}
		if v.ContentType == "iso" && !maps.Equal(orEmpty(req.Config), orEmpty(v.Config)) {
			fail(w, http.StatusBadRequest, "Custom ISO volume config cannot be changed")
			return
		}
		v.Config, v.Description = orEmpty(req.Config), req.Description
		if err := s.saveVolume(v); err != nil {
			failErr(w, err)
			return
		}
		syncOK(w, map[string]any{})
	})
	mux.HandleFunc("PUT "+base+"/{name}", put)
	mux.HandleFunc("PATCH "+base+"/{name}", put)
	mux.HandleFunc("DELETE "+base+"/{name}", s.volume(func(w http.ResponseWriter, r *http.Request, v *volume) {
		if u := s.usedBy(v); len(u) > 0 {
			fail(w, http.StatusBadRequest, "The storage volume is still in use")
			return
		}
		if err := os.RemoveAll(s.volDir(v.Pool, v.Name)); err != nil {
			failErr(w, err)
			return
		}
		delete(s.volumes, v.Pool+"/"+v.Name)
		_ = os.Remove(s.volPath(v.Pool, v.Name, ".iso"))
		_ = os.Remove(s.volPath(v.Pool, v.Name, ".json"))
		syncOK(w, map[string]any{})
	}))
}

func (s *Server) getPool(w http.ResponseWriter, r *http.Request) {
	if !s.hasPool(r.PathValue("pool")) {
		fail(w, http.StatusNotFound, "Storage pool not found")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	syncOK(w, s.poolAPI(r.PathValue("pool")))
}

// poolAPI is a pool as the daemon shows it; s.mu held (its used_by).
func (s *Server) poolAPI(name string) map[string]any {
	return map[string]any{"name": name, "driver": "dir", "status": "Created", "config": map[string]string{},
		"used_by": s.usedByPool(name)}
}

// usedByPool is what the daemon lists as using a pool: the instances with
// a disk on it (the root disk's pool defaults to the first), the profiles
// naming it and its custom volumes.
func (s *Server) usedByPool(pool string) []string {
	out := s.usedByDevices(func(d map[string]string, instance bool) bool {
		def := ""
		if instance && d["path"] == "/" {
			def = s.defaultPool()
		}
		return d["type"] == "disk" && orStr(d["pool"], def) == pool
	})
	for _, k := range slices.Sorted(maps.Keys(s.volumes)) {
		if v := s.volumes[k]; v.Pool == pool {
			out = append(out, "/1.0/storage-pools/"+pool+"/volumes/custom/"+v.Name)
		}
	}
	return out
}

// usedByNetwork is what the daemon lists as using a network: the
// instances and profiles with a NIC on it.
func (s *Server) usedByNetwork(name string) []string {
	return s.usedByDevices(func(d map[string]string, _ bool) bool {
		return d["type"] == "nic" && (d["network"] == name || d["parent"] == name)
	})
}

// usedByDevices lists the instances (by their expanded devices) and the
// profiles with a device that uses: their used_by part; s.mu held.
func (s *Server) usedByDevices(uses func(d map[string]string, instance bool) bool) []string {
	out := []string{}
	has := func(devs map[string]map[string]string, instance bool) bool {
		for _, d := range devs {
			if uses(d, instance) {
				return true
			}
		}
		return false
	}
	for _, n := range slices.Sorted(maps.Keys(s.instances)) {
		if _, devs := s.expanded(s.instances[n]); has(devs, true) {
			out = append(out, "/1.0/instances/"+n)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(s.profiles)) {
		if has(s.profiles[n].Devices, false) {
			out = append(out, "/1.0/profiles/"+n)
		}
	}
	return out
}

// listPools is GET /1.0/storage-pools: Options.Pools.
func (s *Server) listPools(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var full []any
	var urls []string
	for _, p := range s.opts.Pools {
		full = append(full, s.poolAPI(p))
		urls = append(urls, "/1.0/storage-pools/"+p)
	}
	if recursive(r) {
		syncOK(w, full)
		return
	}
	syncOK(w, urls)
}

// volume finds the volume and calls fn with s.mu held.
func (s *Server) volume(fn func(http.ResponseWriter, *http.Request, *volume)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.hasPool(r.PathValue("pool")) {
			fail(w, http.StatusNotFound, "Storage pool not found")
			return
		}
		v := s.volumes[r.PathValue("pool")+"/"+r.PathValue("name")]
		if v == nil {
			fail(w, http.StatusNotFound, "Storage volume not found")
			return
		}
		fn(w, r, v)
	}
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.hasPool(r.PathValue("pool")) {
		fail(w, http.StatusNotFound, "Storage pool not found")
		return
	}
	var out []any
	for _, k := range slices.Sorted(maps.Keys(s.volumes)) {
		v := s.volumes[k]
		if v.Pool != r.PathValue("pool") {
			continue
		}
		if recursive(r) {
			out = append(out, s.volAPI(v))
		} else {
			out = append(out, "/1.0/storage-pools/"+v.Pool+"/volumes/custom/"+v.Name)
		}
	}
	if out == nil {
		out = []any{}
	}
	syncOK(w, out)
}

// createVolume: a JSON body makes an empty volume; a raw body with
// X-Incus-name and X-Incus-type imports a file (an ISO), whose size
// becomes the volume's.
func (s *Server) createVolume(w http.ResponseWriter, r *http.Request) {
	p := r.PathValue("pool")
	if !s.hasPool(p) {
		fail(w, http.StatusNotFound, "Storage pool not found")
		return
	}
	v := &volume{Pool: p, Config: map[string]string{}}
	iso := r.Header.Get("Content-Type") == "application/octet-stream"
	if iso {
		v.Name, v.ContentType = r.Header.Get("X-Incus-name"), orStr(r.Header.Get("X-Incus-type"), "iso")
	} else {
		var req struct {
			Name        string            `json:"name"`
			ContentType string            `json:"content_type"`
			Description string            `json:"description"`
			Config      map[string]string `json:"config"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			fail(w, http.StatusBadRequest, "bad request: %v", err)
			return
		}
		v.Name, v.ContentType, v.Description, v.Config = req.Name, orStr(req.ContentType, "filesystem"), req.Description, orEmpty(req.Config)
	}
	if strings.Contains(v.Name, "/") || v.Name == "" {
		fail(w, http.StatusBadRequest, "Invalid volume name %q", v.Name)
		return
	}
	s.mu.Lock()
	if s.volumes[p+"/"+v.Name] != nil {
		s.mu.Unlock()
		fail(w, http.StatusConflict, "Volume by that name already exists")
		return
	}
	s.volumes[p+"/"+v.Name] = v
	s.mu.Unlock()
	if iso {
		// The upload is read before the answer (it is the request body).
		if err := os.MkdirAll(filepath.Join(s.dir, "storage", p), 0o755); err != nil {
			failErr(w, err)
			return
		}
		f, err := os.Create(s.volPath(p, v.Name, ".iso"))
		if err == nil {
			var n int64
			n, err = io.Copy(f, r.Body)
			f.Close()
			v.Config["size"] = strconv.FormatInt(n, 10)
		}
		if err != nil {
			s.mu.Lock()
			delete(s.volumes, p+"/"+v.Name)
			s.mu.Unlock()
			fail(w, http.StatusBadRequest, "Failed importing the volume: %v", err)
			return
		}
	}
	s.ops.async(w, s.ops.start("task", "Creating storage volume", map[string][]string{"storage_volumes": {"/1.0/storage-pools/" + p + "/volumes/custom/" + v.Name}},
		func(*operation) (map[string]any, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if v.ContentType == "filesystem" {
				if err := os.MkdirAll(s.volDir(v.Pool, v.Name), 0o755); err != nil {
					return nil, err
				}
			}
			return nil, s.saveVolume(v)
		}))
}

func (s *Server) getNetwork(w http.ResponseWriter, r *http.Request) {
	for _, n := range s.networks() {
		if n["name"] == r.PathValue("name") {
			syncOK(w, n)
			return
		}
	}
	fail(w, http.StatusNotFound, "Network not found")
}

// networks are the lab's managed network and, unmanaged as the daemon
// reports the host's interfaces, its loopback (where its addresses are)
// and the bridge to the LAN (Options.LAN).
func (s *Server) networks() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	nets := []map[string]any{
		{"name": s.opts.Network, "type": "bridge", "managed": true, "status": "Created",
			"config": map[string]string{"ipv4.address": "127.0.1.254/8", "ipv4.nat": "true", "ipv6.address": "none"}},
		{"name": "lo", "type": "loopback", "managed": false, "config": map[string]string{}},
	}
	// A managed network named as an interface hides the interface, as
	// the daemon lists each name once.
	if s.opts.LAN != "" && s.opts.LANPhysical != s.opts.LAN {
		nets = append(nets, s.lanNetwork())
	}
	if s.opts.LAN != "" && s.opts.LANPhysical != "" {
		nets = append(nets, s.lanPhysicalNetwork())
	}
	for _, n := range nets {
		n["used_by"] = s.usedByNetwork(n["name"].(string))
	}
	return nets
}

// listNetworks is GET /1.0/networks, sorted by name as the daemon's.
func (s *Server) listNetworks(w http.ResponseWriter, r *http.Request) {
	nets := s.networks()
	slices.SortFunc(nets, func(a, b map[string]any) int { return strings.Compare(a["name"].(string), b["name"].(string)) })
	if recursive(r) {
		syncOK(w, nets)
		return
	}
	var out []string
	for _, n := range nets {
		out = append(out, "/1.0/networks/"+n["name"].(string))
	}
	syncOK(w, out)
}

// getLeases: the lab's network hands each running instance with a NIC on
// it its loopback address.
func (s *Server) getLeases(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("name") != s.opts.Network {
		fail(w, http.StatusNotFound, "Network not found")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []map[string]string{{"hostname": s.opts.Network + ".gw", "address": "127.0.1.254", "type": "gateway"}}
	for _, n := range slices.Sorted(maps.Keys(s.instances)) {
		in := s.instances[n]
		cfg, devs := s.expanded(in)
		for dev, d := range devs {
			if d["type"] == "nic" && (d["network"] == s.opts.Network || d["parent"] == s.opts.Network) && in.Running {
				out = append(out, map[string]string{"hostname": n, "hwaddr": orStr(d["hwaddr"], cfg["volatile."+dev+".hwaddr"]),
					"address": in.IPv4, "type": "dynamic"})
			}
		}
	}
	syncOK(w, out)
}

// FilesystemVolume makes the custom filesystem volume pool/name when
// absent (as `incus storage volume create`) and returns the directory
// holding its files: for a lab's seed (a host's data volume) and tests.
func (s *Server) FilesystemVolume(pool, name string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.hasPool(pool) {
		return "", errf(http.StatusNotFound, "Storage pool not found")
	}
	v := s.volumes[pool+"/"+name]
	if v == nil {
		v = &volume{Pool: pool, Name: name, ContentType: "filesystem", Config: map[string]string{}}
		if err := s.saveVolume(v); err != nil {
			return "", err
		}
		s.volumes[pool+"/"+name] = v
	} else if v.ContentType != "filesystem" {
		return "", errf(http.StatusBadRequest, "Volume %q of pool %q is a %s volume, not a filesystem", name, pool, v.ContentType)
	}
	dir := s.volDir(pool, name)
	return dir, os.MkdirAll(dir, 0o755)
}
