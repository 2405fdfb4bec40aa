#!/bin/sh
# tests/torch_layers.sh — runs every tests/torch_layer_*.py (one glia layer's CPU kernel against PyTorch's module of
# the same name, through tests/torchref.py) with /usr/bin/python3; skipped (77) where that python or its torch is
# missing. Not a GPU test.
py=/usr/bin/python3
[ -x "$py" ] && "$py" -c "import torch" 2>/dev/null || { echo "torch_layers: no /usr/bin/python3 with torch: skipped"; exit 77; }
src=${GLIA_SRCDIR:-.}/tests
status=0 n=0
for t in "$src"/torch_layer_*.py; do
    [ -f "$t" ] || continue
    n=$((n + 1))
    echo "== $(basename "$t")"
    PYTHONPATH="$src" "$py" "$t" || status=1
done
echo "torch_layers: $n programs"
[ "$n" -gt 0 ] || { echo "torch_layers: no tests/torch_layer_*.py in $src"; exit 1; }
exit $status
