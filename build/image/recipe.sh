#!/bin/sh
# The one recipe of the Isthmus image, run as root INSIDE the image's root filesystem after the Debian
# packages of packages.txt are installed: by `make image` (mmdebstrap's customize hook, in a chroot)
# and by the Containerfile (a RUN step). Both hand it the same inputs, so both images hold the same
# venv, the same user and the same trimmed tree.
#
#   recipe.sh DIR    DIR holds requirements.lock and wheels/ (every locked wheel, fetched with
#                    `pip download --require-hashes`, and the isthmus wheel); the caller removes DIR
#
# Nothing here reaches a network: pip runs with --no-index and every wheel must match its hash.
set -eu
src=${1:-/tmp/isthmus-build}

export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_ROOT_USER_ACTION=ignore
unset PIP_FIND_LINKS PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE || true
# SOURCE_DATE_EPOCH (set by both builders) makes compileall write hash-checked .pyc files, which
# carry no timestamp: the same wheels give the same bytes.
: "${SOURCE_DATE_EPOCH:=0}"
export SOURCE_DATE_EPOCH

# Debian's python3 (3.11, the same ABI as the host that fetched the wheels); the venv is only a
# prefix of its own, so the image's Python is the one Debian patches.
python3 -m venv /opt/isthmus
/opt/isthmus/bin/python -m pip install --isolated --no-index --require-hashes --only-binary=:all: \
    --find-links "$src/wheels" -r "$src/requirements.lock"
# The project itself: its dependencies are exactly the lock's, so --no-deps.
/opt/isthmus/bin/python -m pip install --isolated --no-index --no-deps --find-links "$src/wheels" \
    "$(ls "$src"/wheels/isthmus-*.whl)"
# No installer in the image: nothing may change it at run time.
/opt/isthmus/bin/python -m pip uninstall --isolated -y -q pip setuptools 2>/dev/null \
    || /opt/isthmus/bin/python -m pip uninstall --isolated -y -q pip
rm -f /opt/isthmus/bin/pip /opt/isthmus/bin/pip3 /opt/isthmus/bin/pip3.*
# Debian's dist-packages .pyc (py3compile) are kept; the venv's were written by pip, hash-checked.

# The numeric non-root user the manifests run as (runAsNonRoot needs a number; the name is for ps).
getent group nonroot >/dev/null || groupadd --gid 65532 nonroot
getent passwd nonroot >/dev/null || useradd --uid 65532 --gid 65532 --no-create-home \
    --home-dir /nonexistent --shell /usr/sbin/nologin nonroot

# Small and free of state (docs, man pages, apt lists, logs): the step every image shares.
sh "$(dirname "$0")/trim.sh"
