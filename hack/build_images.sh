#!/usr/bin/env bash
# Build both images from the repository's Dockerfiles where no registry can be reached.
#
#   hack/build_images.sh [options]
#
# For each Dockerfile's base image (python:...-slim): use it when present, else try `docker pull`,
# else make it from Debian packages with debootstrap (python3, venv, pip, ca-certificates) and
# `docker import` it under the name the Dockerfile's FROM uses, so the Dockerfiles build unchanged.
# Then `docker build` both images with the package indexes given here. On a normal network
# `make images` (plain docker build) is all that is needed; this is the air-gapped path.
# The packages themselves are fixed by the lock files (requirements/*.lock, with hashes): an index
# given here only says where to fetch them, and a file whose hash the lock lacks fails the build.
#
# Options:
#   --ca-bundle FILE         a CA certificate (PEM) to trust inside the base image (an HTTPS proxy's)
#   --index-url URL          pip's index for the builds (PIP_INDEX_URL)
#   --extra-index-url URL    another index (repeatable; PIP_EXTRA_INDEX_URL)
#   --serve-index DIR        serve DIR (a PEP 503 "simple/" tree and its files) on 127.0.0.1 during the
#                            builds and add DIR's simple/ as an extra index (repeatable)
#   --torch-index-url URL    another index for the trainer's torch and torchvision (TORCH_INDEX_URL;
#                            default: none, or the variant's PyTorch index with --trainer-variant)
#   --trainer-variant V      cpu, cu126, ...: the trainer from requirements/trainer-V.lock (VARIANT);
#                            default: requirements/trainer.lock (torch as PyPI serves it)
#   --mirror URL             Debian mirror for debootstrap (default: the first one apt uses, else deb.debian.org)
#   --cache DIR              where the base image's root filesystem tarball is kept between runs
#                            (default /var/cache/pets-operator-images)
#   --only operator|trainer  build one image only
#   --operator-image NAME    default pets-operator:0.1.0
#   --trainer-image NAME     default pets-trainer:0.1.0
set -euo pipefail
cd "$(dirname "$0")/.."

DOCKER=${DOCKER:-docker}
CA_BUNDLE=""
INDEX_URL=""
EXTRA_INDEX_URLS=()
SERVE_DIRS=()
TORCH_INDEX_URL=""
VARIANT=""
MIRROR=""
CACHE=/var/cache/pets-operator-images
ONLY=""
OPERATOR_IMAGE=pets-operator:0.1.0
TRAINER_IMAGE=pets-trainer:0.1.0
SUITE=bookworm

die() { echo "build_images: $*" >&2; exit 1; }
step() { echo "build_images: $*"; }

while [ $# -gt 0 ]; do
  case "$1" in
    --ca-bundle) CA_BUNDLE=$2; shift 2 ;;
    --index-url) INDEX_URL=$2; shift 2 ;;
    --extra-index-url) EXTRA_INDEX_URLS+=("$2"); shift 2 ;;
    --serve-index) SERVE_DIRS+=("$2"); shift 2 ;;
    --torch-index-url) TORCH_INDEX_URL=$2; shift 2 ;;
    --torch) die "--torch is gone: the trainer's torch is pinned in requirements/trainer.lock (TORCH_PINS in the Makefile, then make locks)" ;;
    --trainer-variant) VARIANT=$2; shift 2 ;;
    --mirror) MIRROR=$2; shift 2 ;;
    --cache) CACHE=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --operator-image) OPERATOR_IMAGE=$2; shift 2 ;;
    --trainer-image) TRAINER_IMAGE=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
case "$ONLY" in ""|operator|trainer) ;; *) die "--only must be operator or trainer, got $ONLY" ;; esac
[ -z "$CA_BUNDLE" ] || [ -r "$CA_BUNDLE" ] || die "--ca-bundle $CA_BUNDLE is not a readable file"
[[ "$VARIANT" =~ ^(|cpu|cu[0-9]+|rocm[0-9.]+|xpu)$ ]] || die "--trainer-variant must be cpu, cuNNN, rocmX.Y or xpu, got $VARIANT"
[ -z "$VARIANT" ] || [ -f "requirements/trainer-$VARIANT.lock" ] \
  || die "no requirements/trainer-$VARIANT.lock: make locks LOCKS_ARGS='--torch-backend $VARIANT' (needs the PyTorch index)"

# The base image a Dockerfile builds FROM, with its ARG defaults filled in.
base_image_of() {
  local dockerfile=$1 from
  from=$(grep -m1 -E '^FROM ' "$dockerfile" | awk '{print $2}')
  while [[ "$from" =~ \$\{([A-Z_]+)\} ]]; do
    local name=${BASH_REMATCH[1]} value
    value=$(grep -m1 -E "^ARG ${name}=" "$dockerfile" | cut -d= -f2-)
    [ -n "$value" ] || die "$dockerfile: no default for ARG $name in its FROM"
    from=${from//\$\{$name\}/$value}
  done
  echo "$from"
}

default_mirror() {
  local uri
  uri=$(grep -h -m1 -E '^URIs: .*/debian/?$' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' || true)
  [ -n "$uri" ] || uri=$(grep -h -m1 -E '^deb .*/debian/? ' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' || true)
  echo "${uri:-http://deb.debian.org/debian}"
}

# The root filesystem tarball of a Debian base with Python, kept in $CACHE (keyed by suite and CA).
base_rootfs() {
  local ca_key="none" tarball rootfs
  [ -z "$CA_BUNDLE" ] || ca_key=$(sha256sum "$CA_BUNDLE" | cut -c1-16)
  tarball="$CACHE/debian-$SUITE-python-$ca_key.tar"
  if [ -s "$tarball" ]; then
    echo "$tarball"; return
  fi
  command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
  mkdir -p "$CACHE"
  rootfs=$(mktemp -d "$CACHE/rootfs.XXXXXX")
  step "debootstrap $SUITE from ${MIRROR:-$(default_mirror)} (once; cached in $tarball)" >&2
  debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,python-is-python3,ca-certificates \
    "$SUITE" "$rootfs" "${MIRROR:-$(default_mirror)}" >"$CACHE/debootstrap.log" 2>&1 \
    || { tail -20 "$CACHE/debootstrap.log" >&2; die "debootstrap failed (log: $CACHE/debootstrap.log)"; }
  # Dockerfiles written for the python images pip-install into the system Python; Debian marks
  # it externally managed (PEP 668), the python images do not.
  rm -f "$rootfs"/usr/lib/python3*/EXTERNALLY-MANAGED
  if [ -n "$CA_BUNDLE" ]; then
    install -m 0644 "$CA_BUNDLE" "$rootfs/usr/local/share/ca-certificates/build-ca.crt"
    chroot "$rootfs" update-ca-certificates >/dev/null 2>&1 || die "update-ca-certificates failed in the base image"
  fi
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb
  tar -C "$rootfs" -cf "$tarball.tmp" .
  rm -rf "$rootfs"
  mv "$tarball.tmp" "$tarball"
  echo "$tarball"
}

ensure_base() {
  local image=$1 tarball
  if "$DOCKER" image inspect "$image" >/dev/null 2>&1; then
    step "base $image: present"; return
  fi
  if timeout 60 "$DOCKER" pull -q "$image" >/dev/null 2>&1; then
    step "base $image: pulled"; return
  fi
  tarball=$(base_rootfs)
  step "base $image: imported from $tarball"
  "$DOCKER" import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python3"]' \
    "$tarball" "$image" >/dev/null
}

SERVER_PIDS=()
cleanup() { [ ${#SERVER_PIDS[@]} -eq 0 ] || kill "${SERVER_PIDS[@]}" 2>/dev/null || true; }
trap cleanup EXIT

serve() {
  local dir=$1 port
  [ -d "$dir/simple" ] || die "--serve-index $dir has no simple/ directory"
  # The same port each run when it is free: the index URL is a build argument, and a new value
  # would invalidate docker's layer cache of every pip install after it.
  port=$(python3 - "$((38400 + ${#SERVER_PIDS[@]}))" <<'PY'
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as http.server binds it
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
PY
)
  python3 -m http.server "$port" --bind 127.0.0.1 --directory "$dir" >/dev/null 2>&1 &
  SERVER_PIDS+=($!)
  for _ in $(seq 50); do
    python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/simple/')" 2>/dev/null && break
    sleep 0.1
  done
  EXTRA_INDEX_URLS+=("http://127.0.0.1:$port/simple")
  step "serving $dir at http://127.0.0.1:$port/simple"
}
for dir in ${SERVE_DIRS[@]+"${SERVE_DIRS[@]}"}; do serve "$dir"; done

BUILD_ARGS=(--network host --build-arg "PIP_INDEX_URL=$INDEX_URL"
            --build-arg "PIP_EXTRA_INDEX_URL=${EXTRA_INDEX_URLS[*]+${EXTRA_INDEX_URLS[*]}}")

build() {  # build IMAGE DOCKER-BUILD-ARGS...: docker build, its output kept in a log shown on failure
  local image=$1 start=$SECONDS log; shift
  log=$(mktemp)
  if ! "$DOCKER" build "$@" -t "$image" . >"$log" 2>&1; then
    tail -40 "$log" >&2; rm -f "$log"
    die "docker build of $image failed"
  fi
  rm -f "$log"
  step "$image built in $((SECONDS - start)) s"
}

if [ "$ONLY" != trainer ]; then
  ensure_base "$(base_image_of Dockerfile)"
  build "$OPERATOR_IMAGE" "${BUILD_ARGS[@]}" -f Dockerfile
fi
if [ "$ONLY" != operator ]; then
  ensure_base "$(base_image_of trainer_image/Dockerfile)"
  TRAINER_ARGS=(--build-arg "VARIANT=$VARIANT")
  [ -z "$TORCH_INDEX_URL" ] || TRAINER_ARGS+=(--build-arg "TORCH_INDEX_URL=$TORCH_INDEX_URL")
  build "$TRAINER_IMAGE" "${BUILD_ARGS[@]}" "${TRAINER_ARGS[@]}" -f trainer_image/Dockerfile
fi
"$DOCKER" image ls --format '{{.Repository}}:{{.Tag}}  {{.Size}}' | grep -E "^(${OPERATOR_IMAGE}|${TRAINER_IMAGE})  " || true
