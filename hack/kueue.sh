#!/usr/bin/env bash
# Build Kueue's controller manager (sigs.k8s.io/kueue/cmd/kueue) of one pinned release from its Go
# module, and copy that same module version's manifests next to it, into the user cache:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/pets-operator/kueue/kueue-<KUEUE>/bin/kueue
#   ${XDG_CACHE_HOME:-$HOME/.cache}/pets-operator/kueue/kueue-<KUEUE>/config/components/...
#
# The Go build and module caches are hack/control_plane.sh's (.../pets-operator/go/{build,mod}),
# so the build happens once per pin: a warm call only checks the binary and the stamp file and
# returns at once, without needing Go. The last line on stdout is the bin directory; the
# manifests are in ../config. Everything else goes to stderr.
#
#   hack/kueue.sh              # build if needed, print the bin directory
#   hack/kueue.sh --versions   # print the pin (kueue=) and go=<minimum>; build nothing
#   hack/kueue.sh --check      # print the bin directory if built, else exit 3; build nothing
#
# How: `go install sigs.k8s.io/kueue/cmd/kueue@<pin>`, i.e. the module's own go.mod and go.sum
# decide every dependency (Kueue v0.17.0's go.mod has no replace directives; the script fails if
# a pin's go.mod gains some, since `go install pkg@version` cannot honour them). The version
# variables Kueue's Makefile sets with -ldflags are set the same way. The manifests copied are
# Kueue's kustomize inputs, unchanged (kustomize is not needed here): the CRDs and their
# conversion-webhook patches (config/components/crd), the webhook configurations and their
# namespaceSelector patches (config/components/webhook), the controller's ClusterRole
# and Secret Role (config/components/rbac) and the sample Configuration (config/components/manager).
# pets_localkube/kueue.py assembles them for a local process.
#
# Environment: GO (the go command, default `go`), XDG_CACHE_HOME. CGO is off (a static binary).
set -euo pipefail

# The pin: the newest Kueue release on the module proxy when this was written (2026-03-31).
KUEUE_VERSION=v0.17.0
GO_MIN=1.25.0   # the `go` line of its go.mod

MODULE=sigs.k8s.io/kueue
GO=${GO:-go}
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/pets-operator"
KEY="kueue-${KUEUE_VERSION}"
OUT="$CACHE_ROOT/kueue/$KEY"
BIN="$OUT/bin"
CONFIG="$OUT/config"
STAMP="$OUT/stamp"
STAMP_TEXT="kueue=$KUEUE_VERSION cgo=0"
# The manifests, relative to the module root (and to $OUT).
MANIFESTS=(
  config/components/crd
  config/components/webhook
  config/components/rbac/role.yaml
  config/components/rbac/manager_secrets_role.yaml
  config/components/manager/controller_manager_config.yaml
)

log() { printf 'kueue.sh: %s\n' "$*" >&2; }
die() { printf 'kueue.sh: error: %s\n' "$*" >&2; exit 1; }

is_built() {
  [[ -f "$STAMP" && "$(cat "$STAMP")" == "$STAMP_TEXT" && -x "$BIN/kueue" ]] || return 1
  local item
  for item in "${MANIFESTS[@]}"; do
    [[ -e "$OUT/$item" ]] || return 1
  done
}

case "${1:-}" in
  --versions) printf 'kueue=%s\ngo=%s\n' "$KUEUE_VERSION" "$GO_MIN"; exit 0 ;;
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
  die "no Go toolchain ('$GO' is not on PATH). Building Kueue $KUEUE_VERSION needs Go >= $GO_MIN:
  install it from https://go.dev/dl/ (or your distribution's golang package, if new enough),
  put 'go' on PATH (or set GO=/path/to/go) and run $0 again."
fi
go_version=$("$GO" env GOVERSION 2>/dev/null) || die "'$GO env GOVERSION' failed: is '$GO' a Go toolchain?"
go_version=${go_version#go}
if [[ "$(printf '%s\n%s\n' "$GO_MIN" "${go_version%%[-+ ]*}" | sort -V | head -n1)" != "$GO_MIN" ]]; then
  die "Go $go_version is too old: Kueue $KUEUE_VERSION needs Go >= $GO_MIN.
  Install a newer Go from https://go.dev/dl/ and run $0 again."
fi

export GOCACHE="$CACHE_ROOT/go/build"
export GOMODCACHE="$CACHE_ROOT/go/mod"
export GOTOOLCHAIN=local    # never download another toolchain behind the user's back
export GOWORK=off GOFLAGS="-buildvcs=false" CGO_ENABLED=0
unset GOOS GOARCH GOBIN
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
log "building Kueue $KUEUE_VERSION with Go $go_version into $OUT"
log "(once per pin: 5 to 20 minutes on 2 cores, about 2 GB more of Go caches)"

step() { CURRENT_STEP="$1"; log "step: $1"; }
on_error() {
  local code=$?
  printf 'kueue.sh: error: step "%s" failed (exit %s).\n' "$CURRENT_STEP" "$code" >&2
  local proxy
  proxy=$("$GO" env GOPROXY 2>/dev/null || echo '?')
  printf '  The output above says why. A network error: check that the Go module proxy (%s)\n' "$proxy" >&2
  printf '  is reachable and run the script again (finished steps are cached). A compile error: report it\n' >&2
  printf '  with the output; "rm -rf %s" forces a clean rebuild of this pin.\n' "$OUT" >&2
  exit "$code"
}
CURRENT_STEP=start
trap on_error ERR

step "download $MODULE@$KUEUE_VERSION"
# (`go mod download -json` reports its errors in the JSON on stdout.)
download=$("$GO" mod download -json "$MODULE@$KUEUE_VERSION") || { echo "$download" >&2; false; }
module_dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p' <<<"$download")
[[ -f "$module_dir/go.mod" ]] || { echo "no $MODULE@$KUEUE_VERSION in the module cache ($download)" >&2; false; }
if grep -Eq '^[[:space:]]*replace([[:space:]]|\()' "$module_dir/go.mod"; then
  echo "$module_dir/go.mod has replace directives, which 'go install pkg@version' refuses;" \
       "this pin needs a generated build module (see hack/control_plane.sh)" >&2
  false
fi
release_time=$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "$GOMODCACHE/cache/download/$MODULE/@v/$KUEUE_VERSION.info" \
  2>/dev/null || true)

step "compile $MODULE/cmd/kueue"
version_pkg="$MODULE/pkg/version"
ldflags="-s -w -X $version_pkg.GitVersion=$KUEUE_VERSION -X $version_pkg.GitCommit=module-$KUEUE_VERSION"
ldflags+=" -X $version_pkg.BuildDate=${release_time:-$(date -u +%Y-%m-%dT%H:%M:%SZ)}"
rm -rf "$OUT/bin.new"
mkdir -p "$OUT/bin.new"
GOBIN="$OUT/bin.new" "$GO" install -trimpath -ldflags "$ldflags" "$MODULE/cmd/kueue@$KUEUE_VERSION"

step "copy the manifests of $MODULE@$KUEUE_VERSION"
rm -rf "$OUT/config.new"
for item in "${MANIFESTS[@]}"; do
  [[ -e "$module_dir/$item" ]] || { echo "$item is missing in $module_dir" >&2; false; }
  mkdir -p "$OUT/config.new/$(dirname "${item#config/}")"
  cp -R "$module_dir/$item" "$OUT/config.new/${item#config/}"
done
chmod -R u+w "$OUT/config.new"   # the module cache is read-only
[[ -n "$(ls "$OUT/config.new/components/crd/bases/"*.yaml 2>/dev/null)" ]] \
  || { echo "no CRDs in $module_dir/config/components/crd/bases" >&2; false; }

step "check and install"
# The binary prints its version in its first log line; run it only far enough to read the flags.
said=$("$OUT/bin.new/kueue" --help 2>&1 || true)
[[ "$said" == *"-config"* ]] || { echo "kueue --help did not list --config: $said" >&2; false; }
rm -rf "$BIN" "$CONFIG"
mv "$OUT/config.new" "$CONFIG"
mv "$OUT/bin.new" "$BIN"
echo "$STAMP_TEXT" >"$STAMP"
trap - ERR
log "built in $((SECONDS - started)) s: $BIN/kueue and $CONFIG"
echo "$BIN"
