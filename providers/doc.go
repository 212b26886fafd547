// Package providers defines the interface between the engine and the things
// that change the world: Incus, Talos, Helm and the local machine. Each
// concrete provider lives in a subpackage (providers/local, ...) and is
// registered explicitly by cmd/migrate, either built in (local, incus) or
// as a plugin program of its own (talos, helm: see providers/plugin); the
// engine knows them only through Interface. Package providers/sdk is the
// skeleton every provider is built on: typed step handlers, with the gate,
// decoding and scrubbing done once for all of them.
//
// Requests and responses are structs, so fields can be added without
// breaking implementers. Every call takes a context and must honour its
// cancellation.
package providers
