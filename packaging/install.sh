#!/bin/sh
# Install the fair-share suite system-wide, usable by every user (README.md, "Deploying
# on one machine"):
#
#   sudo packaging/install.sh              # from a clone; again to upgrade
#   sudo packaging/install.sh --uninstall  # remove the links, the completions and the venv
#
# What it does, with the defaults:
#   - a virtual environment at /opt/fairshare, made from the system's Python
#     (/usr/bin/python3): Debian's own Python refuses `pip install` as root (PEP 668),
#     and a Python under /root (pyenv, a venv there) cannot be run by other users;
#   - the suite installed into it from this source tree (a wheel, not editable);
#   - every command linked into /usr/local/bin, which is on everyone's PATH and is
#     where examples/systemd/shrdaemon.service runs shrdaemon and shradmin from;
#   - the manual pages (the wheel puts them in /opt/fairshare/share/man) linked into
#     /usr/local/share/man, where `man shrview` finds them;
#   - bash, zsh and fish completion scripts generated once here, so that a new shell
#     starts no Python process to complete the commands.
#
# Options (each also an environment variable): --prefix DIR (PREFIX), --bindir DIR
# (BINDIR), --mandir DIR (MANDIR), --sharedir DIR (SHAREDIR: completions go under
# DIR/bash-completion/completions, DIR/zsh/site-functions, DIR/fish/vendor_completions.d),
# --python PATH (PYTHON), --extras LIST (EXTRAS, e.g. postgres).  Files are made with
# umask 022, so every user can read and run them.
set -eu

PREFIX=${PREFIX:-/opt/fairshare}
BINDIR=${BINDIR:-/usr/local/bin}
MANDIR=${MANDIR:-/usr/local/share/man}
SHAREDIR=${SHAREDIR:-/usr/local/share}
PYTHON=${PYTHON:-/usr/bin/python3}
EXTRAS=${EXTRAS:-}
UNINSTALL=
SOURCE=$(cd "$(dirname "$0")/.." && pwd)
COMMANDS="udbgen udbsee shrtree shradmin shrdaemon shrview shrinfo shrprio shrdist shrsync shrgrid newacct shrsim"

die() { echo "install.sh: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
    case $1 in
        --prefix) PREFIX=$2; shift 2 ;;
        --bindir) BINDIR=$2; shift 2 ;;
        --mandir) MANDIR=$2; shift 2 ;;
        --sharedir) SHAREDIR=$2; shift 2 ;;
        --python) PYTHON=$2; shift 2 ;;
        --extras) EXTRAS=$2; shift 2 ;;
        --uninstall) UNINSTALL=1; shift ;;
        -h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option $1 (see --help)" ;;
    esac
done
umask 022

BASH_DIR=$SHAREDIR/bash-completion/completions
ZSH_DIR=$SHAREDIR/zsh/site-functions
FISH_DIR=$SHAREDIR/fish/vendor_completions.d

if [ -n "$UNINSTALL" ]; then
    for c in $COMMANDS; do
        [ -L "$BINDIR/$c" ] && rm -f "$BINDIR/$c"
        rm -f "$BASH_DIR/$c" "$ZSH_DIR/_$c" "$FISH_DIR/$c.fish"
    done
    for page in "$SOURCE"/man/*.[0-9]; do
        link=$MANDIR/man${page##*.}/$(basename "$page")
        [ -L "$link" ] && rm -f "$link"
    done
    rm -rf "$PREFIX"
    echo "install.sh: removed $PREFIX and its links (the UDB and /etc/fairshare are kept)"
    exit 0
fi

[ -x "$PYTHON" ] || die "$PYTHON: no such Python (give --python PATH)"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || die "$PYTHON: Python 3.11 or later is needed"
"$PYTHON" -c 'import venv, ensurepip' 2>/dev/null \
    || die "$PYTHON cannot make a virtual environment (Debian: apt-get install python3-venv)"

"$PYTHON" -m venv "$PREFIX"
spec=$SOURCE
[ -z "$EXTRAS" ] || spec="$SOURCE[$EXTRAS]"
"$PREFIX/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir \
    --upgrade "$spec"
chmod -R a+rX "$PREFIX"

mkdir -p "$BINDIR" "$BASH_DIR" "$ZSH_DIR" "$FISH_DIR"
for c in $COMMANDS; do
    [ -x "$PREFIX/bin/$c" ] || die "$PREFIX/bin/$c was not installed"
    ln -sfn "$PREFIX/bin/$c" "$BINDIR/$c"
    var=_$(echo "$c" | tr a-z A-Z)_COMPLETE
    env "$var=bash_source" "$PREFIX/bin/$c" > "$BASH_DIR/$c"
    env "$var=zsh_source" "$PREFIX/bin/$c" > "$ZSH_DIR/_$c"
    env "$var=fish_source" "$PREFIX/bin/$c" > "$FISH_DIR/$c.fish"
done
for page in "$SOURCE"/man/*.[0-9]; do  # the suite's pages, not its dependencies'
    section=man${page##*.}
    installed=$PREFIX/share/man/$section/$(basename "$page")
    [ -f "$installed" ] || die "$installed was not installed"
    mkdir -p "$MANDIR/$section"
    ln -sfn "$installed" "$MANDIR/$section/$(basename "$page")"
done
echo "install.sh: $("$PREFIX/bin/shrdaemon" --version) in $PREFIX;" \
    "commands in $BINDIR, manual pages in $MANDIR, completions under $SHAREDIR"
