#!/usr/bin/env bash
# A copy of the attention package with a lab patch applied, for side-by-side A/B runs:
#   bash packages/ds41-attention/scripts/lab_tree.sh DEST NAME    (DEST: the package copy)
#   bash packages/ds41-attention/scripts/lab_tree.sh --list NAME  (the chain, oldest first)
# NAME is a patch under scripts/lab/ without `.patch`. A patch whose header has a line
# `Applies after: OTHER.patch` is a step on top of OTHER; the chain back to a patch without
# that line is applied in order (each with -p5 inside the package copy).
set -eu
L="$(cd "$(dirname "$0")" && pwd)/lab"
chain() {
  local n=$1 out=""
  while [ -n "$n" ]; do
    [ -f "$L/$n.patch" ] || { echo "lab_tree.sh: no patch $L/$n.patch" >&2; exit 2; }
    out="$n $out"
    n=$(sed -n '/^--- /q; s/^Applies after: \(.*\)\.patch$/\1/p' "$L/$n.patch")
  done
  echo $out
}
if [ "$1" = --list ]; then chain "$2"; exit 0; fi
dest=$1; names=$(chain "$2")
src="$(cd "$(dirname "$0")/.." && pwd)/src/ds41_attention"
rm -rf "$dest" && cp -r "$src" "$dest"
for n in $names; do patch -s -p5 -d "$dest" < "$L/$n.patch"; done
