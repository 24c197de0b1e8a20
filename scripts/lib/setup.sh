# Sourced by scripts/dev and scripts/test: makes the checkout ready to run, idempotently.
# - .venv with the project installed editable, with the test and bench extras;
#   reinstalled whenever pyproject.toml changes.
# - node_modules from package-lock.json (Azurite; the Node taskcluster-client for
#   tests/e2e/test_node_client.py; taskcluster-client-web and esbuild for the dashboard), via npm ci when the lock changes; then the dashboard's client bundle
#   (coordinator/ui/vendor, committed so the wheel has it) is rebuilt from the new lock.
# Needs python3 (3.11+) with venv, and node/npm; installs the distribution's packages with apt if
# either is missing.

set -euo pipefail

need_apt=()
command -v python3 >/dev/null 2>&1 || need_apt+=(python3 python3-venv python3-pip)
command -v npm >/dev/null 2>&1 || need_apt+=(nodejs npm)
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "setup: installing ${need_apt[*]} with apt-get"
    apt-get update -qq && apt-get install -y -qq "${need_apt[@]}"
fi

if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv"
    python3 -m venv .venv
fi
stamp=.venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)
if [ ! -f "$stamp" ]; then
    echo "setup: installing Python dependencies into .venv"
    .venv/bin/python -m pip install -q --upgrade pip
    # setuptools warns on every editable install that a folder named like the package could
    # shadow it; that is this checkout itself, so the warning only buries real problems.
    # Playwright (test extra) drives Debian's chromium; it must never download browsers.
    PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 PYTHONWARNINGS=ignore \
        .venv/bin/python -m pip install -q -e '.[test,bench]'
    rm -f .venv/.installed-*
    touch "$stamp"
fi

lock_stamp=node_modules/.installed-$(sha256sum package-lock.json | cut -c1-16)
if [ ! -f "$lock_stamp" ]; then
    echo "setup: installing Azurite, the Node taskcluster-client and the dashboard's client (npm ci)"
    npm ci --no-audit --no-fund --loglevel=error
    echo "setup: bundling taskcluster-client-web into coordinator/ui/vendor"
    node coordinator/ui/build.mjs
    touch "$lock_stamp"
fi
