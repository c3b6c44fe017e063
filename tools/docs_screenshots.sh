#!/usr/bin/env bash
# Screenshots of the built documentation site, taken with a headless Chromium, to look at
# what a reader sees (docs/working_on_docs.md): wide tables that must scroll, not be clipped,
# and plots that must be readable at the page's width.
#
#   bash tools/docs_screenshots.sh [HTML_DIR [OUT_DIR]]
#
# HTML_DIR: the built site (default docs/_build/html; build it first, as CI does:
# sphinx-build -W -n --keep-going -q -b html docs docs/_build/html). OUT_DIR: where the PNGs
# go (default docs/_build/screenshots, git-ignored with the build). The browser: $CHROMIUM, else
# chromium, chromium-browser or google-chrome on PATH (Debian: apt-get install chromium).
# Each page is shot in a 1280 x 2000 window (WIDTH, HEIGHT override it); PAGES overrides the
# list (space-separated paths without .html).
set -euo pipefail
cd "$(dirname "$0")/.."
html=${1:-docs/_build/html}
out=${2:-docs/_build/screenshots}
browser=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)}
[ -n "$browser" ] || { echo "docs_screenshots: no chromium found (set CHROMIUM)" >&2; exit 1; }
[ -f "$html/index.html" ] || { echo "docs_screenshots: no built site in $html" >&2; exit 1; }
default_pages="index getting_started exchange api api/codec api/generated/jax_lossy_comm.compress"
default_pages+=" gpu benchmarks benchmarks/codecs benchmarks/training benchmarks/link"
read -r -a pages <<< "${PAGES:-$default_pages}"
mkdir -p "$out"
html=$(cd "$html" && pwd)
for page in "${pages[@]}"; do
  png="$out/${page//\//_}.png"
  "$browser" --headless --no-sandbox --disable-gpu --force-device-scale-factor=1 \
    --window-size="${WIDTH:-1280},${HEIGHT:-2000}" --screenshot="$png" "file://$html/$page.html" \
    > /dev/null 2>&1 || { echo "docs_screenshots: $page failed" >&2; exit 1; }
  echo "$png"
done
