#!/usr/bin/env bash
# tests/cli/test_house.sh BUILD_DIR: the house guards (issue #35) from
# scripts/house-check, each proven first on a fixture that it must catch,
# then run on the tree: no production function over 80 lines unmarked,
# README's build dependencies are the libraries the Makefile links, and the
# man pages' options are the binaries' --help (the binaries in BUILD_DIR);
# no line of production C or Lua over 110 columns, no script over 600 lines;
# and CFG_RANGE refuses, at compile time, what is not an int setting; and each
# layer of common/ compiles with its own and lower layers' headers only.
# Needs no running stack. Speaks TAP. One guard alone:
# scripts/house-check function-length | line-length | script-length | deps | man BUILD_DIR.
set -u

BUILD_ARG=${1:?usage: tests/cli/test_house.sh BUILD_DIR}
BUILD=$(cd "$BUILD_ARG" 2>/dev/null && pwd) || { echo "Bail out! no build dir $BUILD_ARG"; exit 1; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1

CHECK=scripts/house-check
FIX=tests/cli/fixtures/house

T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

# shellcheck source=../tap.sh
. "$(dirname "${BASH_SOURCE[0]}")/../tap.sh"

# guard DESC CMD...: passes when CMD finds nothing (exit 0, no output);
# otherwise its findings are the diagnostics, first (tests/run shows the
# lines right after "not ok"), then the command that found them.
guard() {
    local desc=$1; shift
    run "$@"
    if [ "$rc" -eq 0 ] && [ ! -s "$T/out" ] && [ ! -s "$T/err" ]; then
        pass "$desc"
    else
        fail "$desc" "$(cat "$T/out" "$T/err")" "(exit $rc: $*)"
    fi
}
# catches DESC WANT_FILE CMD...: CMD exits 1 and prints exactly WANT_FILE.
catches() {
    local desc=$1 want=$2; shift 2
    run "$@"
    if [ "$rc" -eq 1 ] && diff -u "$want" "$T/out" >"$T/diff"; then
        pass "$desc"
    else
        fail "$desc" "$(run_diag "$@")" "$(cat "$T/diff" 2>/dev/null)"
    fi
}

echo "1..13"

# --- function-length -------------------------------------------------------
# The fixture: a function at the limit, one over it, marked ones (above the
# function, above its comment block, the return type on a line of its own),
# a marker spread over lines and one cut off by a blank line (neither
# counts), a long table, a signature over three lines.
cat >"$T/want" <<EOF
$FIX/functions.c:194: function too_long is 84 lines (limit 80)
$FIX/functions.c:281: function marked_but_multiline is 88 lines (limit 80)
$FIX/functions.c:555: function marker_too_far is 88 lines (limit 80)
$FIX/functions.c:645: function signature_over_lines is 85 lines (limit 80)
EOF
catches "function-length finds exactly the long unmarked functions of $FIX/functions.c" "$T/want" \
    "$CHECK" function-length "$FIX/functions.c"

guard "no function in common/ producer/ consumer/ ctl/ over 80 lines unmarked" "$CHECK" function-length

# --- line-length and script-length ------------------------------------------
# Fixtures made here: a line at the limit passes, one a column over is found
# with its place and width; a script at 600 lines passes, one over is found,
# and a file that is neither #! nor .sh/.py is no script.
printf '%s\n' "$(printf 'x%.0s' $(seq 110))" "$(printf 'y%.0s' $(seq 111))" "short" >"$T/wide.c"
printf '%s:2: 111 columns (limit 110)\n' "$T/wide.c" >"$T/want"
catches "line-length finds the line a column over the limit, not the one at it" "$T/want" \
    "$CHECK" line-length "$T/wide.c"
guard "no line of production C or Lua over 110 columns" "$CHECK" line-length
{ echo '#!/bin/sh'; seq 599; } >"$T/ok.sh"
{ echo '#!/bin/sh'; seq 600; } >"$T/long"
seq 700 >"$T/data.txt"
printf '%s: 601 lines (limit 600)\n' "$T/long" >"$T/want"
catches "script-length finds the script over 600 lines, not one at 600 nor a data file" "$T/want" \
    "$CHECK" script-length "$T/ok.sh" "$T/long" "$T/data.txt"
guard "no script of scripts/, bench/ or tests/run over 600 lines" "$CHECK" script-length

# --- deps ------------------------------------------------------------------
# README without its libcurl row, and with a package the build does not use.
grep -v '^| libcurl ' README.md >"$T/README-no-curl.md"
echo "README.md: build dependency libcurl (Makefile CTL_PKGS) is missing from the table (Debian package libcurl4-openssl-dev)" |
    sed "s#^README.md#$T/README-no-curl.md#" >"$T/want"
catches "deps names a library the Makefile links and README leaves out" "$T/want" \
    "$CHECK" deps "$T/README-no-curl.md"

sed 's/^| cmocka | .*/&\n| libfoo | `libfoo-dev` | nothing |/' README.md >"$T/README-extra.md"
echo "$T/README-extra.md: the table lists libfoo-dev, which the Makefile does not link (PKGS, CTL_PKGS, -lcmocka)" >"$T/want"
catches "deps names a package README lists and the build does not use" "$T/want" \
    "$CHECK" deps "$T/README-extra.md"

guard "README.md's build dependencies are the Makefile's libraries" "$CHECK" deps

# --- man -------------------------------------------------------------------
# Stand-in binaries and pages: the producer's --help has -x/--extra that its
# page lacks, the consumer's page has --gone that its --help lacks, and
# seckillctl's page and --help agree, commands' options included.
mkdir -p "$T/bin" "$T/man"
for b in seckill-producer seckill-consumer seckillctl; do
    printf '#!/bin/sh\ncat "%s"\n' "$T/$b.help" >"$T/bin/$b"
    chmod +x "$T/bin/$b"
done
cat >"$T/seckill-producer.help" <<'EOF'
usage: seckill-producer [-c FILE]
  -c, --config FILE    configuration file
  -x, --extra          a new option
EOF
cat >"$T/man/seckill-producer.8.scd" <<'EOF'
# SYNOPSIS

*seckill-producer* [*-c* _FILE_] [*-t*]

# OPTIONS

*-c, --config* _FILE_
	The configuration file.
EOF
cat >"$T/seckill-consumer.help" <<'EOF'
usage: seckill-consumer [-c FILE]
  -c, --config FILE    configuration file
EOF
cat >"$T/man/seckill-consumer.8.scd" <<'EOF'
*-c, --config* _FILE_
	The configuration file; see also *--gone*.
EOF
cat >"$T/seckillctl.help" <<'EOF'
usage: seckillctl [-c FILE] COMMAND ...
  item load (--id ID | --all) [--wait-ms N]   rebuild
  -c, --config FILE    configuration file
EOF
cat >"$T/man/seckillctl.8.scd" <<'EOF'
*-c, --config* _FILE_
	The configuration file.

*item load* (*--id* _ID_ | *--all*) [*--wait-ms* _N_]
	Rebuild.
EOF
cat >"$T/want" <<EOF
$T/man/seckill-producer.8.scd: seckill-producer --help has --extra, the man page does not
$T/man/seckill-producer.8.scd: seckill-producer --help has -x, the man page does not
$T/man/seckill-producer.8.scd: the man page has -t, seckill-producer --help does not
$T/man/seckill-consumer.8.scd: the man page has --gone, seckill-consumer --help does not
EOF
catches "man names the binary, the option and the page of each mismatch" "$T/want" \
    "$CHECK" man "$T/bin" "$T/man"

guard "man/*.8.scd document exactly the options of the binaries' --help in $BUILD_ARG" \
    "$CHECK" man "$BUILD"

# CFG_RANGE(member) (common/base/cfg.h) takes an integer setting's range from
# CFG_SETTINGS at compile time: a misspelt member, or one that is not an
# int, must not compile (there is no -1 for a caller to ignore).
cfg_range_compiles() {
    printf '#include "cfg.h"\nint f(void);\nint f(void) { return (int)CFG_RANGE(%s).max; }\n' "$1" >"$T/range.c"
    ${CC:-cc} -std=c11 -D_GNU_SOURCE -Wall -Werror -Icommon/base -fsyntax-only "$T/range.c" >"$T/range.err" 2>&1
}
if cfg_range_compiles consumer.batch_size && ! cfg_range_compiles redis.host && ! cfg_range_compiles consumer.batchsize
then
    pass "CFG_RANGE compiles for an int setting, not for a string one or a misspelt one"
else
    fail "CFG_RANGE compiles for an int setting, not for a string one or a misspelt one" "$(cat "$T/range.err")"
fi

# The layers (docs/style.md): the Makefile compiles each folder of common/
# with the headers of the layers below it only, so a base file that reaches
# for the Redis link layer or the sale's rules, or a link layer that reaches
# for the sale's, does not compile. Each layer's own flags, from the Makefile.
layer_compiles() { # LAYER HEADER
    printf '#include "%s"\n' "$2" >"$T/layer.c"
    # shellcheck disable=SC2046 # the flags are words
    ${CC:-cc} -std=c11 -D_GNU_SOURCE $(make -s --no-print-directory print-inc-"$1") \
        $(pkg-config --cflags hiredis rdkafka libpq libconfig 2>/dev/null) -fsyntax-only "$T/layer.c" >"$T/layer.err" 2>&1
}
got=""
for pair in common_base:log.h common_base:rpipe.h common_base:lock.h common_redis:rpipe.h common_redis:publish.h \
    common_redis:lock.h common_kafka:publish.h common_kafka:rconn.h common_pg:pgconn.h common_pg:keys.h \
    common_sale:lock.h common_sale:rpipe.h common_sale:publish.h common_sale:pgconn.h; do
    if layer_compiles "${pair%%:*}" "${pair#*:}"; then got+="${pair} "; fi
done
is "each layer of common/ compiles against its own and lower layers' headers only" "$got" \
    "common_base:log.h common_redis:rpipe.h common_kafka:publish.h common_pg:pgconn.h common_sale:lock.h \
common_sale:rpipe.h common_sale:publish.h common_sale:pgconn.h "

[ "$failed" -eq 0 ]
