# The device machine's Python environment for the ds41 scripts, sourced from the repository
# root (`source scripts/device_env.sh`): the H200 image has no install of ds41, nox or hydra, so
# the wheels carried in .whl/ (hydra-core, omegaconf, antlr4) go into /tmp/site when present,
# the four packages' sources and /tmp/site go on PYTHONPATH (absolute, so a script may cd), the
# output is unbuffered and the Triton interpreter is off (kernels compile for the GPU).
if compgen -G ".whl/*" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/* && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
_ds41_src=$PWD/packages
export PYTHONPATH=$_ds41_src/ds41-cache/src:$_ds41_src/ds41-indexer/src:$_ds41_src/ds41-attention/src:$_ds41_src/ds41-runner/src${PYTHONPATH:+:$PYTHONPATH}
unset _ds41_src TRITON_INTERPRET
export PYTHONUNBUFFERED=1
