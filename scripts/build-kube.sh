#!/usr/bin/env bash
# build-kube.sh: build kube-apiserver and kube-controller-manager from the Go
# module proxy (no prebuilt binaries can be downloaded here), once, into a
# cache outside the checkout. Prints the directory holding the binaries.
#
# k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them
# with ./staging paths; a consumer must replace each with its release.
set -euo pipefail
version=${KUBE_VERSION:-v1.37.2}
minor=${version#v1.}; minor=${minor%%.*}
cache=${MIGRATE_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/migrate}/kube-$version
export GOTOOLCHAIN=local GOFLAGS=-mod=mod

if [ -x "$cache/kube-apiserver" ] && [ -x "$cache/kube-controller-manager" ]; then
	echo "$cache"
	exit 0
fi
mkdir -p "$cache"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
echo "build-kube: building Kubernetes $version (a few minutes, once)" >&2
# quiet CMD...: its output (module downloads, compiler) goes to a log,
# shown only if it fails.
quiet() {
	"$@" >>"$cache/build.log" 2>&1 || { local rc=$?; cat "$cache/build.log" >&2; echo "build-kube: failed: $*" >&2; return $rc; }
}
: >"$cache/build.log"

cat >go.mod <<MOD
module migrate.local/kubebuild

go 1.26.8

require k8s.io/kubernetes $version
MOD
cat >tools.go <<'TOOLS'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
TOOLS
# The staging modules k8s.io/kubernetes requires at v0.0.0, from its own
# go.mod, each replaced by the release that matches.
go mod download -json "k8s.io/kubernetes@$version" >meta.json 2>>"$cache/build.log"
gomod=$(sed -n 's/.*"GoMod": "\(.*\)",/\1/p' meta.json)
awk '/^\t?k8s\.io\/[a-z0-9-]+ v0\.0\.0$/ || /^require k8s\.io\/[a-z0-9-]+ v0\.0\.0$/ {print $(NF-1)}' "$gomod" | sort -u >staging.txt
while read -r m; do
	echo "replace $m v0.0.0 => $m v0.$minor.${version##*.}" >>go.mod
done <staging.txt
# Keep its go and godebug lines.
grep -E '^godebug' "$gomod" >>go.mod || true
quiet go mod tidy
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
quiet go build -trimpath -ldflags "$ldflags" -o "$cache/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
quiet go build -trimpath -ldflags "$ldflags" -o "$cache/kube-controller-manager" k8s.io/kubernetes/cmd/kube-controller-manager
echo "$cache"
