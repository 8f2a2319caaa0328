#!/usr/bin/env bash
# Creates the Python environment of the reference implementations the tests compare
# against (Hugging Face transformers on PyTorch, tokenizers, safetensors, sentencepiece,
# Google's dp-accounting for the privacy accountant, Gymnasium's classic-control
# environments, PEFT for LoRA adapters).
# PyTorch comes from Debian (python3-torch 1.13, CPU); the rest from PyPI at versions that
# support it. Idempotent: does nothing when the environment is complete.
#   scripts/pyref.sh [DIR]   (default .venv/pyref); prints nothing on success
set -euo pipefail
dir="${1:-.venv/pyref}"
stamp="$dir/.complete-v3"
[ -f "$stamp" ] && exit 0

debs="python3-torch python3-numpy python3-venv python3-pip"
missing=""
for p in $debs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "pyref: installing$missing" >&2
  sudo=""; [ "$(id -u)" != "0" ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

echo "pyref: creating $dir" >&2
rm -rf "$dir"
/usr/bin/python3 -m venv --system-site-packages "$dir"
"$dir/bin/pip" install -q --disable-pip-version-check \
  "transformers==4.36.2" "tokenizers==0.15.2" "safetensors==0.4.5" "sentencepiece==0.2.0" \
  "tensorboard==2.15.2" "protobuf<5" >&2
# dp-accounting's SciPy pinned to a release built for Debian's NumPy 1.24 (a newer SciPy
# would pull NumPy 2 into the environment, which Debian's PyTorch 1.13 cannot use)
"$dir/bin/pip" install -q --disable-pip-version-check "scipy==1.11.4" "dp-accounting==0.6.0" >&2
"$dir/bin/python" -c "import torch, transformers, tokenizers, safetensors, sentencepiece, dp_accounting; torch.zeros(1).numpy(); print('pyref: torch', torch.__version__, 'transformers', transformers.__version__)" >&2
# PEFT without its declared dependencies: it asks for torch >= 1.13.0, which Debian's
# 1.13.0a0 does not satisfy by version number, and pip would install a PyTorch 2 with CUDA
# (gigabytes) over it; accelerate (what PEFT imports) accepts Debian's PyTorch.
"$dir/bin/pip" install -q --disable-pip-version-check "gymnasium==0.29.1" "accelerate==0.25.0" >&2
"$dir/bin/pip" install -q --disable-pip-version-check --no-deps "peft==0.7.1" >&2
"$dir/bin/python" -c "import torch, gymnasium, peft; assert torch.__version__.startswith('1.13'), torch.__version__; print('pyref: gymnasium', gymnasium.__version__, 'peft', peft.__version__)" >&2
touch "$stamp"
