package incushost

import (
	"maps"
	"net/http"
	"slices"
)

// What the incus CLI asks beyond what the provider does, for the
// everyday commands a person looks at a host with (incus list, info,
// storage volume list): the lab has no backups, and a pool's volumes are
// its custom ones (the daemon lists the instances' root volumes too).
func (s *Server) cliRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /1.0/instances/{name}/backups", s.listBackups)
	mux.HandleFunc("GET /1.0/storage-pools/{pool}/volumes", s.listAllVolumes)
}

// listBackups: an instance's backups, none (incus info reads them).
func (s *Server) listBackups(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	_, err := s.lookup(r.PathValue("name"))
	s.mu.Unlock()
	if err != nil {
		failErr(w, err)
		return
	}
	if recursive(r) {
		syncOK(w, []any{})
		return
	}
	syncOK(w, []string{})
}

// listAllVolumes is GET /1.0/storage-pools/{pool}/volumes: every type's
// volumes, here the custom ones.
func (s *Server) listAllVolumes(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.hasPool(r.PathValue("pool")) {
		fail(w, http.StatusNotFound, "Storage pool not found")
		return
	}
	out := []any{}
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
	syncOK(w, out)
}
