#!/usr/bin/env bash
# Finds a Chromium for the console's browser tests (integration/browser_test.go),
# installing Debian's chromium package when there is none and this runs as root
# with apt-get. Its last line of output is the browser's path, or an empty line
# when there is none (the browser tests then say they are skipped). It never
# fails the test run: a machine without a browser still runs every other test.
set -uo pipefail

find_browser() {
  for name in chromium chromium-browser google-chrome google-chrome-stable; do
    if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return 0; fi
  done
  return 1
}

if [ -n "${TANDEM_CHROMIUM:-}" ] && [ -x "$TANDEM_CHROMIUM" ]; then
  echo "$TANDEM_CHROMIUM"; exit 0
fi
if path=$(find_browser); then
  echo "$path"; exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian's chromium for the browser tests (apt-get install -y chromium)" >&2
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >&2; then
    echo "apt-get could not install chromium" >&2
  fi
else
  echo "no Chromium, and no root with apt-get to install it" >&2
fi
find_browser || echo ""
exit 0
