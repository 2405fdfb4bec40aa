#!/bin/sh
# tests/torch_optim.sh — runs tests/torch_optim.py (glia's CPU optimizer kernels against PyTorch implementations of
# their rules) with /usr/bin/python3; skipped (77) where that python or its torch is missing. Not a GPU test.
py=/usr/bin/python3
[ -x "$py" ] && "$py" -c "import torch" 2>/dev/null || { echo "torch_optim: no /usr/bin/python3 with torch: skipped"; exit 77; }
exec "$py" "${GLIA_SRCDIR:-.}/tests/torch_optim.py"
