#!/bin/sh
# share/glia/installcheck.sh — `make installcheck`: builds the plugin template against the
# installed SDK, installs it into a work folder and trains softsign-mlp.ini with the installed
# glia. Not a unit test: it checks only that an installed glia and its SDK work end to end.
#
# usage: sh installcheck.sh DESTDIR PREFIX LIBDIR BINDIR PKGDATADIR WORKDIR
set -eu

if [ $# -ne 6 ]; then
    echo "usage: sh installcheck.sh DESTDIR PREFIX LIBDIR BINDIR PKGDATADIR WORKDIR" >&2
    exit 2
fi
destdir=$1 prefix=$2 libdir=$3 bindir=$4 pkgdatadir=$5 workdir=$6

fail() {
    echo "installcheck: FAILED: $*" >&2
    exit 1
}
step() {
    echo "installcheck: $*"
}

template="$destdir$pkgdatadir/plugin-template"
glia="$destdir$bindir/glia"
pcdir="$destdir$libdir/pkgconfig"

# The template is a project of its own: nothing of the calling make (its DESTDIR, which a
# command-line DESTDIR=... passes down through MAKEFLAGS, its jobserver) may leak into it.
unset MAKEFLAGS MFLAGS MAKELEVEL MAKEOVERRIDES DESTDIR || true

step "prefix $prefix${destdir:+ (staged under DESTDIR=$destdir)}"
[ -d "$template" ] || fail "no plugin template at $template (run make install first)"
[ -x "$glia" ] || fail "no installed glia program at $glia (run make install first)"
[ -f "$pcdir/glia.pc" ] || fail "no glia.pc in $pcdir (run make install first)"

step "copy $template to $workdir"
rm -rf "$workdir"
mkdir -p "$workdir"
cp -R "$template/." "$workdir/"
chmod -R u+w "$workdir"
cd "$workdir"

# The SDK through pkg-config only. Under DESTDIR the .pc still names the final prefix;
# PKG_CONFIG_SYSROOT_DIR puts DESTDIR in front of its -I and -L paths.
PKG_CONFIG_PATH="$pcdir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export PKG_CONFIG_PATH
if [ -n "$destdir" ]; then
    PKG_CONFIG_SYSROOT_DIR=$destdir
    export PKG_CONFIG_SYSROOT_DIR
fi
# The installed libglia (a staged one is not where the dynamic linker looks).
LD_LIBRARY_PATH="$destdir$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
# glia's own plugins: the installed folder, which under DESTDIR is not the configured one.
if [ -n "$destdir" ]; then
    GLIA_PLUGIN_PATH="$destdir$libdir/glia/plugins"
    export GLIA_PLUGIN_PATH
else
    unset GLIA_PLUGIN_PATH || true
fi

step "autoreconf -i"
autoreconf -i || fail "autoreconf -i in $workdir"

step "./configure --with-pluginsdir=$workdir/plugins (PKG_CONFIG_PATH=$PKG_CONFIG_PATH)"
./configure --with-pluginsdir="$workdir/plugins" || fail "configure of the plugin template (see $workdir/config.log)"

step "make"
make || fail "make of the plugin template"

step "make install DESTDIR="
make install DESTDIR= || fail "make install of the plugin template"
[ -f "$workdir/plugins/softsign.so" ] || fail "make install did not put softsign.so into $workdir/plugins"

step "$glia train softsign-mlp.ini"
log="$workdir/train.log"
status=0
"$glia" train softsign-mlp.ini >"$log" 2>&1 || status=$?
cat "$log"
[ "$status" -eq 0 ] || fail "glia train softsign-mlp.ini exited with status $status (log: $log)"
summary=$(grep 'test_accuracy' "$log" | tail -n 1 || true)
[ -n "$summary" ] || fail "glia train printed no summary line with test_accuracy (log: $log)"

step "ok: $summary"
# Leave no files behind in the build tree (distcheck's distcleancheck); kept on failure.
cd /
rm -rf "$workdir"
