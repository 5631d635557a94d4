#!/usr/bin/env bash
# Installs cushare onto a host from a build folder: binaries, libcushare.so,
# configuration, systemd units and the run dir. Idempotent; run as root.
#
#   deploy/host/install.sh [--build-dir DIR] [--prefix /usr/local] [--with-plugin]
#                          [--no-start] [--dry-run]
#
# --with-plugin   also install and enable cushare-device-plugin.service (a
#                 Kubernetes node whose agents run from systemd).
# Without Kubernetes only cushared runs; containers get the library and their
# quota from docker run flags (docs/docker.md).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build_dir="$repo/build"
prefix=/usr/local
with_plugin=0
start=1
dry=0

while (($#)); do
  case "$1" in
    --build-dir) build_dir=$2; shift 2 ;;
    --prefix) prefix=$2; shift 2 ;;
    --with-plugin) with_plugin=1; shift ;;
    --no-start) start=0; shift ;;
    --dry-run) dry=1; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

run() {
  if ((dry)); then echo "+ $*"; else "$@"; fi
}

need() {
  [ -e "$1" ] || { echo "install.sh: $1 not found: build first (cmake --build $build_dir)" >&2; exit 1; }
}

need "$build_dir/bin/cushared"
need "$build_dir/lib/libcushare.so"
((with_plugin)) && need "$build_dir/bin/cushare-device-plugin"
if ((!dry)) && [ "$(id -u)" -ne 0 ]; then
  echo "install.sh: run as root (or with --dry-run to see the steps)" >&2
  exit 1
fi

# Binaries and the library. The library is copied then renamed, so processes
# that already mapped the old one keep it intact.
run install -d "$prefix/bin" "$prefix/lib/cushare" /etc/cushare /usr/local/share/doc/cushare
for b in cushared cusharectl cushare-device-plugin; do
  [ -e "$build_dir/bin/$b" ] && run install -m 0755 "$build_dir/bin/$b" "$prefix/bin/$b"
done
run install -m 0755 "$build_dir/lib/libcushare.so" "$prefix/lib/cushare/libcushare.so.new"
run mv -f "$prefix/lib/cushare/libcushare.so.new" "$prefix/lib/cushare/libcushare.so"
for d in kubernetes.md docker.md; do
  [ -e "$repo/docs/$d" ] && run install -m 0644 "$repo/docs/$d" /usr/local/share/doc/cushare/
done

# Configuration: never overwrite what the operator edited.
if [ ! -e /etc/cushare/plugin.json ]; then
  run install -m 0644 "$repo/deploy/k8s/plugin.json" /etc/cushare/plugin.json
  if [ "$prefix" != /usr/local ]; then
    run sed -i "s#/usr/local/lib/cushare/libcushare.so#$prefix/lib/cushare/libcushare.so#g" \
      /etc/cushare/plugin.json
  fi
fi

# The run dir survives reboots as an empty folder (tmpfiles.d).
run install -d -m 0755 /run/cushare
if ((dry)); then
  echo "+ write /etc/tmpfiles.d/cushare.conf"
else
  echo "d /run/cushare 0755 root root -" > /etc/tmpfiles.d/cushare.conf
fi

# systemd units: cushared's from deploy/systemd (owned by the daemon), ours here.
units=()
if [ -e "$repo/deploy/systemd/cushared.service" ]; then
  run install -m 0644 "$repo/deploy/systemd/cushared.service" /etc/systemd/system/cushared.service
  units+=(cushared.service)
fi
if ((with_plugin)); then
  run install -m 0644 "$here/cushare-device-plugin.service" /etc/systemd/system/
  units+=(cushare-device-plugin.service)
fi
if command -v systemctl >/dev/null 2>&1 && ((${#units[@]})); then
  run systemctl daemon-reload
  if ((start)); then
    run systemctl enable --now "${units[@]}"
  fi
fi
echo "cushare installed under $prefix (units: ${units[*]:-none})"
