#!/usr/bin/env bash
# Build Kubernetes' own control plane (kube-apiserver, kube-controller-manager, kube-scheduler)
# of one pinned release, and etcd, from Go modules, into the user cache:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/pets-operator/control-plane/k8s-<K8S>-etcd-<ETCD>/bin/
#
# The Go build and module caches live next to it (.../pets-operator/go/{build,mod}), so the
# build happens once per pin: a warm call only checks the binaries and the stamp file and
# returns in well under a second, without needing Go at all. The last line on stdout is the
# bin directory; everything else goes to stderr.
#
#   hack/control_plane.sh              # build if needed, print the bin directory
#   hack/control_plane.sh --versions   # print the pins (kubernetes=, etcd=) and go=<minimum>; build nothing
#   hack/control_plane.sh --check      # print the bin directory if built, else exit 3; build nothing
#
# How: k8s.io/kubernetes cannot be built as a plain dependency, because its go.mod replaces
# every k8s.io/<staging> module (k8s.io/api, apimachinery, client-go, ...) by a directory of its
# own repository and requires them as v0.0.0. The generated build module requires
# k8s.io/kubernetes at the pin and replaces each of those staging modules by its published
# v0.<minor>.<patch>; the list is read from k8s.io/kubernetes's own go.mod, never typed here.
# etcd is built in a second module (a main.go calling etcdmain.Main) so its pin cannot move
# the etcd client libraries the API server is built with.
#
# Environment: GO (the go command, default `go`), XDG_CACHE_HOME. CGO is off (static binaries).
set -euo pipefail

# The pins. Kubernetes v1.37.2 is the newest release on the module proxy that builds with
# Go 1.26 (its go.mod says `go 1.26.0`); etcd v3.7.4 is the newest patch of the minor that
# kubeadm v1.37 deploys (DefaultEtcdVersion 3.7.0-0).
K8S_VERSION=v1.37.2
ETCD_VERSION=v3.7.4
GO_MIN=1.26.0   # the highest `go` line of the two pins' go.mod files

COMPONENTS=(kube-apiserver kube-controller-manager kube-scheduler)
GO=${GO:-go}
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/pets-operator"
KEY="k8s-${K8S_VERSION}-etcd-${ETCD_VERSION}"
OUT="$CACHE_ROOT/control-plane/$KEY"
BIN="$OUT/bin"
STAMP="$OUT/stamp"
STAMP_TEXT="kubernetes=$K8S_VERSION etcd=$ETCD_VERSION cgo=0"

log() { printf 'control_plane.sh: %s\n' "$*" >&2; }
die() { printf 'control_plane.sh: error: %s\n' "$*" >&2; exit 1; }

is_built() {
  [[ -f "$STAMP" && "$(cat "$STAMP")" == "$STAMP_TEXT" ]] || return 1
  local name
  for name in "${COMPONENTS[@]}" etcd; do
    [[ -x "$BIN/$name" ]] || return 1
  done
}

case "${1:-}" in
  --versions) printf 'kubernetes=%s\netcd=%s\ngo=%s\n' "$K8S_VERSION" "$ETCD_VERSION" "$GO_MIN"; exit 0 ;;
  --check) if is_built; then echo "$BIN"; exit 0; else log "not built: $BIN"; exit 3; fi ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) die "unknown argument: $1 (see --help)" ;;
esac

if is_built; then
  echo "$BIN"
  exit 0
fi

# --- the toolchain -----------------------------------------------------------------------
if ! command -v "$GO" >/dev/null 2>&1; then
  die "no Go toolchain ('$GO' is not on PATH). Building Kubernetes $K8S_VERSION and etcd $ETCD_VERSION
  needs Go >= $GO_MIN: install it from https://go.dev/dl/ (or your distribution's golang package,
  if new enough), put 'go' on PATH (or set GO=/path/to/go) and run $0 again."
fi
go_version=$("$GO" env GOVERSION 2>/dev/null) || die "'$GO env GOVERSION' failed: is '$GO' a Go toolchain?"
go_version=${go_version#go}
if [[ "$(printf '%s\n%s\n' "$GO_MIN" "${go_version%%[-+ ]*}" | sort -V | head -n1)" != "$GO_MIN" ]]; then
  die "Go $go_version is too old: Kubernetes $K8S_VERSION and etcd $ETCD_VERSION need Go >= $GO_MIN.
  Install a newer Go from https://go.dev/dl/ and run $0 again."
fi

export GOCACHE="$CACHE_ROOT/go/build"
export GOMODCACHE="$CACHE_ROOT/go/mod"
export GOTOOLCHAIN=local    # never download another toolchain behind the user's back
export GOWORK=off GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0
unset GOOS GOARCH
mkdir -p "$GOCACHE" "$GOMODCACHE" "$OUT"

# One build per pin at a time (two test sessions starting together wait for each other).
if command -v flock >/dev/null 2>&1; then
  exec 9>"$OUT/.lock"
  if ! flock -n 9; then
    log "another build of $KEY is running; waiting for it"
    flock 9
  fi
  if is_built; then echo "$BIN"; exit 0; fi
fi

started=$SECONDS
log "building Kubernetes $K8S_VERSION and etcd $ETCD_VERSION with Go $go_version into $OUT"
log "(once per pin: 10 to 30 minutes on 2 cores, about 5 GB of Go caches)"

step() { CURRENT_STEP="$1"; log "step: $1"; }
on_error() {
  local code=$?
  printf 'control_plane.sh: error: step "%s" failed (exit %s).\n' "$CURRENT_STEP" "$code" >&2
  local proxy
  proxy=$("$GO" env GOPROXY 2>/dev/null || echo '?')
  printf '  The output above says why. A network error: check that the Go module proxy (%s)\n' "$proxy" >&2
  printf '  is reachable and run the script again (finished steps are cached). A compile error: report it\n' >&2
  printf '  with the output; "rm -rf %s" forces a clean rebuild of this pin.\n' "$OUT" >&2
  exit "$code"
}
CURRENT_STEP=start
trap on_error ERR

# --- the Kubernetes build module -----------------------------------------------------------
step "download k8s.io/kubernetes@$K8S_VERSION"
# (`go mod download -json` reports its errors in the JSON on stdout.)
download=$("$GO" mod download -json "k8s.io/kubernetes@$K8S_VERSION") || { echo "$download" >&2; false; }
k8s_gomod=$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p' <<<"$download")
[[ -f "$k8s_gomod" ]] || { echo "no go.mod for k8s.io/kubernetes@$K8S_VERSION in the module cache" >&2; false; }
k8s_time=$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "${k8s_gomod%.mod}.info" 2>/dev/null || true)

step "generate the build module (replace each k8s.io staging module by v0.${K8S_VERSION#v1.})"
staging_version="v0.${K8S_VERSION#v1.}"
# The staging modules are the k8s.io requirements at v0.0.0 in k8s.io/kubernetes's go.mod.
mapfile -t staging < <(awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" { print $1 }' "$k8s_gomod" | sort -u)
(( ${#staging[@]} > 10 )) || { echo "found only ${#staging[@]} staging modules in $k8s_gomod" >&2; false; }
k8s_src="$OUT/src/kubernetes"
rm -rf "$k8s_src"
mkdir -p "$k8s_src"
{
  echo "// Generated by hack/control_plane.sh: builds k8s.io/kubernetes $K8S_VERSION's commands."
  echo "module pets-operator.local/control-plane/kubernetes"
  echo
  echo "go $GO_MIN"
  echo
  echo "require k8s.io/kubernetes $K8S_VERSION"
  echo
  echo "replace ("
  for module in "${staging[@]}"; do
    echo "	$module => $module $staging_version"
  done
  echo ")"
} >"$k8s_src/go.mod"
log "${#staging[@]} staging modules replaced by $staging_version"

step "resolve the dependencies of ${COMPONENTS[*]}"
packages=()
for name in "${COMPONENTS[@]}"; do packages+=("k8s.io/kubernetes/cmd/$name"); done
(cd "$k8s_src" && "$GO" get "${packages[@]/%/@$K8S_VERSION}")

step "compile ${COMPONENTS[*]}"
minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
build_date=${k8s_time:-$(date -u +%Y-%m-%dT%H:%M:%SZ)}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date -X $pkg.gitCommit="
done
rm -rf "$OUT/bin.new"
mkdir -p "$OUT/bin.new"
(cd "$k8s_src" && "$GO" build -trimpath -ldflags "$ldflags" -o "$OUT/bin.new/" "${packages[@]}")

# --- the etcd build module -----------------------------------------------------------------
step "generate the etcd build module (go.etcd.io/etcd/server/v3@$ETCD_VERSION)"
etcd_src="$OUT/src/etcd"
rm -rf "$etcd_src"
mkdir -p "$etcd_src"
cat >"$etcd_src/go.mod" <<EOF
// Generated by hack/control_plane.sh: builds etcd $ETCD_VERSION.
module pets-operator.local/control-plane/etcd

go $GO_MIN
EOF
cat >"$etcd_src/main.go" <<'EOF'
// Generated by hack/control_plane.sh: the etcd server command.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
(cd "$etcd_src" && "$GO" get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" && "$GO" mod tidy)

step "compile etcd"
(cd "$etcd_src" && "$GO" build -trimpath \
  -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=module-$ETCD_VERSION" \
  -o "$OUT/bin.new/etcd" .)

step "check and install the binaries"
# (Captured first: `cmd | grep -q` fails under pipefail when grep quits before cmd is done.)
said=$("$OUT/bin.new/kube-apiserver" --version)
[[ "$said" == "Kubernetes $K8S_VERSION" ]] \
  || { echo "kube-apiserver --version says '$said', not 'Kubernetes $K8S_VERSION'" >&2; false; }
said=$("$OUT/bin.new/etcd" --version)
[[ "$said" == *"etcd Version: ${ETCD_VERSION#v}"* ]] \
  || { echo "etcd --version says '$said', not etcd Version: ${ETCD_VERSION#v}" >&2; false; }
rm -rf "$BIN"
mv "$OUT/bin.new" "$BIN"
echo "$STAMP_TEXT" >"$STAMP"
trap - ERR
log "built in $((SECONDS - started)) s: $(cd "$BIN" && echo *)"
echo "$BIN"
