#!/usr/bin/env bash
# Builds a Debian package of sleep-proxy from this repository: deploy/build-deb.sh [OUTPUT_DIRECTORY].
# The binaries are linked with the Swift runtime, so the package needs only libnl at run time.
#   deploy/build-deb.sh --build-only    only the release build of the two binaries
#   SKIP_BUILD=1                        package what the last release build left
#   SLEEPPROXY_SCRATCH=DIR              the build directory (.build by default; scripts/test builds beside its tests')
set -euo pipefail
cd "$(dirname "$0")/.."
scratch=(--scratch-path "${SLEEPPROXY_SCRATCH:-.build}")
if [ -z "${SKIP_BUILD:-}" ]; then
    swift build -c release "${scratch[@]}" --static-swift-stdlib --product sleepproxyd
    swift build -c release "${scratch[@]}" --static-swift-stdlib --product sleepproxyctl
fi
[ "${1:-}" != "--build-only" ] || exit 0
out=${1:-$PWD}
version=$(sed -n 's/.*public static let current = "\(.*\)"/\1/p' Sources/SleepProxyControl/Version.swift)
arch=$(dpkg --print-architecture)
bin=$(swift build -c release "${scratch[@]}" --show-bin-path)

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
install -d "$root/DEBIAN" "$root/usr/bin" "$root/lib/systemd/system" "$root/etc/sleep-proxy" "$root/usr/share/doc/sleep-proxy"
install -m 0755 "$bin/sleepproxyd" "$bin/sleepproxyctl" "$root/usr/bin/"
# Debug information is most of a binary's size (about 20 MB each); function names stay, so a crash's backtrace
# still names where it happened.
strip --strip-debug "$root/usr/bin/sleepproxyd" "$root/usr/bin/sleepproxyctl"
install -m 0644 deploy/sleep-proxy.service "$root/lib/systemd/system/sleep-proxy.service"
install -d "$root/usr/lib/sleep-proxy"
install -m 0755 deploy/sleep-proxy-leave "$root/usr/lib/sleep-proxy/sleep-proxy-leave"
install -m 0644 deploy/sleepproxyd.conf "$root/etc/sleep-proxy/sleepproxyd.conf"
install -m 0644 README.md CHANGELOG.md "$root/usr/share/doc/sleep-proxy/"
install -d "$root/usr/share/doc/sleep-proxy/docs"
install -m 0644 docs/*.md "$root/usr/share/doc/sleep-proxy/docs/"
install -m 0755 deploy/debian/postinst deploy/debian/prerm deploy/debian/postrm "$root/DEBIAN/"
echo "/etc/sleep-proxy/sleepproxyd.conf" > "$root/DEBIAN/conffiles"
cat > "$root/DEBIAN/control" <<CONTROL
Package: sleep-proxy
Version: $version
Architecture: $arch
Maintainer: sleep-proxy developers <sleep-proxy@localhost>
Depends: libc6, libstdc++6, libgcc-s1, libnl-3-200, libnl-route-3-200, adduser
Section: net
Priority: optional
Description: Bonjour Sleep Proxy for Linux
 Keeps sleeping Macs, Apple TVs and Linux hosts discoverable over mDNS while they
 sleep, answers ARP and neighbour discovery for them, and wakes them with a
 Wake-on-LAN magic packet when someone connects to one of their services.
CONTROL
fakeroot dpkg-deb --build "$root" "$out/sleep-proxy_${version}_${arch}.deb"
