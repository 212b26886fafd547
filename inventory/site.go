package inventory

import (
	"cmp"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Site is what the runbook needs to know of the host: examples/homelab's
// variables that name the host's things, as Choose picked them. TODO
// holds the variables Choose could not know, each with what to set.
type Site struct {
	StoragePool string `json:"storage_pool"`
	DataPool    string `json:"data_pool"`
	DataVolume  string `json:"data_volume"`
	LANBridge   string `json:"lan_bridge"`
	// LANNetwork is IncusOS's managed physical network on the LAN (its
	// direct-attach tutorial), which the NICs then name: lan_network.
	LANNetwork   string `json:"lan_network,omitempty"`
	IGPUPCI      string `json:"igpu_pci"`
	ServicesVM   string `json:"services_vm"`
	MatrixVM     string `json:"matrix_vm"`
	K3sVM        string `json:"k3s_vm"`
	NodeCPU      int    `json:"node_cpu"`
	NodeMemory   string `json:"node_memory"`
	NodeMAC      string `json:"node_mac"`
	RehearsalMAC string `json:"rehearsal_mac"`
	// MatrixDomain and MatrixURL are Synapse's server_name and
	// public_baseurl, when its homeserver.yaml could be read.
	MatrixDomain string `json:"matrix_domain,omitempty"`
	MatrixURL    string `json:"matrix_url,omitempty"`
	// Apps are the applications' releases and install facts.
	Apps AppsSite `json:"apps"`
	// RetainUntil is when the old VMs may be deleted: two months on.
	RetainUntil string `json:"retain_old_vms_until"`
	// Template is the runbook the site is for: the names of its
	// variables and steps.
	Template *Template `json:"-"`
	// TODO: variable -> what only the user can say, for the variables
	// left at the runbook's defaults.
	TODO map[string]string `json:"todo"`
	// Omit: step (TYPE.NAME) -> why the runbook leaves it out: the steps
	// of an optional role (optionalRoles) no instance has.
	Omit map[string]string `json:"omit,omitempty"`
}

// optionalRoles are the roles a host may lack: nothing else in the move
// needs them, so their steps are left out rather than set by hand.
var optionalRoles = map[string]bool{RoleK3s: true}

// Omits says whether the runbook leaves out the role's steps (Omit holds
// its stop step): the one answer Check and the writing of the runbook
// both go by.
func (s *Site) Omits(role string) bool {
	_, ok := s.Omit[s.Template.stopStep(role)]
	return ok
}

// missingRole is what a host without the role's VM shows.
func missingRole(role string) string {
	return "no instance runs " + roleWhat(role) + " or is named after it"
}

// RoleVM is the instance Choose gave a role ("" when none).
func (s *Site) RoleVM(role string) string {
	switch role {
	case RoleServices:
		return s.ServicesVM
	case RoleMatrix:
		return s.MatrixVM
	case RoleK3s:
		return s.K3sVM
	}
	return ""
}

// ErrNoInstances: the host has no instance to move.
var ErrNoInstances = errors.New("the host has no instances: there is nothing to migrate (is it the right host, and the right project?)")

// Choose maps the host onto the runbook's variables; every value it had
// to pick among several, or could not see, is a finding of severity
// Guess. now dates retain_old_vms_until.
func Choose(t *Template, h *Host, now time.Time) (Site, []Finding, error) {
	if len(h.Instances) == 0 {
		return Site{}, nil, ErrNoInstances
	}
	s := Site{Template: t, TODO: map[string]string{}}
	vn := t.Name
	var fs []Finding
	guess := func(v Var, seen, do string) {
		variable := vn(v)
		fs = append(fs, Finding{Code: CodeGuess, Severity: Guess, Subject: "variable " + variable, Seen: seen, Do: do})
	}

	// The old VMs: by what runs in them, else by name.
	taken := map[string]bool{}
	for _, role := range Roles {
		name, how := roleVM(h, role, taken)
		if name == "" {
			continue
		}
		taken[name] = true
		switch role {
		case RoleServices:
			s.ServicesVM = name
		case RoleMatrix:
			s.MatrixVM = name
		case RoleK3s:
			s.K3sVM = name
		}
		if how != "" {
			guess(RoleVar(role), fmt.Sprintf("%s: %s", name, how), "Check that "+name+" is the old VM of "+roleWhat(role)+"; set "+vn(RoleVar(role))+" in site.auto.hcl otherwise.")
		}
	}

	for _, role := range Roles {
		if s.RoleVM(role) == "" && optionalRoles[role] {
			if s.Omit == nil {
				s.Omit = map[string]string{}
			}
			for _, st := range t.roleSteps(role) {
				s.Omit[st] = missingRole(role)
			}
		}
	}

	// The pool of the VMs' disks and the ISO: where the old VMs' roots are.
	roots := map[string]int{}
	for _, i := range h.Instances {
		if i.RootPool != "" && taken[i.Name] {
			roots[i.RootPool]++
		}
	}
	switch {
	case len(roots) > 0:
		s.StoragePool = maxKey(roots)
		if len(roots) > 1 {
			guess(VarStoragePool, fmt.Sprintf("the old VMs' root disks are in %d pools; %s holds most", len(roots), s.StoragePool), "Set "+vn(VarStoragePool)+" to the pool the Talos VM's disks should go to.")
		}
	case h.DefaultPool != "":
		s.StoragePool = h.DefaultPool
	case len(h.Pools) > 0:
		s.StoragePool = h.Pools[0].Name
		guess(VarStoragePool, "no root disk names a pool; "+s.StoragePool+" is the first", "Set "+vn(VarStoragePool)+" to the pool the Talos VM's disks should go to.")
	}

	// The data volume: a filesystem volume the services VM has, else one
	// named data, else the only one.
	s.DataPool, s.DataVolume = dataVolume(h, s.ServicesVM, func(seen, do string) { guess(VarDataVolume, seen, do) }, "Set "+vn(VarDataPool)+" and "+vn(VarDataVolume)+" to the volume with the photos, files and recordings.")

	// The LAN: IncusOS's managed physical network (its direct-attach
	// tutorial), an unmanaged bridge (IncusOS makes one of each
	// interface), else a managed bridge that does not NAT.
	var bridges, plain, physical []string
	for _, n := range h.Networks {
		switch {
		case n.Type == "physical" && n.Managed:
			physical = append(physical, n.Name)
		case n.Type == "bridge" && !n.Managed:
			bridges = append(bridges, n.Name)
		case n.Type == "bridge" && n.Managed && !n.NAT:
			plain = append(plain, n.Name)
		}
	}
	switch {
	case len(bridges) > 0:
		s.LANBridge = bridges[0]
		if len(bridges) > 1 {
			guess(VarLANBridge, "the host has several bridges of its own: "+strings.Join(bridges, ", "), "Set "+vn(VarLANBridge)+" to the one on the LAN the router serves.")
		}
	case len(plain) > 0:
		s.LANBridge = plain[0]
		guess(VarLANBridge, "no bridge of the host's own interfaces; "+s.LANBridge+" is a managed bridge without NAT", "Check that "+s.LANBridge+" is on the LAN (its DHCP is then the router's, not Incus'), or make a bridge of the LAN interface and set "+vn(VarLANBridge)+".")
	}

	if len(physical) > 0 {
		s.LANNetwork = physical[0]
		if len(physical) > 1 {
			guess(VarLANNetwork, "the host has several managed physical networks: "+strings.Join(physical, ", "), "Set "+vn(VarLANNetwork)+" to the one on the LAN the router serves.")
		}
	}

	// The iGPU: an Intel one (the i915 extension), else the first.
	if g := pickGPU(h); g != nil {
		s.IGPUPCI = g.PCIAddress
		if len(h.GPUs) > 1 {
			guess(VarIGPUPCI, fmt.Sprintf("the host has %d GPUs; %s (%s %s) was taken", len(h.GPUs), g.PCIAddress, g.Vendor, g.Product), "Set "+vn(VarIGPUPCI)+" to the PCI address of the GPU the apps should decode video on.")
		}
	}

	// The node's size: the host less room for itself (the old VMs'
	// share is freed when they stop).
	s.NodeCPU = max(h.CPUs-2, 2)
	mem := max(h.Memory*3/4/gib, 4)
	s.NodeMemory = fmt.Sprintf("%dGiB", mem)
	if h.CPUs > 0 {
		guess(VarNodeCPU, fmt.Sprintf("%s = %d and %s = %q: the host has %d CPU threads and %s, less room for IncusOS", vn(VarNodeCPU), s.NodeCPU, vn(VarNodeMemory), s.NodeMemory, h.CPUs, SizeString(h.Memory)), "Change them if the host runs more than the Talos VM after the move.")
	}

	// MACs no instance uses, in Incus's own prefix.
	used := map[string]bool{}
	for _, i := range h.Instances {
		for _, d := range i.Devices {
			if d["hwaddr"] != "" {
				used[strings.ToLower(d["hwaddr"])] = true
			}
		}
	}
	s.NodeMAC, s.RehearsalMAC = freshMAC(used), freshMAC(used)
	s.TODO[vn(VarNodeAddress)] = "the address your router's DHCP reserves for " + vn(VarNodeMAC) + " " + s.NodeMAC + " (Incus cannot see it: Talos runs no agent)"
	s.TODO[vn(VarRehearsalAddress)] = "the address your router reserves for " + vn(VarRehearsalMAC) + " " + s.RehearsalMAC

	// The homeserver's names, from its own configuration.
	if m := h.Instance(s.MatrixVM); m != nil {
		for _, a := range m.Apps {
			if a.Name == "Synapse" && a.Detail["server_name"] != "" {
				s.MatrixDomain = a.Detail["server_name"]
				s.MatrixURL = strings.TrimSuffix(cmp.Or(a.Detail["public_baseurl"], "https://"+s.MatrixDomain), "/")
			}
		}
	}
	if s.MatrixDomain == "" {
		s.TODO[vn(VarMatrixDomain)] = "the homeserver's public name (Synapse's server_name)"
		s.TODO[vn(VarMatrixURL)] = "where it answers from the internet, https://"
	}
	s.TODO[vn(VarMatrixTLSCert)] = "the certificate (with its chain) the ingress serves for the homeserver, age-encrypted (migrate secrets encrypt); " + vn(VarMatrixTLSKey) + " its key"
	s.TODO[vn(VarForgeURL)] = "the Gitea/Forgejo instance the CI runner registers with"
	chooseApps(h, &s)
	s.RetainUntil = now.AddDate(0, 2, 0).Format(time.DateOnly)
	fs = append(fs, Finding{Code: CodeTODO, Severity: Guess, Subject: "site.auto.hcl",
		Seen: "the host cannot tell " + strings.Join(sortedKeys(s.TODO), ", ") + ": main.hcl's defaults (its examples) stand for them",
		Do:   "Set each in site.auto.hcl (its TODO lines say what it is) before a run: a plan works without them, a run would reach the example's addresses."})
	return s, fs, nil
}

func roleWhat(role string) string {
	switch role {
	case RoleServices:
		return "the home services (Samba, Jellyfin, Frigate)"
	case RoleMatrix:
		return "the Matrix homeserver (Synapse)"
	}
	return "the k3s playground"
}

// roleVM is the instance of a role: the one running most of its apps,
// else the one named after it; how says what it rests on when that is a
// guess ("" when its files showed it).
func roleVM(h *Host, role string, taken map[string]bool) (name, how string) {
	best, bestN := "", 0
	for _, i := range h.Instances {
		n := 0
		for _, a := range i.Apps {
			if a.Role == role {
				n++
			}
		}
		if n > bestN && !taken[i.Name] {
			best, bestN = i.Name, n
		}
	}
	if best != "" {
		return best, ""
	}
	for _, i := range h.Instances {
		if !taken[i.Name] && strings.Contains(strings.ToLower(i.Name), role) {
			return i.Name, "by its name only (its files could not show what it runs)"
		}
	}
	return "", ""
}

func dataVolume(h *Host, servicesVM string, guess func(seen, do string), set string) (pool, name string) {
	var fsVols []Volume
	for _, p := range h.Pools {
		for _, v := range p.Volumes {
			if v.ContentType == "filesystem" || v.ContentType == "" {
				fsVols = append(fsVols, v)
			}
		}
	}
	if i := h.Instance(servicesVM); i != nil {
		for _, dn := range sortedKeys(i.Devices) {
			d := i.Devices[dn]
			if d["type"] == "disk" && d["pool"] != "" && d["source"] != "" && d["path"] != "/" {
				if v := h.Volume(d["pool"], d["source"]); v != nil && v.ContentType != "block" && v.ContentType != "iso" {
					return v.Pool, v.Name
				}
			}
		}
	}
	for _, v := range fsVols {
		if v.Name == "data" {
			if len(fsVols) > 1 {
				guess(fmt.Sprintf("%d filesystem volumes; %s/%s by its name", len(fsVols), v.Pool, v.Name), set)
			}
			return v.Pool, v.Name
		}
	}
	if len(fsVols) > 0 {
		v := fsVols[0]
		guess(fmt.Sprintf("no volume is attached to %s; %s/%s is the first of %d filesystem volumes", cmp.Or(servicesVM, "the services VM"), v.Pool, v.Name, len(fsVols)), set)
		return v.Pool, v.Name
	}
	return "", ""
}

func pickGPU(h *Host) *GPUCard {
	for i := range h.GPUs {
		if intel(&h.GPUs[i]) {
			return &h.GPUs[i]
		}
	}
	if len(h.GPUs) > 0 {
		return &h.GPUs[0]
	}
	return nil
}

func intel(g *GPUCard) bool {
	return g.VendorID == "8086" || g.Driver == "i915" || g.Driver == "xe" || strings.Contains(g.Vendor, "Intel")
}

// freshMAC is a random MAC in Incus's prefix (10:66:6a) that used lacks;
// it is added to used.
func freshMAC(used map[string]bool) string {
	for {
		b := make([]byte, 3)
		rand.Read(b)
		m := fmt.Sprintf("10:66:6a:%02x:%02x:%02x", b[0], b[1], b[2])
		if !used[m] {
			used[m] = true
			return m
		}
	}
}

func maxKey(m map[string]int) string {
	keys := sortedKeys(m)
	return slices.MaxFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(m[a], m[b]), strings.Compare(b, a)) })
}

const gib = 1 << 30

// SizeString says a size in bytes as Incus does: "24GiB", "1.5TiB", "300MiB".
func SizeString(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	f, u := float64(n), 0
	for f >= 1024 && u < len(units)-1 {
		f /= 1024
		u++
	}
	if f == float64(int64(f)) {
		return fmt.Sprintf("%d%s", int64(f), units[u])
	}
	return fmt.Sprintf("%.1f%s", f, units[u])
}
