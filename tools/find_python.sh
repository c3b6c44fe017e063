#!/usr/bin/env bash
# Prints the path of a Python interpreter of version $1 (e.g. 3.12), or fails with a message.
# Looked up in order: $PYTHON<MAJOR><MINOR> (e.g. PYTHON312), pyenv's versions/<version>*
# (`pyenv root`, else ~/.pyenv or /root/.pyenv), then python<version> on PATH.
set -euo pipefail
want=${1:?usage: find_python.sh 3.12}
var="PYTHON${want/./}"
check() {  # the interpreter runs and is the version wanted
  [ -x "$1" ] && [ "$("$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = "$want" ]
}
if [ -n "${!var:-}" ]; then
  check "${!var}" && { echo "${!var}"; exit 0; }
  echo "find_python.sh: \$$var=${!var} is not a Python $want interpreter" >&2
  exit 1
fi
roots=()
if command -v pyenv >/dev/null 2>&1; then roots+=("$(pyenv root)"); fi
roots+=("${PYENV_ROOT:-$HOME/.pyenv}" /root/.pyenv)
for root in "${roots[@]}"; do
  for py in $(ls -d "$root"/versions/"$want"*/bin/python3 2>/dev/null | sort -rV); do
    check "$py" && { echo "$py"; exit 0; }
  done
done
if command -v "python$want" >/dev/null 2>&1 && check "$(command -v "python$want")"; then
  command -v "python$want"
  exit 0
fi
echo "find_python.sh: no Python $want found (set $var, or install it with pyenv: pyenv install $want)" >&2
exit 1
