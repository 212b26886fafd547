// Package etcdtest starts real etcd clusters for tests: one or three
// members on free loopback ports, each in a temporary data directory,
// optionally with TLS (certificates made here, a client certificate
// required) and authentication (a root user and a "migrate" user whose
// role may read and write the "migrate/" prefix). Every member is killed
// when the test ends.
//
// The etcd binary is $MIGRATE_ETCD_BIN, or the newest
// ~/.cache/migrate/kube-v*/etcd (lab/kubecp/build-kube.sh builds it; `make
// services` runs that). Without one the test fails saying so.
package etcdtest
