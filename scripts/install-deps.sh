#!/usr/bin/env bash
# Installs what prepfs needs to build and test, only where it is missing:
#   Debian: fuse3 (fusermount3, /dev/fuse), cmake + nasm + pkg-config (bundled libjpeg-turbo 3),
#           redis-server (the remote tier's tests start real servers; GETDEL needs Redis >= 6.2),
#           redis-tools (redis-cli --cluster create: the tests' three-node Redis Cluster),
#           openssl (the TLS test's throwaway CA and server certificate)
#   Python: pillow + numpy (the tests compare against PIL), maturin (the Python module),
#           moto[server] (the object store source's tests run a real S3 server on loopback)
set -euo pipefail

missing=()
command -v fusermount3 >/dev/null || missing+=(fuse3)
command -v cmake >/dev/null || missing+=(cmake)
command -v nasm >/dev/null || missing+=(nasm)
command -v pkg-config >/dev/null || missing+=(pkg-config)
command -v redis-server >/dev/null || missing+=(redis-server)
command -v redis-cli >/dev/null || missing+=(redis-tools)
command -v openssl >/dev/null || missing+=(openssl)
command -v python3 >/dev/null || missing+=(python3 python3-pip)
# The loader's access test runs Debian's own python3 as `nobody`.
[ -x /usr/bin/python3 ] || missing+=(python3)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! python3 -c "import PIL, numpy" 2>/dev/null; then
  echo "installing Python packages: pillow numpy"
  python3 -m pip install -q pillow numpy 2>/dev/null \
    || python3 -m pip install -q --break-system-packages pillow numpy
fi

# maturin builds the Python module (python/, `make python`).
if ! python3 -m maturin --version >/dev/null 2>&1; then
  echo "installing Python packages: maturin"
  python3 -m pip install -q maturin 2>/dev/null \
    || python3 -m pip install -q --break-system-packages maturin
fi

# The object store source's tests (source/s3, tests/mount_s3.rs) start moto's S3 server.
if ! python3 -c "import moto.server, flask, werkzeug, boto3" 2>/dev/null; then
  echo "installing Python packages: moto[server]"
  python3 -m pip install -q "moto[server]" 2>/dev/null \
    || python3 -m pip install -q --break-system-packages "moto[server]"
fi

if [ ! -e /dev/fuse ]; then
  echo "warning: /dev/fuse is missing; mounting needs the fuse kernel module (modprobe fuse)" >&2
fi
