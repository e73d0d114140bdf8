#!/bin/sh
# The one recipe of the Isthmus image, run as root INSIDE the image's root filesystem after the Debian
# packages of packages.txt are installed: by `make image` (in a chroot: mmdebstrap's customize hook
# for `deps`, a chroot into the unpacked base for `app`) and by the Containerfile (one RUN step per
# phase). Both hand it the same inputs, so both images hold the same venv, user and trimmed tree, in
# the same two layers.
#
#   recipe.sh deps DIR   layer 1: the venv /opt/isthmus with every wheel of requirements.lock; DIR holds
#                        requirements.lock and wheels/ (fetched with `pip download --require-hashes`)
#   recipe.sh app DIR    layer 2: the isthmus wheel (DIR/wheels/isthmus-*.whl) into that venv
#   recipe.sh all DIR    both (DIR holds everything)
#
# Two layers because the dependencies change with the lock and Isthmus with every commit: a new
# commit rebuilds and pushes only the small second layer. The caller removes DIR afterwards.
# Nothing here reaches a network: pip runs with --no-index and every dependency must match its hash.
set -eu
# Files readable by everyone (uid 65532 runs the venv) whatever umask the builder has.
umask 022
phase=${1:?usage: recipe.sh deps|app|all DIR}
src=${2:-/tmp/isthmus-build}
here=$(dirname "$0")

export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_ROOT_USER_ACTION=ignore
unset PIP_FIND_LINKS PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE || true
# SOURCE_DATE_EPOCH (set by both builders) makes compileall write hash-checked .pyc files, which
# carry no timestamp, and useradd date the account with it: the same inputs give the same bytes.
: "${SOURCE_DATE_EPOCH:=1704067200}"
export SOURCE_DATE_EPOCH

deps() {
    # Debian's python3 (3.11, the same ABI as the host that fetched the wheels); the venv is only a
    # prefix of its own, so the image's Python is the one Debian patches.
    python3 -m venv /opt/isthmus
    /opt/isthmus/bin/python -m pip install --isolated --no-index --require-hashes --only-binary=:all: \
        --find-links "$src/wheels" -r "$src/requirements.lock"
    # No installer in the image: nothing may change it at run time (`app` borrows Debian's pip wheel).
    /opt/isthmus/bin/python -m pip uninstall --isolated -y -q pip setuptools
    rm -f /opt/isthmus/bin/pip /opt/isthmus/bin/pip3 /opt/isthmus/bin/pip3.*

    # The numeric non-root user the manifests run as (runAsNonRoot needs a number; the name is for ps).
    getent group nonroot >/dev/null || groupadd --gid 65532 nonroot
    getent passwd nonroot >/dev/null || useradd --uid 65532 --gid 65532 --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin nonroot

    haproxy_binds_low_ports

    # Small and free of state (docs, man pages, apt lists, logs): the step every image shares.
    sh "$here/trim.sh"
}

haproxy_binds_low_ports() {
    # The pool manager runs HAProxy as uid 65532 on the host network, and an Ingress wants port 80.
    # Kubernetes' `capabilities.add` cannot give a non-root process a capability across exec
    # (kubernetes/kubernetes#56374: no ambient set), and the namespaced sysctl
    # net.ipv4.ip_unprivileged_port_start is the host's on the host network. A file capability can:
    # exec grants cap_net_bind_service=+ep to HAProxy when the bounding set holds it and no_new_privs
    # is off (the pool manager's allowPrivilegeEscalation: true; docs/lb.md). Written as the xattr
    # setcap would write (linux/capability.h, vfs_cap_data revision 2: magic with the effective flag,
    # then permitted and inheritable, low and high words), so no libcap tool is needed in the image or
    # the build; mmdebstrap's directory, umoci's layers (PAX SCHILY.xattr) and runc's overlay keep it.
    python3 -c 'import os, struct; os.setxattr("/usr/sbin/haproxy", "security.capability", struct.pack("<5I", 0x02000001, 1 << 10, 0, 0, 0))'
}

app() {
    # The project itself: its dependencies are exactly the lock's, so --no-deps. pip runs from the
    # wheel python3-venv ships (ensurepip's), and leaves nothing of itself in the venv.
    pip_wheel=$(ls /usr/share/python-wheels/pip-*.whl | head -n 1)
    /opt/isthmus/bin/python "$pip_wheel/pip" install --isolated --no-index --no-deps \
        "$(ls "$src"/wheels/isthmus-*.whl)"
    rm -rf /root/.cache
}

case "$phase" in
    deps) deps ;;
    app) app ;;
    all) deps; app ;;
    *) echo "recipe.sh: unknown phase $phase (deps, app or all)" >&2; exit 2 ;;
esac
