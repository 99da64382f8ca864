#!/usr/bin/env bash
# Installs what qvl needs on Debian 12 / Ubuntu 22.04+ (apt). Used by `make serve` and by CI.
#   tools/install-deps.sh          build dependencies (compiler, libraries), only if missing
#   tools/install-deps.sh --test   also what `make test` needs (clang, curl, chromium, Node.js/npm)
# Runs apt through sudo when not root. Does nothing when everything is already there.
set -euo pipefail

want_test=0
[ "${1:-}" = "--test" ] && want_test=1

# Library pkg-config names (see PKGS in the Makefile) and the Debian/Ubuntu packages that provide them;
# libjs-marked and node-dompurify are the web page's scripts (tools/web_vendor.txt).
PC_NAMES="libjpeg libpng libwebp libcjson libcurl libcrypto libmicrohttpd libxxhash yaml-0.1 libedit sqlite3
  libavformat libavcodec libswscale libavutil zlib"
BUILD_PACKAGES="build-essential pkg-config ca-certificates libjpeg-dev libpng-dev libwebp-dev libcjson-dev
  libmicrohttpd-dev libyaml-dev libxxhash-dev libcurl4-openssl-dev libssl-dev libedit-dev libsqlite3-dev
  libavformat-dev libavcodec-dev libswscale-dev libavutil-dev zlib1g-dev libjs-marked node-dompurify"
TEST_PACKAGES="clang curl chromium tmux nginx haproxy"

need=()
if ! command -v cc >/dev/null 2>&1 || ! command -v make >/dev/null 2>&1 || ! command -v pkg-config >/dev/null 2>&1 ||
  ! pkg-config --exists $PC_NAMES 2>/dev/null ||
  ! [ -f /usr/share/javascript/marked/marked.umd.js ] || ! [ -f /usr/share/nodejs/dompurify/dist/purify.min.js ]; then
  need+=($BUILD_PACKAGES)
fi
if [ $want_test = 1 ]; then
  command -v clang >/dev/null 2>&1 || need+=(clang)
  command -v curl >/dev/null 2>&1 || need+=(curl)
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
  command -v tmux >/dev/null 2>&1 || need+=(tmux) # qvl chat driven through a pseudo-terminal
  # the deploy tests put two replicas behind the real balancers (deploy/)
  PATH=$PATH:/usr/sbin command -v nginx >/dev/null 2>&1 || need+=(nginx)
  PATH=$PATH:/usr/sbin command -v haproxy >/dev/null 2>&1 || need+=(haproxy)
  # Node.js may come from NodeSource (with its own npm); Debian's npm conflicts with that build,
  # so Debian's nodejs + npm are installed only when there is no node at all.
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    need+=(nodejs npm)
  fi
fi
[ ${#need[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: no apt-get here; install these (or your system's equivalents) by hand:" >&2
  echo "  ${need[*]}" >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "install-deps: run as root or install sudo" >&2; exit 1; }
  SUDO=sudo
fi
echo "install-deps: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# Ubuntu names its Chromium package chromium-browser (a snap wrapper); try Debian's name first.
if ! $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; then
  alt=("${need[@]/#chromium/chromium-browser}")
  $SUDO apt-get install -y -qq --no-install-recommends "${alt[@]}" >/dev/null
fi
