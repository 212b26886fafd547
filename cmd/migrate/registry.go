package main

import (
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/helm/helmschema"
	"github.com/homelab-migrate/migrate/providers/incus"
	"github.com/homelab-migrate/migrate/providers/local"
	"github.com/homelab-migrate/migrate/providers/plugin"
	"github.com/homelab-migrate/migrate/providers/talos/talosschema"
)

// registry lists the providers: the one place to add one. local and incus
// are built in (small); talos and helm run as plugin programs beside
// migrate, because their libraries would otherwise weigh on every migrate
// process (see providers/plugin). Their schemas are compiled in, so
// validate, plan of other providers' steps, graph and status start none.
func registry() map[string]providers.Factory {
	r := map[string]providers.Factory{
		"local": func() providers.Interface { return local.New() },
		"incus": incus.Factory,
	}
	for _, p := range pluginPrograms {
		r[p.Name] = plugin.Factory(p)
	}
	return r
}

// The sha256 of each provider program, recorded by make build
// (-ldflags -X main.talosProgramSum=...); empty in a build by go build or
// go run, which then runs programs from $MIGRATE_PLUGIN_DIR only,
// unverified (see plugin.Find).
var talosProgramSum, helmProgramSum string

// pluginPrograms are the providers that run as programs of their own.
var pluginPrograms = []plugin.Program{
	{Name: talosschema.TypeName, Command: "migrate-provider-talos", Sum: talosProgramSum, Schema: talosschema.Schema, Env: []string{providers.AgeIdentityEnv}},
	{Name: helmschema.TypeName, Command: "migrate-provider-helm", Sum: helmProgramSum, Schema: helmschema.Schema, Env: []string{providers.AgeIdentityEnv}},
}
