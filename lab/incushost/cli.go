package incushost

import (
	"net/http"
)

// What the incus CLI asks beyond what the provider does, for the
// everyday commands a person looks at a host with (incus list, info,
// storage volume list): the lab has no backups, and a pool's volumes are
// its custom ones (the daemon lists the instances' root volumes too).
func (s *Server) cliRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /1.0/instances/{name}/backups", s.listBackups)
	mux.HandleFunc("GET /1.0/storage-pools/{pool}/volumes", s.listVolumes) // every type's: the custom ones
}

// listBackups: an instance's backups, none (incus info reads them).
func (s *Server) listBackups(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.requested(w, r); !ok {
		return
	}
	if recursive(r) {
		syncOK(w, []any{})
		return
	}
	syncOK(w, []string{})
}
