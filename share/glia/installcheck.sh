#!/bin/sh
# share/glia/installcheck.sh — `make installcheck`: checks that the documentation (README.md, the
# pages of docs/, the manual page glia.1) is installed as in the source tree; builds the plugin
# templates (a layer and an optimizer) against the installed SDK, runs their `make check`, installs
# them into a work folder and trains each one's model with the installed glia; checks that a
# template plugin calling an undefined function fails to link, and that the layer template's rename
# recipe (its README) builds.
# Not a unit test: it checks only that an installed glia and its SDK work end to end.
#
# usage: sh installcheck.sh DESTDIR PREFIX LIBDIR BINDIR PKGDATADIR WORKDIR DOCDIR MAN1DIR SRCDIR
set -eu

if [ $# -ne 9 ]; then
    echo "usage: sh installcheck.sh DESTDIR PREFIX LIBDIR BINDIR PKGDATADIR WORKDIR DOCDIR MAN1DIR SRCDIR" >&2
    exit 2
fi
destdir=$1 prefix=$2 libdir=$3 bindir=$4 pkgdatadir=$5 workdir=$6 docdir=$7 man1dir=$8 srcdir=$9

fail() {
    echo "installcheck: FAILED: $*" >&2
    exit 1
}
step() {
    echo "installcheck: $*"
}

templates="$destdir$pkgdatadir"
glia="$destdir$bindir/glia"
pcdir="$destdir$libdir/pkgconfig"

# The templates are projects of their own: nothing of the calling make (its DESTDIR, which a
# command-line DESTDIR=... passes down through MAKEFLAGS, its jobserver) may leak into them.
unset MAKEFLAGS MFLAGS MAKELEVEL MAKEOVERRIDES DESTDIR || true

step "prefix $prefix${destdir:+ (staged under DESTDIR=$destdir)}"
for t in plugin-template optimizer-template; do
    [ -d "$templates/$t" ] || fail "no $t at $templates/$t (run make install first)"
done
[ -x "$glia" ] || fail "no installed glia program at $glia (run make install first)"
[ -f "$pcdir/glia.pc" ] || fail "no glia.pc in $pcdir (run make install first)"

# The documentation: README.md and every page of docs/ under DOCDIR as in the source tree (so that
# their links work), and the manual page in MAN1DIR, each the same as its source.
installed() {
    [ -f "$2" ] || fail "$1 is not installed: no $2"
    cmp -s "$1" "$2" || fail "the installed $2 differs from $1"
}
installed "$srcdir/README.md" "$destdir$docdir/README.md"
pages=0
for page in "$srcdir"/docs/*.md; do
    installed "$page" "$destdir$docdir/docs/${page##*/}"
    pages=$((pages + 1))
done
[ "$pages" -gt 0 ] || fail "no pages in $srcdir/docs"
installed "$srcdir/docs/glia.1" "$destdir$man1dir/glia.1"
step "ok: README.md and $pages pages in $destdir$docdir, glia.1 in $destdir$man1dir"

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

rm -rf "$workdir"
mkdir -p "$workdir"

# copy TEMPLATE DIR: a writable copy of an installed template.
copy() {
    step "copy $templates/$1 to $2"
    mkdir -p "$2"
    cp -R "$templates/$1/." "$2/"
    chmod -R u+w "$2"
}

# build DIR PLUGIN: configure (installing into DIR/plugins), make, make check and make install
# in DIR, which must then hold DIR/plugins/PLUGIN.so.
build() {
    step "$1: autoreconf -i"
    (cd "$1" && autoreconf -i) || fail "autoreconf -i in $1"
    step "$1: ./configure --with-pluginsdir=$1/plugins (PKG_CONFIG_PATH=$PKG_CONFIG_PATH)"
    (cd "$1" && ./configure --with-pluginsdir="$1/plugins") || fail "configure in $1 (see $1/config.log)"
    step "$1: make"
    (cd "$1" && make) || fail "make in $1"
    step "$1: make check"
    (cd "$1" && make check) || fail "make check in $1 (see $1/test-suite.log)"
    step "$1: make install DESTDIR="
    (cd "$1" && make install DESTDIR=) || fail "make install in $1"
    [ -f "$1/plugins/$2.so" ] || fail "make install did not put $2.so into $1/plugins"
}

# train DIR MODEL: glia train DIR/MODEL with the installed glia; it must print a test_accuracy line.
train() {
    step "$1: $glia train $2"
    log="$1/train.log"
    status=0
    (cd "$1" && "$glia" train "$2") >"$log" 2>&1 || status=$?
    cat "$log"
    [ "$status" -eq 0 ] || fail "glia train $2 exited with status $status (log: $log)"
    summary=$(grep 'test_accuracy' "$log" | tail -n 1 || true)
    [ -n "$summary" ] || fail "glia train $2 printed no summary line with test_accuracy (log: $log)"
    step "ok: $summary"
}

layer="$workdir/layer"
copy plugin-template "$layer"
build "$layer" softsign
train "$layer" softsign-mlp.ini

# -Wl,-z,defs: a call to a function nothing defines fails the link, not a later dlopen.
step "$layer: a call to an undefined function must fail the link"
cp "$layer/softsign.c" "$layer/softsign.c.orig"
cat >>"$layer/softsign.c" <<'PROBE'
void glia_installcheck_undefined(void);
void glia_installcheck_probe(void);
void glia_installcheck_probe(void) { glia_installcheck_undefined(); }
PROBE
if (cd "$layer" && make) >"$layer/defs.log" 2>&1; then
    fail "softsign.so linked although it calls an undefined function: is -Wl,-z,defs missing? (log: $layer/defs.log)"
fi
grep -q glia_installcheck_undefined "$layer/defs.log" ||
    fail "make failed, but not on the undefined function (log: $layer/defs.log)"
cp "$layer/softsign.c.orig" "$layer/softsign.c"  # a copy, newer than the object that has the probe
rm -f "$layer/softsign.c.orig"
(cd "$layer" && make) || fail "make in $layer after the undefined-function check"

# The rename recipe of the template's README (its code block under "## Rename it", less the cp
# from the installed folder, which copy does), then a build of the renamed plugin.
renamed="$workdir/renamed"
copy plugin-template "$renamed"
recipe=$(awk '/^## Rename it/ { on = 1 } on && /^```sh/ { code = 1; next } code && /^```/ { exit } code' \
    "$renamed/README.md" | grep -v '^cp -r ')
[ -n "$recipe" ] || fail "the plugin template's README has no rename recipe"
step "$renamed: the README's rename recipe: $recipe"
(cd "$renamed" && sh -e -c "$recipe") || fail "the rename recipe in $renamed"
build "$renamed" my_layer

optimizer="$workdir/optimizer"
copy optimizer-template "$optimizer"
build "$optimizer" lion
train "$optimizer" lion-mlp.ini

# Leave no files behind in the build tree (distcheck's distcleancheck); kept on failure.
cd /
rm -rf "$workdir"
