#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build and test redco.
# Only Debian packages; runs apt-get only when something is missing.
set -euo pipefail

# OpenCL: the ICD loader and headers, PoCL (OpenCL on the CPU, so every kernel runs in the
# tests), clinfo, and CLBlast (the OpenCL BLAS). zlib reads gzip-compressed IDX files;
# dataset-fashion-mnist puts Fashion-MNIST's IDX files in /usr/share/datasets/fashion-mnist.
# oneDNN (libdnnl-dev) runs the CPU's bf16 matrix products on its bf16 units.
# clang, its OpenMP and its runtimes (libFuzzer, ASan, UBSan) build the fuzzers (make fuzz).
# iproute2 (ip, tc) makes the test hosts of tests/hosts/hosts.sh (network namespaces).
packages="build-essential cmake pkg-config libopenblas-openmp-dev libdnnl-dev libopenmpi-dev openmpi-bin libjansson-dev libutf8proc-dev python3-venv ocl-icd-opencl-dev opencl-c-headers pocl-opencl-icd clinfo libclblast-dev zlib1g-dev dataset-fashion-mnist clang libomp-dev libclang-rt-dev iproute2"

missing=""
for p in $packages; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $p"
  fi
done

if [ -z "$missing" ]; then
  exit 0
fi

echo "setup: installing$missing" >&2
sudo=""
if [ "$(id -u)" != "0" ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
