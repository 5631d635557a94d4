#!/usr/bin/env bash
# Installs cushare onto a host from a build folder: binaries, libcushare.so,
# docs, configuration, systemd units and the run dir. Idempotent; run as root.
#
#   deploy/host/install.sh [--build-dir DIR] [--prefix /usr/local] [--destdir DIR]
#                          [--with-plugin] [--no-start] [--dry-run]
#
# --prefix DIR    where binaries, the library and the docs go; the units'
#                 ExecStart= and Documentation= are rewritten to match.
# --destdir DIR   stage everything under DIR (as DESTDIR for packaging; also
#                 read from $DESTDIR): paths inside the files stay the final
#                 ones, nothing is started, root is not needed.
# --with-plugin   also install and enable cushare-device-plugin.service (a
#                 Kubernetes node whose agents run from systemd).
# Without Kubernetes only cushared runs; containers get the library and their
# quota from docker run flags (docs/docker.md). Configuration in /etc/cushare
# (cushared.json, plugin.json) is installed once and never overwritten.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build_dir="$repo/build"
prefix=/usr/local
destdir=${DESTDIR:-}
with_plugin=0
start=1
dry=0

usage_error() {
  echo "install.sh: $1 (see --help)" >&2
  exit 2
}

while (($#)); do
  case "$1" in
    --build-dir|--prefix|--destdir) (($# >= 2)) || usage_error "$1 needs a value" ;;&
    --build-dir) build_dir=$2; shift 2 ;;
    --prefix) prefix=$2; shift 2 ;;
    --destdir) destdir=$2; shift 2 ;;
    --with-plugin) with_plugin=1; shift ;;
    --no-start) start=0; shift ;;
    --dry-run) dry=1; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done

# The prefix ends up inside unit files and sed expressions: absolute, and
# without the characters either would misread.
case "$prefix" in
  /*) ;;
  *) usage_error "--prefix '$prefix' is not an absolute path" ;;
esac
[[ "$prefix" == *[[:space:]\#\\\&]* ]] && usage_error "--prefix '$prefix' contains a space, '#', '\\' or '&'"
prefix=${prefix%/}
[ -n "$prefix" ] || prefix=/
if [ -n "$destdir" ]; then
  case "$destdir" in
    /*) destdir=${destdir%/} ;;
    *) usage_error "--destdir '$destdir' is not an absolute path" ;;
  esac
fi
docdir="$prefix/share/doc/cushare"

run() {
  if ((dry)); then echo "+ $*"; else "$@"; fi
}

need() {
  [ -e "$1" ] || { echo "install.sh: $1 not found: build first (cmake --build $build_dir)" >&2; exit 1; }
}

# Installs `src` as `dest` (0644) after the sed expressions that follow,
# written whole then renamed.
install_edited() {
  local src=$1 dest=$2
  shift 2
  if ((dry)); then
    echo "+ install -m 0644 $src $dest (edited for prefix $prefix)"
    return
  fi
  sed "$@" "$src" > "$dest.new"
  chmod 0644 "$dest.new"
  mv -f "$dest.new" "$dest"
}

# A systemd unit with its /usr/local paths (ExecStart=, Documentation=) under the prefix.
install_unit() {
  install_edited "$1" "$2" -e "s#/usr/local/bin/#$prefix/bin/#g" \
    -e "s#/usr/local/share/doc/cushare/#$docdir/#g"
}

need "$build_dir/bin/cushared"
need "$build_dir/lib/libcushare.so"
((with_plugin)) && need "$build_dir/bin/cushare-device-plugin"
if ((!dry)) && [ -z "$destdir" ] && [ "$(id -u)" -ne 0 ]; then
  echo "install.sh: run as root (or with --dry-run to see the steps, --destdir to stage)" >&2
  exit 1
fi
D=$destdir

# Binaries and the library. The library is copied then renamed, so processes
# that already mapped the old one keep it intact.
run install -d "$D$prefix/bin" "$D$prefix/lib/cushare" "$D/etc/cushare" "$D$docdir" \
  "$D/etc/systemd/system" "$D/etc/tmpfiles.d"
for b in cushared cusharectl cushare-device-plugin; do
  if [ -e "$build_dir/bin/$b" ]; then run install -m 0755 "$build_dir/bin/$b" "$D$prefix/bin/$b"; fi
done
run install -m 0755 "$build_dir/lib/libcushare.so" "$D$prefix/lib/cushare/libcushare.so.new"
run mv -f "$D$prefix/lib/cushare/libcushare.so.new" "$D$prefix/lib/cushare/libcushare.so"
# Every page a unit's Documentation= names, and the ones they link to.
for d in scheduler.md cli.md kubernetes.md docker.md; do
  if [ -e "$repo/docs/$d" ]; then run install -m 0644 "$repo/docs/$d" "$D$docdir/"; fi
done

# Configuration: never overwrite what the operator edited.
if [ ! -e "$D/etc/cushare/cushared.json" ]; then
  run install -m 0644 "$here/cushared.json" "$D/etc/cushare/cushared.json"
fi
# The library's path inside containers stays: only the host's moves.
if [ ! -e "$D/etc/cushare/plugin.json" ]; then
  install_edited "$repo/deploy/k8s/plugin.json" "$D/etc/cushare/plugin.json" \
    -e "/\"libraryHostPath\"/s#/usr/local/lib/cushare/#$prefix/lib/cushare/#"
fi

# The run dir survives reboots as an empty folder (tmpfiles.d); a staged
# install leaves making it to the target's boot.
if [ -z "$D" ]; then run install -d -m 0755 /run/cushare; fi
if ((dry)); then
  echo "+ write $D/etc/tmpfiles.d/cushare.conf"
else
  echo "d /run/cushare 0755 root root -" > "$D/etc/tmpfiles.d/cushare.conf"
fi

# systemd units: cushared's from deploy/systemd (owned by the daemon), ours here.
units=()
if [ -e "$repo/deploy/systemd/cushared.service" ]; then
  install_unit "$repo/deploy/systemd/cushared.service" "$D/etc/systemd/system/cushared.service"
  units+=(cushared.service)
fi
if ((with_plugin)); then
  install_unit "$here/cushare-device-plugin.service" \
    "$D/etc/systemd/system/cushare-device-plugin.service"
  units+=(cushare-device-plugin.service)
fi
if [ -z "$D" ] && command -v systemctl >/dev/null 2>&1 && ((${#units[@]})); then
  run systemctl daemon-reload
  if ((start)); then
    run systemctl enable --now "${units[@]}"
  fi
fi
echo "cushare installed under $D$prefix (units: ${units[*]:-none})"
