package incushost

import (
	"encoding/json"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// profile is a set of config keys and devices instances take before their
// own; "default" holds the root disk. Kept in Dir/profiles/NAME.json.
type profile struct {
	Name        string                       `json:"name"`
	Description string                       `json:"description"`
	Config      map[string]string            `json:"config"`
	Devices     map[string]map[string]string `json:"devices"`
}

func defaultProfile(pool string) *profile {
	return &profile{Name: "default", Description: "Default Incus profile", Config: map[string]string{},
		Devices: map[string]map[string]string{"root": {"type": "disk", "path": "/", "pool": pool}}}
}

func (s *Server) loadProfiles() error {
	s.profiles = map[string]*profile{"default": defaultProfile(s.defaultPool())}
	files, _ := filepath.Glob(filepath.Join(s.dir, "profiles", "*.json"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		p := &profile{}
		if err := json.Unmarshal(b, p); err != nil {
			return err
		}
		s.profiles[p.Name] = p
	}
	return nil
}

func (s *Server) saveProfile(p *profile) error {
	if err := os.MkdirAll(filepath.Join(s.dir, "profiles"), 0o755); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(p, "", "  ")
	return os.WriteFile(filepath.Join(s.dir, "profiles", p.Name+".json"), b, 0o644)
}

func (p *profile) etag() string {
	b, _ := json.Marshal([]any{p.Config, p.Description, p.Devices})
	return fingerprint(b)
}

// expanded is the instance's config and devices over its profiles'; the
// caller holds s.mu.
func (s *Server) expanded(in *instance) (map[string]string, map[string]map[string]string) {
	cfg, devs := map[string]string{}, map[string]map[string]string{}
	for _, name := range in.Profiles {
		if p := s.profiles[name]; p != nil {
			maps.Copy(cfg, p.Config)
			maps.Copy(devs, p.Devices)
		}
	}
	maps.Copy(cfg, in.Config)
	maps.Copy(devs, in.Devices)
	return cfg, devs
}

// usedByProfile lists the instances of a profile; the caller holds s.mu.
func (s *Server) usedByProfile(name string) []string {
	out := []string{}
	for _, n := range slices.Sorted(maps.Keys(s.instances)) {
		if slices.Contains(s.instances[n].Profiles, name) {
			out = append(out, "/1.0/instances/"+n)
		}
	}
	return out
}

func (s *Server) profileRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /1.0/profiles", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		var out []any
		for _, n := range slices.Sorted(maps.Keys(s.profiles)) {
			if recursive(r) {
				out = append(out, s.profileAPI(s.profiles[n]))
			} else {
				out = append(out, "/1.0/profiles/"+n)
			}
		}
		syncOK(w, out)
	})
	mux.HandleFunc("POST /1.0/profiles", func(w http.ResponseWriter, r *http.Request) {
		var p profile
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil || !nameRE.MatchString(p.Name) {
			fail(w, http.StatusBadRequest, "Invalid profile (a name of letters, digits and dashes is needed)")
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.profiles[p.Name] != nil {
			fail(w, http.StatusConflict, "Error inserting %q into database: The profile already exists", p.Name)
			return
		}
		p.Config, p.Devices = orEmpty(p.Config), orEmptyDevices(p.Devices)
		if err := s.saveProfile(&p); err != nil {
			failErr(w, err)
			return
		}
		s.profiles[p.Name] = &p
		syncOK(w, map[string]any{})
	})
	mux.HandleFunc("GET /1.0/profiles/{name}", s.profile(func(w http.ResponseWriter, r *http.Request, p *profile) {
		w.Header().Set("ETag", `"`+p.etag()+`"`)
		syncOK(w, s.profileAPI(p))
	}))
	update := s.profile(func(w http.ResponseWriter, r *http.Request, p *profile) {
		var req profile
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			fail(w, http.StatusBadRequest, "bad request: %v", err)
			return
		}
		if m := strings.Trim(r.Header.Get("If-Match"), `"`); m != "" && m != p.etag() {
			fail(w, http.StatusPreconditionFailed, "ETag doesn't match: %s vs %s", m, p.etag())
			return
		}
		if r.Method == http.MethodPatch {
			maps.Copy(p.Config, req.Config)
			maps.Copy(p.Devices, req.Devices)
		} else {
			p.Config, p.Devices, p.Description = orEmpty(req.Config), orEmptyDevices(req.Devices), req.Description
		}
		if err := s.saveProfile(p); err != nil {
			failErr(w, err)
			return
		}
		syncOK(w, map[string]any{})
	})
	mux.HandleFunc("PUT /1.0/profiles/{name}", update)
	mux.HandleFunc("PATCH /1.0/profiles/{name}", update)
	mux.HandleFunc("DELETE /1.0/profiles/{name}", s.profile(func(w http.ResponseWriter, r *http.Request, p *profile) {
		if p.Name == "default" {
			fail(w, http.StatusForbidden, "The \"default\" profile cannot be deleted")
			return
		}
		if u := s.usedByProfile(p.Name); len(u) > 0 {
			fail(w, http.StatusBadRequest, "Profile is currently in use")
			return
		}
		delete(s.profiles, p.Name)
		_ = os.Remove(filepath.Join(s.dir, "profiles", p.Name+".json"))
		syncOK(w, map[string]any{})
	}))
}

func (s *Server) profileAPI(p *profile) map[string]any {
	return map[string]any{"name": p.Name, "description": p.Description, "config": p.Config, "devices": p.Devices,
		"used_by": s.usedByProfile(p.Name), "project": "default"}
}

// profile finds the profile and calls fn with s.mu held.
func (s *Server) profile(fn func(http.ResponseWriter, *http.Request, *profile)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		p := s.profiles[r.PathValue("name")]
		if p == nil {
			fail(w, http.StatusNotFound, "Profile not found")
			return
		}
		fn(w, r, p)
	}
}
