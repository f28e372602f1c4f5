#!/usr/bin/env bash
# Installs, from Debian 12's archive, whatever gpuwatch needs that is missing.
#   scripts/deps.sh build   — compiler, CMake, libraries
#   scripts/deps.sh test    — build + GoogleTest, the servers tests start (Prometheus,
#                             Alertmanager, VictoriaMetrics; promtool comes with Prometheus)
#                             and Chromium (the
#                             dashboard's end-to-end test drives it; web/e2e)
#   scripts/deps.sh bench   — test + Google Benchmark, node-exporter, GNU time
# Packages already installed are not touched; apt-get runs only when something is missing.
set -euo pipefail

build_pkgs=(g++ cmake ninja-build pkg-config nlohmann-json3-dev libfmt-dev libcli11-dev
            libcpp-httplib-dev libssl-dev zlib1g-dev libbrotli-dev libre2-dev
            libsnappy-dev libzstd-dev libncurses-dev)
test_pkgs=(libgtest-dev libgmock-dev python3 curl tmux prometheus prometheus-alertmanager
           victoria-metrics openssl chromium)
bench_pkgs=(libbenchmark-dev prometheus-node-exporter time)

want=("${build_pkgs[@]}")
# The dashboard's build (web/): node and npm, unless they are there already (from Debian or
# elsewhere: NodeSource's nodejs carries its own npm and conflicts with Debian's).
command -v node >/dev/null || want+=(nodejs)
command -v npm >/dev/null || want+=(npm)
case "${1:-build}" in
  build) ;;
  test) want+=("${test_pkgs[@]}") ;;
  bench) want+=("${test_pkgs[@]}" "${bench_pkgs[@]}") ;;
  *) echo "usage: $0 build|test|bench" >&2; exit 2 ;;
esac

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
echo "gpuwatch: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# Debian's prometheus packages start system services on install; the tests start their own.
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
for svc in prometheus prometheus-alertmanager victoria-metrics; do
  if [ -d /run/systemd/system ] && printf '%s\n' "${missing[@]}" | grep -qx "$svc"; then
    $SUDO systemctl disable --now "$svc" >/dev/null 2>&1 || true
  fi
done
