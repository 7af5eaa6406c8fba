#!/usr/bin/env bash
# Builds and installs sleepproxy-client and its systemd-sleep hook on this Linux host (run from the repository,
# as root). The host then registers with a sleep proxy before every suspend and hands back on resume.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "install-client.sh: run as root (sudo deploy/install-client.sh)" >&2; exit 1; }
command -v swift >/dev/null || { echo "install-client.sh: swift is not on PATH: install Swift 6.3 (https://www.swift.org/install/linux/)" >&2; exit 1; }
missing=()
for package in pkg-config libnl-3-dev libnl-route-3-dev avahi-utils ethtool; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ "${#missing[@]}" -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
swift build -c release --static-swift-stdlib --product sleepproxy-client
install -m 0755 "$(swift build -c release --show-bin-path)/sleepproxy-client" /usr/bin/
install -d /usr/lib/systemd/system-sleep
install -m 0755 deploy/sleepproxy-client.sleep /usr/lib/systemd/system-sleep/sleepproxy-client
[ -e /etc/default/sleepproxy-client ] || install -m 0644 deploy/sleepproxy-client.default /etc/default/sleepproxy-client
sleepproxy-client proxies || echo "no sleep proxy answered yet; the hook will look again before each suspend"
