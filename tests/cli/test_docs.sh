#!/usr/bin/env bash
# tests/cli/test_docs.sh BUILD_DIR: the documents generated from the code
# are the committed ones. docs/configuration.md is `seckillctl config
# reference` (printed from CFG_SETTINGS in common/cfg.h), so a setting added,
# removed or changed without regenerating it fails here. Needs no running
# stack and reads no configuration file. Speaks TAP.
set -u

BUILD_ARG=${1:?usage: tests/cli/test_docs.sh BUILD_DIR}
BUILD=$(cd "$BUILD_ARG" 2>/dev/null && pwd) || { echo "Bail out! no build dir $BUILD_ARG"; exit 1; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1

CTL=$BUILD/seckillctl
DOC=docs/configuration.md

T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

# shellcheck source=../tap.sh
. "$(dirname "${BASH_SOURCE[0]}")/../tap.sh"

echo "1..4"

# A configuration file that cannot be read: the reference must not need one.
run "$CTL" -c "$T/absent.cfg" config reference
if [ "$rc" -eq 0 ] && [ -s "$T/out" ] && [ ! -s "$T/err" ]; then
    pass "config reference needs no configuration file"
else
    fail "config reference needs no configuration file" "$(run_diag "$CTL" config reference)"
fi
cp "$T/out" "$T/reference.md"

if diff -u "$DOC" "$T/reference.md" >"$T/diff"; then
    pass "$DOC is the output of seckillctl config reference"
else
    fail "$DOC is the output of seckillctl config reference" \
        "regenerate it: $BUILD_ARG/seckillctl config reference > $DOC" "$(head -n 40 "$T/diff")"
fi

# Every setting of the table, and no other, has its row: the settings are
# read back from `config show` (the effective configuration, one per line).
run "$CTL" -c config/seckill.cfg config show
awk '/= \{$/ { sec = $1; next } /^  [a-z_]+ = / { print sec "." $1 }' "$T/out" | sort >"$T/shown"
sed -n 's/^| `\([a-z_]*\.[a-z_]*\)` |.*/\1/p' "$T/reference.md" | sort >"$T/rows"
if [ -s "$T/shown" ] && diff "$T/shown" "$T/rows" >"$T/diff"; then
    pass "one row per setting ($(wc -l <"$T/rows"))"
else
    fail "one row per setting" "$(cat "$T/diff")"
fi

# No row lacks its help (the last column).
empty=$(grep -E '^\| `[a-z_.]+` \|' "$T/reference.md" | grep -E '\|[[:space:]]*\|$' || true)
is "every row has a description" "$empty" ""

[ "$failed" -eq 0 ]
