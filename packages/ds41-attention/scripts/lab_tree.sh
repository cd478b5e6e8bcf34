#!/usr/bin/env bash
# A copy of the attention package with a lab patch applied, for side-by-side A/B runs:
#   bash packages/ds41-attention/scripts/lab_tree.sh DEST NAME        (DEST: the package copy)
#   bash packages/ds41-attention/scripts/lab_tree.sh DEST --base REV  (the package at commit REV)
#   bash packages/ds41-attention/scripts/lab_tree.sh --list NAME      (the chain, oldest first)
# NAME is a patch under scripts/lab/ without `.patch`. A patch whose header has a line
# `Applies after: OTHER.patch` is a step on top of OTHER; the chain back to a patch without
# that line is applied in order (each with -p5 inside the package copy). The chain's first
# patch applies to the working tree's package, or, where its header has a line `Base: REV`, to
# the package at commit REV (read with git: run from a clone).
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
copy_at() {  # copy_at DEST REV: the package as of commit REV
  local top tmp
  top=$(git -C "$L" rev-parse --show-toplevel)
  tmp=$(mktemp -d)
  git -C "$top" archive "$2" packages/ds41-attention/src/ds41_attention | tar -x -C "$tmp"
  rm -rf "$1" && mv "$tmp/packages/ds41-attention/src/ds41_attention" "$1" && rm -rf "$tmp"
}
if [ "$1" = --list ]; then chain "$2"; exit 0; fi
dest=$1
if [ "$2" = --base ]; then copy_at "$dest" "$3"; exit 0; fi
names=$(chain "$2")
base=$(sed -n '/^--- /q; s/^Base: \([0-9a-f]*\)$/\1/p' "$L/${names%% *}.patch")
if [ -n "$base" ]; then
  copy_at "$dest" "$base"
else
  src="$(cd "$(dirname "$0")/.." && pwd)/src/ds41_attention"
  rm -rf "$dest" && cp -r "$src" "$dest"
fi
for n in $names; do patch -s -p5 -d "$dest" < "$L/$n.patch"; done
