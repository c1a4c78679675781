#!/usr/bin/env bash
# Install markproto as a hardened systemd service (deploy/README.md), or remove it again.
#
#   sudo deploy/install.sh [install] [--wheel FILE] [--port N] [--python PYTHON]
#   sudo deploy/install.sh uninstall [--purge]
#   deploy/install.sh --destdir DIR ...   # stage into DIR: no root needed, the system untouched
#
# Every step checks before it changes anything, so a second run only redoes what is out of date.
set -euo pipefail

NAME=markproto
PORT_DEFAULT=6309
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

action=install
prefix=/opt/markproto
destdir=${DESTDIR:-}
python=${PYTHON:-}
wheel=
port=
purge=0
keep_data=0

usage() {
    sed -n '2,6s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
    cat <<EOF

Options:
  --wheel FILE     install this markproto wheel (default: the checkout holding this script)
  --port N         UDP port for a new environment file (default: $PORT_DEFAULT)
  --python PYTHON  interpreter for the venv: Python >= 3.11, 64-bit (default: /usr/bin/python3)
  --prefix DIR     where the venv goes (default: /opt/markproto)
  --destdir DIR    stage every file under DIR; skip user, sysctl, ufw and systemd (also DESTDIR=)
  --purge          uninstall: also delete /var/lib/markproto (every document, the tokens,
                   the certificate), /etc/markproto and the user; without it they stay
  --keep-data      uninstall: keep them (the default; accepted for older scripts)
EOF
}

die() {
    printf 'install.sh: %s\n' "$*" >&2
    exit 1
}
step() { printf '==> %s\n' "$*"; }
note() { printf '    %s\n' "$*"; }
have() { command -v "$1" >/dev/null 2>&1; }

while [ $# -gt 0 ]; do
    case $1 in
    install | uninstall) action=$1 ;;
    --wheel) wheel=${2:?--wheel needs a file} && shift ;;
    --port) port=${2:?--port needs a number} && shift ;;
    --python) python=${2:?--python needs an interpreter} && shift ;;
    --prefix) prefix=${2:?--prefix needs a directory} && shift ;;
    --destdir) destdir=${2:?--destdir needs a directory} && shift ;;
    --purge) purge=1 ;;
    --keep-data) keep_data=1 ;;
    -h | --help) usage && exit 0 ;;
    *) usage >&2 && die "unknown argument: $1" ;;
    esac
    shift
done

if [ "$purge" = 1 ] && [ "$keep_data" = 1 ]; then
    die "--purge and --keep-data contradict each other: give one"
fi

case $prefix in
/?*) prefix=${prefix%/} ;;
*) die "--prefix must be an absolute path: $prefix" ;;
esac
if [ -n "$port" ] && ! { [[ $port =~ ^[0-9]{1,5}$ ]] && ((port >= 1 && port <= 65535)); }; then
    die "--port must be a port number: $port"
fi
if [ -n "$destdir" ]; then
    mkdir -p "$destdir"
    destdir=$(cd "$destdir" && pwd)
fi

venv=$prefix/venv
stamp=$prefix/installed-from
etc=/etc/$NAME
env_file=$etc/$NAME.env
state=/var/lib/$NAME
unit=/etc/systemd/system/$NAME.service
sysctl_file=/etc/sysctl.d/60-$NAME.conf
changed=0

staged() { [ -n "$destdir" ]; }
systemd_up() { ! staged && [ -d /run/systemd/system ] && have systemctl; }
ufw_active() { ! staged && have ufw && ufw status 2>/dev/null | grep -q '^Status: active'; }

# put MODE PATH: install stdin as PATH (under the staging dir) unless it already holds exactly that.
put() {
    local mode=$1 target=$destdir$2 tmp
    tmp=$(mktemp)
    cat >"$tmp"
    if [ -f "$target" ] && cmp -s "$tmp" "$target"; then
        rm -f "$tmp"
        note "unchanged $2"
        return
    fi
    mkdir -p "$(dirname "$target")"
    install -m "$mode" "$tmp" "$target"
    rm -f "$tmp"
    changed=1
    note "wrote $2"
}

# The env file's port wins: the operator may have changed it since the first run.
configured_port() {
    local found=
    if [ -f "$destdir$env_file" ]; then
        found=$(sed -n 's/^MARK_PORT=\([0-9]*\)$/\1/p' "$destdir$env_file")
    fi
    printf '%s\n' "${found:-$PORT_DEFAULT}"
}

check_python() {
    # The system's interpreter: one under a private home (root's pyenv) is out of the user's reach.
    [ -n "$python" ] || { [ -x /usr/bin/python3 ] && python=/usr/bin/python3; } || python=python3
    have "$python" || die "$python not found: install Python >= 3.11 (Debian: package python3)"
    "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
        die "$python is older than 3.11, which aioquic needs (Debian 12 and newer have 3.11)"
    "$python" -c 'import struct, sys; sys.exit(struct.calcsize("P") != 8)' ||
        die "$python is a 32-bit build: aioquic and pylsqpack publish no 32-bit ARM wheels;" \
            "install a 64-bit OS (aarch64), as deploy/README.md explains"
    if ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then
        if staged || ! have apt-get; then
            die "$python cannot create venvs: install its venv module (Debian: python3-venv)"
        fi
        note "installing python3-venv"
        apt-get install -y -qq python3-venv >/dev/null
    fi
}

# What is being installed: the interpreter, then the source. A second run from the same source
# skips pip entirely; another interpreter gets a fresh venv.
stamp_of() {
    "$python" -c 'import os, sys; print("python", os.path.realpath(sys.executable))'
    if [ -n "$wheel" ]; then
        local hash
        hash=$(sha256sum <"$wheel")
        printf 'wheel %s sha256:%s\n' "$(basename "$wheel")" "${hash%% *}"
        return
    fi
    local digest
    digest=$(cd "$src" && find pyproject.toml README.md protocol server client -type f \
        ! -path '*/__pycache__/*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum)
    printf 'checkout %s sha256:%s\n' "$src" "${digest%% *}"
}

install_venv() {
    local target=$destdir$venv want had
    want=$(stamp_of)
    had=$(cat "$destdir$stamp" 2>/dev/null || true)
    if [ -x "$target/bin/mark-server" ] && [ "$had" = "$want" ]; then
        note "unchanged $venv ($(sed -n '2s/ sha256:.*//p' <<<"$want"))"
        return
    fi
    if [ "$(head -1 <<<"$had")" != "$(head -1 <<<"$want")" ]; then
        rm -rf "$target"
    fi
    [ -x "$target/bin/python" ] || "$python" -m venv "$target"
    # A checkout between releases keeps its version number: drop the old copy so pip installs anew.
    "$target/bin/python" -m pip uninstall --quiet --yes "$NAME" >/dev/null 2>&1 || true
    "$target/bin/python" -m pip install -qq --disable-pip-version-check "${wheel:-$src}"
    "$target/bin/mark-server" --version >/dev/null || die "the installed mark-server does not run"
    printf '%s\n' "$want" >"$destdir$stamp"
    changed=1
    note "installed $NAME into $venv ($(sed -n '2s/ sha256:.*//p' <<<"$want"))"
    if ! staged && ! runuser -u "$NAME" -- "$venv/bin/python" -c pass 2>/dev/null; then
        die "the user $NAME cannot run $python (is it inside a private home?): use --python" \
            "/usr/bin/python3, or another interpreter every user can run"
    fi
}

ensure_user_and_dirs() {
    if staged; then
        mkdir -p "$destdir$etc" "$destdir$state"
        note "staging: no system user"
        return
    fi
    if id -u "$NAME" >/dev/null 2>&1; then
        note "user $NAME exists"
    else
        useradd --system --user-group --home-dir "$state" --no-create-home \
            --shell /usr/sbin/nologin --comment "markproto server" "$NAME"
        note "created the system user $NAME"
    fi
    install -d -o root -g root -m 0755 "$etc"
    install -d -o "$NAME" -g "$NAME" -m 0700 "$state"
}

# The first publish token is made here so that it shows on this terminal and never in the journal.
first_token() {
    local tokens=$state/tokens.toml raw err
    if [ -e "$destdir$tokens" ]; then
        note "unchanged $tokens"
        return
    fi
    local cmd=("$destdir$venv/bin/mark-server" token generate --label owner)
    cmd+=(--tokens "$destdir$tokens")
    staged || cmd=(runuser -u "$NAME" -- "${cmd[@]}")
    err=$(mktemp)
    if ! raw=$(cd "$destdir$state" && "${cmd[@]}" 2>"$err"); then
        cat "$err" >&2
        rm -f "$err"
        die "could not create the first token in $tokens"
    fi
    rm -f "$err"
    changed=1
    note "wrote $tokens: a publish token for every path, label \"owner\", shown only now:"
    printf '\n    %s\n\n' "$raw"
}

apply_sysctl() {
    if staged; then
        note "staging: sysctl not applied"
    elif ! have sysctl; then
        note "sysctl not found: the limits apply from the next boot"
    elif ! sysctl --quiet --load="$sysctl_file"; then
        note "could not apply $sysctl_file now (a container?); it applies from the next boot"
    fi
}

open_firewall() {
    if staged; then
        note "staging: firewall untouched"
    elif ufw_active; then
        ufw allow "$1/udp" comment "$NAME" >/dev/null
        note "ufw allows $1/udp"
    else
        note "ufw is not active: if another firewall runs, open UDP port $1 in it"
    fi
}

start_service() {
    if staged; then
        note "staging: service not enabled; the staged server starts as the unit would with:"
        note "  $(launch_command)"
        return
    elif ! systemd_up; then
        note "systemd is not running here; start the server as the unit would (its user,"
        note "$env_file, state in $state, umask 077) with:"
        note "  $(launch_command)"
        return
    fi
    systemctl daemon-reload
    systemctl enable --quiet "$NAME"
    if ! systemctl is-active --quiet "$NAME"; then
        systemctl start "$NAME"
        note "started $NAME"
    elif [ "$changed" = 1 ]; then
        systemctl restart "$NAME"
        note "restarted $NAME"
    else
        note "$NAME is running"
    fi
}

# The unit's configuration as one command, for hosts without systemd: the same environment file,
# state directory (StateDirectory=), umask, working directory and, when installed, user.
launch_command() {
    local run="cd / && umask 077 && export STATE_DIRECTORY=$destdir$state && set -a && . $destdir$env_file && exec $destdir$venv/bin/mark-server serve"
    if staged; then
        printf "sh -c '%s'\n" "$run"
    else
        printf "runuser -u %s -- sh -c '%s'\n" "$NAME" "$run"
    fi
}

# `mark ping` from a scratch HOME: it pins the self-signed certificate there on first contact, so
# no pin is left in root's ~/.mark to go stale when a real certificate replaces the self-signed one.
verify() {
    local url=mark://localhost:$1 home deadline out=''
    if ! systemd_up; then
        "$destdir$venv/bin/mark-server" --version >/dev/null
        "$destdir$venv/bin/mark" --version >/dev/null
        note "mark-server and mark run; no service to ping"
        return
    fi
    home=$(mktemp -d)
    # The server listens once its indexes are built: seconds for thousands of documents on a Pi.
    deadline=$((SECONDS + 180))
    while ((SECONDS < deadline)); do
        if out=$(HOME=$home "$venv/bin/mark" ping --timeout 5 "$url" 2>&1); then
            rm -rf "$home"
            # The pin note names the scratch file; keep just the fingerprint from it.
            sed -E -e 's/^mark: .*pinned certificate ([^ ]+) in .*/certificate \1/' \
                -e 's/^/    /' <<<"$out"
            note "the server answers at $url"
            return
        fi
        sleep 1
    done
    rm -rf "$home"
    printf '%s\n' "$out" >&2
    journalctl --unit "$NAME" --lines 30 --no-pager >&2 || true
    die "the server did not answer $url within 3 minutes (its log is above: journalctl -u $NAME)"
}

do_install() {
    local used_port
    staged || [ "$(id -u)" = 0 ] || die "run as root (sudo), or stage into a folder with --destdir"
    if [ -n "$wheel" ]; then
        [ -f "$wheel" ] || die "no such wheel: $wheel"
        wheel=$(cd "$(dirname "$wheel")" && pwd)/$(basename "$wheel")
    else
        src=$(cd "$HERE/.." && pwd)
        [ -f "$src/pyproject.toml" ] || die "no checkout around $HERE: give --wheel FILE"
    fi
    check_python

    step "user and directories"
    ensure_user_and_dirs

    step "markproto in $venv"
    install_venv
    # A copy of this folder, so that uninstalls and wheel upgrades need no checkout.
    for file in install.sh certbot-deploy-hook.sh; do
        put 0755 "$prefix/deploy/$file" <"$HERE/$file"
    done
    for file in "$NAME.service" "$NAME.env"; do
        put 0644 "$prefix/deploy/$file" <"$HERE/$file"
    done

    step "configuration"
    if [ -e "$destdir$env_file" ]; then
        note "kept $env_file as it is"
        if [ -n "$port" ] && [ "$port" != "$(configured_port)" ]; then
            note "--port $port ignored: $env_file sets MARK_PORT=$(configured_port)"
        fi
    else
        sed "s/^MARK_PORT=.*/MARK_PORT=${port:-$PORT_DEFAULT}/" "$HERE/$NAME.env" |
            put 0640 "$env_file"
    fi
    used_port=$(configured_port)
    first_token

    step "UDP socket buffers"
    put 0644 "$sysctl_file" <<'EOF'
# markproto: QUIC runs over UDP. The server asks for 4 MiB socket buffers and the kernel caps the
# request at these limits; the defaults (about 200 KB) drop packets in bursts.
net.core.rmem_max = 7500000
net.core.wmem_max = 7500000
EOF
    apply_sysctl

    step "firewall"
    open_firewall "$used_port"

    step "systemd unit"
    sed "s|/opt/markproto|$prefix|g" "$HERE/$NAME.service" | put 0644 "$unit"
    start_service

    step "check"
    verify "$used_port"
    if staged; then
        step "staged into $destdir"
    else
        step "markproto is installed: mark://$(hostname -f 2>/dev/null || hostname):$used_port"
    fi
}

do_uninstall() {
    local used_port
    staged || [ "$(id -u)" = 0 ] || die "run as root (sudo), or give the staging dir with --destdir"
    used_port=$(configured_port)
    step "removing $NAME"
    if systemd_up; then
        systemctl disable --now --quiet "$NAME" 2>/dev/null || true
    fi
    rm -f "$destdir$unit" "$destdir$sysctl_file"
    if systemd_up; then
        systemctl daemon-reload
    fi
    note "removed the unit and $sysctl_file (the kernel keeps the raised limits until reboot)"
    if ufw_active; then
        ufw delete allow "$used_port/udp" >/dev/null || true
        note "ufw no longer allows $used_port/udp"
    fi
    # Only what the installer put there: --prefix may name a directory that holds more.
    rm -rf "$destdir$venv"
    rm -f "$destdir$stamp" "$destdir$prefix/deploy/"{install.sh,certbot-deploy-hook.sh} \
        "$destdir$prefix/deploy/$NAME".{service,env}
    rmdir "$destdir$prefix/deploy" "$destdir$prefix" 2>/dev/null || true
    note "removed $venv and the installer's files in $prefix"
    if [ "$purge" != 1 ]; then
        note "kept $state (content, tokens, certificate), $etc and the user $NAME;"
        note "uninstall --purge deletes them"
        return
    fi
    rm -rf "$destdir$state" "$destdir$etc"
    note "removed $state and $etc"
    if ! staged && id -u "$NAME" >/dev/null 2>&1; then
        userdel "$NAME"
        note "removed the user $NAME"
    fi
}

"do_$action"
