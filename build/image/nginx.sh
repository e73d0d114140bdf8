#!/bin/sh
# Run as root inside the nginx image's root filesystem (Debian's nginx-light on minbase, installed by
# mmdebstrap): what the official docker.io/library/nginx image does differently from Debian's package.
set -eu
umask 022
# Logs go to the container's stdout/stderr (`kubectl logs`), as the official image links them.
ln -sf /dev/stdout /var/log/nginx/access.log
ln -sf /dev/stderr /var/log/nginx/error.log
# The official default server listens on IPv4 :80 and adds [::]:80 only where IPv6 exists; a pod's
# network namespace may have none, so serve IPv4 only.
sed -i '/listen \[::\]:80/d' /etc/nginx/sites-available/default
# The official page sits at /usr/share/nginx/html (Debian ships it there too): serve it.
sed -i 's#root /var/www/html;#root /usr/share/nginx/html;#' /etc/nginx/sites-available/default
rm -f /var/www/html/index.nginx-debian.html
# nginx chowns its temp directories to www-data at every start unless they already are: own them
# now, so that a container without CAP_CHOWN starts too.
for d in body proxy fastcgi uwsgi scgi; do mkdir -p "/var/lib/nginx/$d"; chown www-data /var/lib/nginx/$d; done
sh "$(dirname "$0")/trim.sh"
