package local

// WithoutPIDNamespace makes p run commands the way it does without the
// privilege to make a PID namespace: in their own process group.
func WithoutPIDNamespace(p *Provider) *Provider {
	p.noPIDNS.Store(true)
	return p
}

// UsesPIDNamespace reports whether p still makes PID namespaces.
func UsesPIDNamespace(p *Provider) bool { return !p.noPIDNS.Load() }
