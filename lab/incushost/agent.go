package incushost

import (
	"fmt"
	"net/http"
)

// GuestAgent plays the Incus agent of a VM in the files API, as a
// compromised guest can: asked for a path (as the client sent it), it
// answers a directory listing, names exactly as they will be returned,
// and true; or false, and the guest's files answer. The daemon passes a
// VM's listing on as its agent gave it (names with "/" or "..", a
// directory that contains itself, a million names), while for a
// container it reads the directory itself: only a VM can answer so.
type GuestAgent func(path string) (names []string, ok bool)

// SetGuestAgent makes the VM name's agent answer through a; nil gives
// the files back to the guest's own. A container has no agent: refused.
func (s *Server) SetGuestAgent(name string, a GuestAgent) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, err := s.lookup(name)
	if err != nil {
		return err
	}
	if in.Type != "virtual-machine" {
		return fmt.Errorf("incushost: %s is a %s: only a VM's files are answered by a guest agent", name, in.Type)
	}
	in.agent = a
	return nil
}

// agentListing is what the VM's agent answers for p instead of its
// files, if it answers.
func (s *Server) agentListing(in *instance, p string) ([]string, bool) {
	s.mu.Lock()
	a := in.agent
	s.mu.Unlock()
	if a == nil {
		return nil, false
	}
	return a(p)
}

// serveListing answers a directory listing the agent made up.
func serveListing(w http.ResponseWriter, r *http.Request, names []string) {
	h := w.Header()
	h.Set("X-Incus-Uid", "0")
	h.Set("X-Incus-Gid", "0")
	h.Set("X-Incus-Mode", "0755")
	h.Set("X-Incus-Type", "directory")
	if r.Method == http.MethodHead {
		return
	}
	if names == nil {
		names = []string{}
	}
	syncOK(w, names)
}
