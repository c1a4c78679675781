#!/bin/sh
# certbot deploy hook: copy a new certificate where the sandboxed service can read it, then reload.
#
#   certbot certonly --standalone -d kb.example.com \
#       --deploy-hook /opt/markproto/deploy/certbot-deploy-hook.sh
#
# certbot keeps its keys root-only under /etc/letsencrypt, and markproto.service runs as its own
# user with PrivateUsers=yes, so it reads copies it owns. The key is replaced before the certificate
# and each by rename, so a reload never sees a half-written file. certbot sets RENEWED_LINEAGE and
# remembers the hook for the renewals of this certificate only. MARKPROTO_USER and MARKPROTO_STATE
# override the service user and state directory.
set -eu

: "${RENEWED_LINEAGE:?run this from certbot as a --deploy-hook}"
user=${MARKPROTO_USER:-markproto}
dir=${MARKPROTO_STATE:-/var/lib/markproto}/tls

install -d -o "$user" -g "$user" -m 0700 "$dir"
install -o "$user" -g "$user" -m 0600 "$RENEWED_LINEAGE/privkey.pem" "$dir/.privkey.pem.new"
mv -f "$dir/.privkey.pem.new" "$dir/privkey.pem"
install -o "$user" -g "$user" -m 0644 "$RENEWED_LINEAGE/fullchain.pem" "$dir/.fullchain.pem.new"
mv -f "$dir/.fullchain.pem.new" "$dir/fullchain.pem"
echo "markproto: certificate copied to $dir"

# A stopped service reads the files when it starts; a running one reloads them on SIGHUP.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet markproto.service; then
    systemctl reload markproto.service
fi
