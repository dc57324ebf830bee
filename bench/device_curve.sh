#!/usr/bin/env bash
# The scaling curve (issue 22) on the GPU machine's host, through the device tool:
#
#   run(command="bash bench/device_curve.sh", carry=[".whl", ".devdata"], timeout_s=600)
#
# with, in this checkout (ignored folders): .whl/ the cp312 wheels the host lacks (msgspec, orjson,
# isal: `pip download --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64
# --no-deps -d .whl msgspec orjson isal`), .devdata/bench/big_train.json.xz (`xz -k` of
# bench/data/big_train.json). The curve comes back as $OUT/curve.md.
#
# The host's Python (/opt/torch/.venv: pyarrow, numpy, click) runs with PYTHONDONTWRITEBYTECODE=1 and
# its packages hold no bytecode, so every process there compiles numpy, pyarrow and click from
# source as it starts (~0.4 s there: numpy's import 0.27-0.38 s instead of 0.11-0.17 s). An
# installed package has its bytecode (pip compiles it), so this compiles it first, as the curve's
# numbers would otherwise measure the host's set-up, not traceconv.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .venv && ln -s /opt/torch/.venv .venv
.venv/bin/python -m pip install -q --no-index --no-deps .whl/*.whl
# installed as a user installs it (a wheel): an editable install adds a finder to every start (~15 ms there)
.venv/bin/python -m pip install -q --no-deps --no-build-isolation .
site=$(.venv/bin/python -c "import numpy, os; print(os.path.dirname(os.path.dirname(numpy.__file__)))")
for pkg in numpy pyarrow click msgspec isal typing_extensions.py traceconv; do
  [ -e "$site/$pkg" ] && .venv/bin/python -m compileall -q -j 0 "$site/$pkg" >/dev/null || true
done
.venv/bin/python -m compileall -q traceconv bench >/dev/null
mkdir -p bench/data
[ -s bench/data/big_train.json ] || xz -dkc .devdata/bench/big_train.json.xz >bench/data/big_train.json
[ -s bench/data/big_train_x4.json ] ||
  .venv/bin/python bench/make_big.py bench/data/big_train.json bench/data/big_train_x4.json --copies 4
cd bench
timeout 500 ../.venv/bin/python curve.py --inputs big,x4 --runs 3
cp results/curve.md "${OUT:-/tmp}/"
