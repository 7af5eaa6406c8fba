#!/usr/bin/env bash
# Builds sleep-proxy in release mode and installs it as a systemd service on this machine (Debian or Ubuntu):
# binaries in /usr/bin, the unit in /etc/systemd/system, the configuration in /etc/sleep-proxy (kept if it
# exists), a system user "sleep-proxy", state in /var/lib/sleep-proxy. Run from the repository as root.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "install.sh: run as root (sudo deploy/install.sh)" >&2; exit 1; }
command -v swift >/dev/null || { echo "install.sh: swift is not on PATH: install Swift 6.3 (https://www.swift.org/install/linux/)" >&2; exit 1; }

missing=()
for package in pkg-config libnl-3-dev libnl-route-3-dev; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ "${#missing[@]}" -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The Swift runtime is linked in, so the binaries run without the toolchain.
swift build -c release --static-swift-stdlib --product sleepproxyd
swift build -c release --static-swift-stdlib --product sleepproxyctl
bin=$(swift build -c release --show-bin-path)

getent group sleep-proxy >/dev/null || groupadd --system sleep-proxy
getent passwd sleep-proxy >/dev/null || useradd --system --gid sleep-proxy --no-create-home --home-dir /var/lib/sleep-proxy --shell /usr/sbin/nologin sleep-proxy

install -m 0755 "$bin/sleepproxyd" "$bin/sleepproxyctl" /usr/bin/
install -d -m 0755 /etc/sleep-proxy /usr/share/doc/sleep-proxy
[ -e /etc/sleep-proxy/sleepproxyd.conf ] || install -m 0644 deploy/sleepproxyd.conf /etc/sleep-proxy/sleepproxyd.conf
install -m 0644 README.md CHANGELOG.md /usr/share/doc/sleep-proxy/
install -d /usr/share/doc/sleep-proxy/docs
install -m 0644 docs/*.md /usr/share/doc/sleep-proxy/docs/
install -m 0644 deploy/sleep-proxy.service /etc/systemd/system/sleep-proxy.service
install -d /usr/lib/sleep-proxy
install -m 0755 deploy/sleep-proxy-leave /usr/lib/sleep-proxy/sleep-proxy-leave
/usr/bin/sleepproxyctl --generate-completion-script bash > /usr/share/bash-completion/completions/sleepproxyctl 2>/dev/null || true

systemctl daemon-reload
systemctl enable --now sleep-proxy.service
echo "sleep-proxy is running: systemctl status sleep-proxy; sudo sleepproxyctl status (or add yourself to the sleep-proxy group)"
