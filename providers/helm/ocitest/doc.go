// Package ocitest starts a real OCI registry for tests: Debian's
// docker-registry (the distribution v2 registry, which `make services`
// installs with scripts/registry-up.sh), one per test, on a free
// loopback port with its own storage directory and configuration;
// optionally with basic authentication (an htpasswd file, bcrypt, as the
// registry requires) and TLS (a CA and a certificate for 127.0.0.1 made
// here). Charts are pushed to it with Helm's own registry client, as
// helm push pushes them. The registry is stopped when the test ends.
//
// The binary is $MIGRATE_REGISTRY_BIN, else docker-registry on PATH;
// without one the test fails saying how to install it.
package ocitest
