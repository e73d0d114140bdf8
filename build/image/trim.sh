#!/bin/sh
# Run as root inside an image's root filesystem, last: what a container never reads goes, and so does
# what records when or where it was built. Shared by recipe.sh (the Isthmus image, both builders)
# and nginx.sh. The copyright files stay: they are the packages' licences.
set -eu
find /usr/share/doc -mindepth 1 -not -name copyright -not -type d -delete 2>/dev/null || true
find /usr/share/doc -mindepth 1 -type d -empty -delete 2>/dev/null || true
rm -rf /usr/share/man/* /usr/share/info/* /usr/share/groff/* /usr/share/lintian/* /usr/share/linda/*
find /usr/share/locale -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} + 2>/dev/null || true
rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old /var/lib/dpkg/*-old
rm -rf /var/log/apt/* /var/log/dpkg.log /var/log/alternatives.log /var/log/bootstrap.log
rm -f /var/cache/ldconfig/aux-cache /etc/machine-id /var/lib/dbus/machine-id
rm -rf /root/.cache
