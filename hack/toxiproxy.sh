#!/usr/bin/env bash
# Build Toxiproxy's server (github.com/Shopify/toxiproxy/v2/cmd/server) of one pinned release
# from its Go module into the user cache:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/pets-operator/toxiproxy/toxiproxy-<TOXIPROXY>/bin/toxiproxy-server
#
# Toxiproxy is a TCP proxy with an HTTP API that injects connection-level faults (latency,
# resets, timeouts, bandwidth limits, ...); tests/support/toxiproxy.py drives it. The Go build and
# module caches are hack/control_plane.sh's (.../pets-operator/go/{build,mod}), so the build
# happens once per pin: a warm call only checks the binary and the stamp file and returns at
# once, without needing Go. The last line on stdout is the bin directory. Everything else goes
# to stderr.
#
#   hack/toxiproxy.sh              # build if needed, print the bin directory
#   hack/toxiproxy.sh --versions   # print the pin (toxiproxy=) and go=<minimum>; build nothing
#   hack/toxiproxy.sh --check      # print the bin directory if built, else exit 3; build nothing
#
# How: `go install github.com/Shopify/toxiproxy/v2/cmd/server@<pin>`, i.e. the module's own go.mod
# and go.sum decide every dependency (v2.5.0's go.mod has no replace directives; the script fails
# if a pin's go.mod gains some, since `go install pkg@version` cannot honour them). The binary,
# named `server` by `go install`, is renamed toxiproxy-server, as Toxiproxy's releases name it;
# its version variable is set with -ldflags as Toxiproxy's own release build does.
#
# Environment: GO (the go command, default `go`), XDG_CACHE_HOME. CGO is off (a static binary).
set -euo pipefail

# The pin: v2.5.0, the newest release the module proxy serves for github.com/Shopify/toxiproxy/v2
# when this was written (2026-12-05; `go list -m -versions` lists v2.3.0 v2.5.0).
TOXIPROXY_VERSION=v2.5.0
GO_MIN=1.17   # the `go` line of its go.mod

MODULE=github.com/Shopify/toxiproxy/v2
GO=${GO:-go}
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/pets-operator"
KEY="toxiproxy-${TOXIPROXY_VERSION}"
OUT="$CACHE_ROOT/toxiproxy/$KEY"
BIN="$OUT/bin"
STAMP="$OUT/stamp"
STAMP_TEXT="toxiproxy=$TOXIPROXY_VERSION cgo=0"

log() { printf 'toxiproxy.sh: %s\n' "$*" >&2; }
die() { printf 'toxiproxy.sh: error: %s\n' "$*" >&2; exit 1; }

is_built() {
  [[ -f "$STAMP" && "$(cat "$STAMP")" == "$STAMP_TEXT" && -x "$BIN/toxiproxy-server" ]]
}

case "${1:-}" in
  --versions) printf 'toxiproxy=%s\ngo=%s\n' "$TOXIPROXY_VERSION" "$GO_MIN"; exit 0 ;;
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
  die "no Go toolchain ('$GO' is not on PATH). Building Toxiproxy $TOXIPROXY_VERSION needs Go >= $GO_MIN:
  install it from https://go.dev/dl/ (or your distribution's golang package, if new enough),
  put 'go' on PATH (or set GO=/path/to/go) and run $0 again."
fi
go_version=$("$GO" env GOVERSION 2>/dev/null) || die "'$GO env GOVERSION' failed: is '$GO' a Go toolchain?"
go_version=${go_version#go}
if [[ "$(printf '%s\n%s\n' "$GO_MIN" "${go_version%%[-+ ]*}" | sort -V | head -n1)" != "$GO_MIN" ]]; then
  die "Go $go_version is too old: Toxiproxy $TOXIPROXY_VERSION needs Go >= $GO_MIN.
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
log "building Toxiproxy $TOXIPROXY_VERSION with Go $go_version into $OUT (once per pin: 36 s measured with empty Go caches on a loaded 2-core machine)"

step() { CURRENT_STEP="$1"; log "step: $1"; }
on_error() {
  local code=$?
  printf 'toxiproxy.sh: error: step "%s" failed (exit %s).\n' "$CURRENT_STEP" "$code" >&2
  local proxy
  proxy=$("$GO" env GOPROXY 2>/dev/null || echo '?')
  printf '  The output above says why. A network error: check that the Go module proxy (%s)\n' "$proxy" >&2
  printf '  is reachable and run the script again (finished steps are cached). A compile error: report it\n' >&2
  printf '  with the output; "rm -rf %s" forces a clean rebuild of this pin.\n' "$OUT" >&2
  exit "$code"
}
CURRENT_STEP=start
trap on_error ERR

step "download $MODULE@$TOXIPROXY_VERSION"
# (`go mod download -json` reports its errors in the JSON on stdout.)
download=$("$GO" mod download -json "$MODULE@$TOXIPROXY_VERSION") || { echo "$download" >&2; false; }
module_dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p' <<<"$download")
[[ -f "$module_dir/go.mod" ]] || { echo "no $MODULE@$TOXIPROXY_VERSION in the module cache ($download)" >&2; false; }
if grep -Eq '^[[:space:]]*replace([[:space:]]|\()' "$module_dir/go.mod"; then
  echo "$module_dir/go.mod has replace directives, which 'go install pkg@version' refuses;" \
       "this pin needs a generated build module (see hack/control_plane.sh)" >&2
  false
fi

step "compile $MODULE/cmd/server"
rm -rf "$OUT/bin.new"
mkdir -p "$OUT/bin.new"
GOBIN="$OUT/bin.new" "$GO" install -trimpath \
  -ldflags "-s -w -X $MODULE.Version=${TOXIPROXY_VERSION#v}" "$MODULE/cmd/server@$TOXIPROXY_VERSION"
mv "$OUT/bin.new/server" "$OUT/bin.new/toxiproxy-server"

step "check and install"
said=$("$OUT/bin.new/toxiproxy-server" -version 2>&1 || true)
[[ "$said" == *"${TOXIPROXY_VERSION#v}"* ]] \
  || { echo "toxiproxy-server -version did not print ${TOXIPROXY_VERSION#v}: $said" >&2; false; }
rm -rf "$BIN"
mv "$OUT/bin.new" "$BIN"
echo "$STAMP_TEXT" >"$STAMP"
trap - ERR
log "built in $((SECONDS - started)) s: $BIN/toxiproxy-server"
echo "$BIN"
