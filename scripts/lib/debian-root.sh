# Sourced by scripts/test-package and scripts/build-image: a minimal Debian root of this machine's own release,
# from the mirror this machine installs from, so binaries built here run there.
#
#   make_debian_root DIRECTORY LOG [EXTRA-PACKAGE,...]
#
# Prints nothing on success; on failure the last lines of LOG and a sentence on standard error, and returns 1.
# With SLEEPPROXY_DEBIAN_ROOT_TAR naming a tar of such a root (scripts/test makes one while it builds) and no extra
# packages, the root is unpacked from it instead.
make_debian_root() {
    local root=$1 log=$2 extra=${3:-}
    if [ -z "$extra" ] && [ -n "${SLEEPPROXY_DEBIAN_ROOT_TAR:-}" ] && [ -s "$SLEEPPROXY_DEBIAN_ROOT_TAR" ]; then
        echo "==> the Debian root made while building"
        mkdir -p "$root"
        tar -C "$root" -xf "$SLEEPPROXY_DEBIAN_ROOT_TAR" >"$log" 2>&1 && return 0
        tail -20 "$log" >&2
        echo "could not unpack $SLEEPPROXY_DEBIAN_ROOT_TAR" >&2
        return 1
    fi
    # shellcheck disable=SC1091
    . /etc/os-release
    local mirror
    mirror=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -n 1 || true)
    [ -n "$mirror" ] || mirror=$(sed -n 's/^deb \(\[[^]]*\] \)\{0,1\}\(http[^ ]*\).*/\2/p' /etc/apt/sources.list 2>/dev/null | grep -v security | head -n 1 || true)
    if [ -z "$mirror" ]; then
        echo "no package mirror found in /etc/apt/sources.list or /etc/apt/sources.list.d" >&2
        return 1
    fi
    echo "==> debootstrap $VERSION_CODENAME from $mirror"
    local include=adduser,libnl-3-200,libnl-route-3-200
    [ -z "$extra" ] || include="$include,$extra"
    if ! debootstrap --variant=minbase --include="$include" "$VERSION_CODENAME" "$root" "$mirror" >"$log" 2>&1; then
        tail -20 "$log" >&2
        echo "debootstrap could not build a $VERSION_CODENAME root from $mirror" >&2
        return 1
    fi
}
