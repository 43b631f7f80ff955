#!/usr/bin/env bash
# tests/cli/test_docs.sh BUILD_DIR: the documents generated from the code
# are the committed ones. docs/configuration.md is `seckillctl config
# reference` (printed from CFG_SETTINGS in common/base/cfg.h), so a setting added,
# removed or changed without regenerating it fails here. And every relative
# link of README.md and docs/*.md leads somewhere: to a file that exists and,
# with a #fragment into a Markdown file, to one of its headings (GitHub's
# anchors), so a section moved or renamed fails here with the link's place.
# Needs no running stack and reads no configuration file. Speaks TAP.
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

echo "1..6"

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

# links FILE...: each broken relative link as "FILE:LINE: link to TARGET: why".
# Fenced code and inline code are not text; a heading's anchor is GitHub's:
# lower case, punctuation but "-" and "_" dropped, spaces to "-", "-1", "-2"
# after repeats.
links() {
    python3 - "$@" <<'PY'
import os, re, sys

def anchors(path):
    out, seen, fence = set(), {}, False
    for line in open(path, encoding='utf-8'):
        if line.startswith('```'):
            fence = not fence
            continue
        m = None if fence else re.match(r'^#{1,6}\s+(.*?)\s*#*\s*$', line)
        if not m:
            continue
        s = re.sub(r'[^\w\- ]', '', m.group(1).strip().lower()).replace(' ', '-')
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f'{s}-{n}')
    return out

bad, cache = 0, {}
for f in sys.argv[1:]:
    fence = False
    for no, line in enumerate(open(f, encoding='utf-8'), 1):
        if line.startswith('```'):
            fence = not fence
            continue
        if fence:
            continue
        for m in re.finditer(r'\]\(([^)\s]+)\)', re.sub(r'`[^`]*`', '', line)):
            t = m.group(1)
            if re.match(r'^[a-z]+:', t):
                continue
            path, _, frag = t.partition('#')
            target = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
            if not os.path.exists(target):
                print(f'{f}:{no}: link to {t}: no file {target}')
                bad += 1
            elif frag and target.endswith('.md'):
                if target not in cache:
                    cache[target] = anchors(target)
                if frag not in cache[target]:
                    print(f'{f}:{no}: link to {t}: no heading #{frag} in {target}')
                    bad += 1
sys.exit(1 if bad else 0)
PY
}

# The check itself first: a page with a good link, a link to a missing file,
# and one to a heading that is not there.
mkdir -p "$T/links/docs"
printf '# Top\n\n## The `lock` (common/lock.c)\n' >"$T/links/docs/b.md"
printf '%s\n' '[ok](b.md#the-lock-commonlockc) [gone](c.md)' '```' '[in code](x.md)' '```' \
    '[moved](b.md#high-availability)' >"$T/links/docs/a.md"
(cd "$T/links" && links docs/a.md) >"$T/out"
printf '%s\n' 'docs/a.md:1: link to c.md: no file docs/c.md' \
    'docs/a.md:5: link to b.md#high-availability: no heading #high-availability in docs/b.md' >"$T/want"
if diff -u "$T/want" "$T/out" >"$T/diff"; then
    pass "the link check finds a missing file and a missing heading"
else
    fail "the link check finds a missing file and a missing heading" "$(cat "$T/diff")"
fi

if links README.md docs/*.md >"$T/out" && [ ! -s "$T/out" ]; then
    pass "every relative link of README.md and docs/*.md leads to a file and heading"
else
    fail "every relative link of README.md and docs/*.md leads to a file and heading" "$(cat "$T/out")"
fi

[ "$failed" -eq 0 ]
