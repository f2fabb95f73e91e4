#!/usr/bin/env bash
# Builds and tests trainpack against Debian sid's LibTorch (newer LibTorch and g++ than Debian 12)
# inside a chroot made by debootstrap, without touching the host's packages or its build/. Run as
# root on a Debian 12 machine that can reach the Debian mirror. Safe to run again: the root is made
# once and reused, and setup.sh installs only what is missing and rebuilds only what changed.
#
#   sudo bash scripts/debian_sid.sh                 make the root if needed, then run setup.sh in
#                                                   it: install packages, build in build-sid/
#   sudo bash scripts/debian_sid.sh --test          ... then run the test suite (ctest)
#   sudo bash scripts/debian_sid.sh --install-only  make the root and install the packages; no build
#   sudo bash scripts/debian_sid.sh --exec CMD...   run CMD (with its arguments) in /src in the root
#
# Every argument but `--exec` goes to setup.sh as it is (`--test`, `--run`, `--asan`, or cmake
# arguments after `--`, e.g. `--test -- -DTRAINPACK_BUILD_BENCHMARKS=OFF`); setup.sh runs there with
# BUILD_DIR=build-sid, so sanitizer builds land in build-sid-asan/ and build-sid-tsan/. The source
# tree is bind-mounted at /src (and ../shared, if there, read-only at /shared), so what is built
# there is owned by root.
# Environment: SID_ROOT (the chroot; default /var/tmp/trainpack-sid), MIRROR (default
# http://deb.debian.org/debian), JOBS, BUILD_TARGETS and CCACHE_MAXSIZE (passed to setup.sh in
# the root; its ccache lives in the root, kept between runs).
set -euo pipefail

SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SID_ROOT="${SID_ROOT:-/var/tmp/trainpack-sid}"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
SID_BUILD_DIR=build-sid
# What debootstrap installs beyond its minimal base: enough for setup.sh to run.
BASE_PACKAGES=ca-certificates
# How long to wait for the host's apt/dpkg lock when installing debootstrap on the host.
LOCK_WAIT_S=600

# ---- helpers ----
if [[ -t 1 ]]; then BOLD=$'\033[1m' PLAIN=$'\033[0m'; else BOLD='' PLAIN=''; fi
step() { printf '\n%s==> %s%s\n' "$BOLD" "$*" "$PLAIN"; }
die() {
  printf 'debian_sid.sh: error: %s\n' "$*" >&2
  exit 1
}
usage() { sed -n '2,/^[^#]/{/^#/p}' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

EXEC=0
case "${1:-}" in
  -h | --help) usage; exit 0 ;;
  --exec)
    shift
    [[ $# -gt 0 ]] || die "--exec needs a command, e.g. --exec g++ --version"
    EXEC=1
    ;;
esac

if [[ "$(id -u)" -ne 0 ]]; then
  die "must run as root (debootstrap, chroot and mount need it): sudo bash $0 $*"
fi
SID_ROOT="${SID_ROOT%/}"
[[ "$SID_ROOT" == /?* ]] || die "SID_ROOT must be an absolute path other than /"

mkdir -p "$(dirname "$SID_ROOT")"
# One run at a time per root: a second run would unmount the first one's /src on exit.
exec 9>"$SID_ROOT.lock"
if ! flock -n 9; then
  echo "Another debian_sid.sh is using $SID_ROOT; waiting for it."
  flock 9
fi

# ---- mounts ----
MOUNTED=() # what this run mounted, in order; unmounted in reverse on exit

# unmount_under DIR: unmounts everything mounted at or below DIR, deepest first (left over by a
# run that was killed before its trap could run, or by an interrupted debootstrap).
unmount_under() {
  local target
  findmnt -rn -o TARGET | awk -v d="$1" '$0 == d || index($0, d "/") == 1' | sort -r |
    while read -r target; do
      echo "Unmounting stale $target"
      umount "$target" || umount -l "$target"
    done
}

cleanup() {
  local i
  for ((i = ${#MOUNTED[@]} - 1; i >= 0; i--)); do
    umount "${MOUNTED[i]}" 2>/dev/null || umount -l "${MOUNTED[i]}" ||
      echo "debian_sid.sh: warning: could not unmount ${MOUNTED[i]}" >&2
  done
  MOUNTED=()
}
CHILD='' # what runs in the root, when it runs in a process group of its own (see in_root)
# on_signal STATUS: ends what runs in the root before the mounts go, then exits.
on_signal() {
  if [[ -n "$CHILD" ]]; then
    kill -TERM -- "-$CHILD" 2>/dev/null || true
    wait "$CHILD" 2>/dev/null || true
  fi
  exit "$1"
}
trap cleanup EXIT
trap 'on_signal 130' INT
trap 'on_signal 143' TERM

# mount_in TARGET MOUNT-ARGS...: mounts into the root and remembers it for cleanup. Each mount is
# made private so that nothing mounted under it reaches the host's tree, or the other way round.
mount_in() {
  local target="$SID_ROOT$1"
  shift
  mkdir -p "$target"
  mount "$@" "$target"
  MOUNTED+=("$target")
  mount --make-private "$target"
}

mount_all() {
  mount_in /proc -t proc proc
  mount_in /sys -t sysfs sysfs
  mount_in /dev --bind /dev
  mount_in /dev/pts --bind /dev/pts
  mount_in /dev/shm -t tmpfs -o mode=1777,nosuid,nodev shm
  mount_in /src --bind "$SRC"
  # The tests find TensorBoard's event reader at ../shared/tensorboard next to the source tree
  # (TRAINPACK_TENSORBOARD_READER in tests/CMakeLists.txt); read-only, as it is only read.
  if [[ -d "$SRC/../shared" ]]; then
    mount_in /shared --bind "$(cd "$SRC/../shared" && pwd)"
    mount -o remount,bind,ro "$SID_ROOT/shared"
  fi
}

# ---- the root ----
install_debootstrap() {
  command -v debootstrap >/dev/null && return
  step "Installing debootstrap on the host"
  local deadline=$((SECONDS + LOCK_WAIT_S))
  # Another apt may hold apt's or dpkg's lock: retry until the deadline.
  until apt-get update && DEBIAN_FRONTEND=noninteractive \
    apt-get -o DPkg::Lock::Timeout=60 install -y debootstrap; do
    [[ $SECONDS -lt $deadline ]] || die "could not install debootstrap (is another apt running?)"
    echo "Retrying in 10 s."
    sleep 10
  done
}

make_root() {
  if [[ -f "$SID_ROOT/etc/debian_version" && ! -e "$SID_ROOT/debootstrap" ]]; then
    return # made by an earlier run
  fi
  if [[ -e "$SID_ROOT" ]]; then
    rmdir "$SID_ROOT" 2>/dev/null || die "$SID_ROOT exists but is not a finished debootstrap root"
  fi
  install_debootstrap
  # debootstrap works in a side directory that is renamed when it is finished, so that a failed or
  # interrupted run leaves no half-made root behind for the next run to trust.
  local partial="$SID_ROOT.partial"
  if [[ -e "$partial" ]]; then
    step "Removing the unfinished root $partial of an earlier run"
    unmount_under "$partial"
    rm -rf --one-file-system "$partial"
  fi
  step "Making a Debian sid root in $SID_ROOT with debootstrap (about a minute)"
  local start=$SECONDS
  debootstrap --variant=minbase --include="$BASE_PACKAGES" \
    --keyring=/usr/share/keyrings/debian-archive-keyring.gpg sid "$partial" "$MIRROR"
  mv "$partial" "$SID_ROOT"
  echo "debootstrap took $((SECONDS - start)) s."
}

# configure_root: settings written on every run (cheap, and kept up to date with this script).
configure_root() {
  # sid's Release file may be past its Valid-Until date on the mirror; without this, apt refuses it.
  printf '%s\n' '// Written by trainpack scripts/debian_sid.sh.' \
    'Acquire::Check-Valid-Until "false";' >"$SID_ROOT/etc/apt/apt.conf.d/99trainpack-sid"
  echo "deb $MIRROR sid main" >"$SID_ROOT/etc/apt/sources.list"
  # Name resolution for apt. The root's copy may be a link into a /run that is not mounted.
  rm -f "$SID_ROOT/etc/resolv.conf"
  cp -L /etc/resolv.conf "$SID_ROOT/etc/resolv.conf"
  # Packages must not start services in the root.
  printf '#!/bin/sh\nexit 101\n' >"$SID_ROOT/usr/sbin/policy-rc.d"
  chmod 755 "$SID_ROOT/usr/sbin/policy-rc.d"
}

# in_root CMD...: runs CMD in /src inside the root, with a clean environment; returns its status.
in_root() {
  local env=(
    HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
    LANG=C.UTF-8 LC_ALL=C.UTF-8 TERM="${TERM:-dumb}" DEBIAN_FRONTEND=noninteractive
  )
  local var
  for var in JOBS BUILD_TARGETS CCACHE_MAXSIZE; do
    [[ -z "${!var:-}" ]] || env+=("$var=${!var}")
  done
  local cmd=(chroot "$SID_ROOT" /usr/bin/env -i "${env[@]}"
    /bin/bash -c 'cd /src && exec "$@"' in_root "$@")
  if [[ -t 0 ]]; then
    "${cmd[@]}" # on a terminal: Ctrl-C reaches everything in the foreground already
    return
  fi
  # Elsewhere (CI) it runs in a process group of its own, so that a TERM sent to this script
  # alone (e.g. by `timeout`) ends all of it through on_signal, not only this script.
  set -m
  "${cmd[@]}" &
  CHILD=$!
  set +m
  local status=0
  wait "$CHILD" || status=$?
  CHILD=''
  return "$status"
}

SECONDS=0
make_root
unmount_under "$SID_ROOT" # stale mounts of a killed run
configure_root
mount_all
if [[ $EXEC -eq 1 ]]; then
  in_root "$@"
else
  step "Running setup.sh in $SID_ROOT (BUILD_DIR=$SID_BUILD_DIR${*:+; $*})"
  # No peer packages (python3-torchvision): the root builds for the cross-version check only.
  in_root env BUILD_DIR="$SID_BUILD_DIR" TRAINPACK_NO_PEER_PACKAGES=1 bash scripts/setup.sh "$@"
  step "debian_sid.sh done in $((SECONDS / 60))m $((SECONDS % 60))s"
fi
