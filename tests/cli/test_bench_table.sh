#!/usr/bin/env bash
# tests/cli/test_bench_table.sh [BUILD_DIR]: docs/benchmarks.md's table of
# the current figures is scripts/bench-table's, made from docs/bench.json (a
# copy of a `make bench` run's build/bench.json), as docs/configuration.md is
# `seckillctl config reference`. First the check itself, on copies in a
# scratch folder: a figure edited by hand in the document, or a figure of the
# JSON changed, fails it with a diff; a key the table needs and the JSON lacks
# is named, never shown as "null"; a figure the run did not measure (null) is
# "not measured"; --write puts the block right and touches nothing around it.
# And the table accounts for every key bench/run writes, the fixture
# (tests/cli/fixtures/bench/bench.json) has them all, and the tree passes.
# Needs no build, no stack; python3 only. Speaks TAP. (BUILD_DIR is unused.)
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
TABLE=scripts/bench-table
FIXTURE=tests/cli/fixtures/bench/bench.json

T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

# shellcheck source=../tap.sh
. "$(dirname "${BASH_SOURCE[0]}")/../tap.sh"

echo "1..9"

# json_set FILE KEY VALUE: FILE with KEY's number (or null) replaced as text,
# every other figure exactly as written; json_drop FILE KEY: without KEY.
json_set() {
    python3 - "$@" <<'PY'
import re, sys
path, key, value = sys.argv[1:4]
text = open(path).read()
new, n = re.subn(r'("%s": )(-?[0-9.]+|null)' % re.escape(key), lambda m: m.group(1) + value, text)
assert n == 1, f"{key}: {n} matches in {path}"
open(path, "w").write(new)
PY
}
json_drop() {
    python3 - "$@" <<'PY'
import re, sys
path, key = sys.argv[1:3]
text = open(path).read()
new, n = re.subn(r'"%s": (-?[0-9.]+|null), ?' % re.escape(key), "", text)
assert n == 1, f"{key}: {n} matches in {path}"
open(path, "w").write(new)
PY
}
# The keys bench/run writes into build/bench.json: its JSON heredoc.
sed -n '/^cat >"\$OUT" <<JSON$/,/^JSON$/p' bench/run | grep -o '"[a-z0-9_]*":' | tr -d '":' |
    sort -u >"$T/run-keys"

# The tree: the committed block is what docs/bench.json makes.
run "$TABLE" --check
if [ "$rc" -eq 0 ] && [ ! -s "$T/out" ]; then
    pass "docs/benchmarks.md's table is scripts/bench-table's from docs/bench.json"
else
    fail "docs/benchmarks.md's table is scripts/bench-table's from docs/bench.json" \
        "regenerate it: scripts/bench-table --write" "$(run_diag "$TABLE" --check)"
fi

# Every key bench/run writes is shown in the table or left out by name.
"$TABLE" --keys >"$T/table-keys" 2>"$T/err"
if [ -s "$T/run-keys" ] && diff "$T/run-keys" "$T/table-keys" >"$T/diff"; then
    pass "the table accounts for every key bench/run writes ($(wc -l <"$T/run-keys"))"
else
    fail "the table accounts for every key bench/run writes" \
        "< bench/run writes it, > the table reads it (ROWS or LEFT_OUT in $TABLE)" "$(cat "$T/diff" "$T/err")"
fi

# The fixture has every key bench/run writes, and says it is a fixture.
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d.get("fixture") is True
print("\n".join(sorted(k for k in d if not k.startswith("fixture"))))' "$FIXTURE" \
    >"$T/fixture-keys" 2>"$T/err"
if diff "$T/run-keys" "$T/fixture-keys" >"$T/diff"; then
    pass "the fixture holds every key bench/run writes, marked \"fixture\": true"
else
    fail "the fixture holds every key bench/run writes, marked \"fixture\": true" "$(cat "$T/diff" "$T/err")"
fi

# A document and a JSON of the test's own, the block made from the fixture.
cp "$FIXTURE" "$T/bench.json"
cp docs/benchmarks.md "$T/doc.md"
"$TABLE" --write --json "$T/bench.json" --doc "$T/doc.md" 2>"$T/err"
run "$TABLE" --check --json "$T/bench.json" --doc "$T/doc.md"
is "--write makes the block --check accepts" "$rc $(cat "$T/out" "$T/err")" "0 "

# --write changed the block only.
strip() { awk '/^<!-- bench-table:/ {skip = 1} !skip {print} /^<!-- \/bench-table -->/ {skip = 0}' "$1"; }
if diff <(strip docs/benchmarks.md) <(strip "$T/doc.md") >"$T/diff"; then
    pass "--write leaves everything outside the block as it was"
else
    fail "--write leaves everything outside the block as it was" "$(head -n 20 "$T/diff")"
fi

# A figure edited by hand in the block: the first digit of the first
# row's value, made another digit.
python3 - "$T/doc.md" "$T/edited.md" <<'PY'
import re, sys
lines = open(sys.argv[1]).read().split("\n")
start = next(i for i, l in enumerate(lines) if l.startswith("<!-- bench-table:"))
row = next(i for i in range(start, len(lines)) if lines[i].startswith("|---")) + 1
cells = lines[row].split(" | ")
cells[1] = re.sub(r"\d", lambda m: str((int(m.group(0)) + 1) % 10), cells[1], count=1)
lines[row] = " | ".join(cells)
open(sys.argv[2], "w").write("\n".join(lines))
PY
run "$TABLE" --check --json "$T/bench.json" --doc "$T/edited.md"
edited=$(grep -F -- "$(diff "$T/doc.md" "$T/edited.md" | sed -n 's/^> //p')" "$T/out" | head -n 1)
if [ "$rc" -eq 1 ] && [ -n "$edited" ] && grep -q 'scripts/bench-table --write' "$T/err"; then
    pass "a figure edited by hand in the block fails --check, with the diff"
else
    fail "a figure edited by hand in the block fails --check, with the diff" \
        "$(run_diag "$TABLE" --check --json "$T/bench.json" --doc "$T/edited.md")"
fi

# A figure of the JSON changed: the committed block no longer matches.
cp "$T/bench.json" "$T/changed.json"
json_set "$T/changed.json" soldout_rps 12345
run "$TABLE" --check --json "$T/changed.json" --doc "$T/doc.md"
if [ "$rc" -eq 1 ] && grep -q '^+.*12,345/s' "$T/out"; then
    pass "a figure of the JSON changed fails --check, the new figure in the diff"
else
    fail "a figure of the JSON changed fails --check, the new figure in the diff" \
        "$(run_diag "$TABLE" --check --json "$T/changed.json" --doc "$T/doc.md")"
fi

# A key missing from the JSON: named, exit 2, and no "null" anywhere.
cp "$T/bench.json" "$T/missing.json"
json_drop "$T/missing.json" soldout_p99_ms
run "$TABLE" --check --json "$T/missing.json" --doc "$T/doc.md"
if [ "$rc" -eq 2 ] && grep -q 'has no key soldout_p99_ms' "$T/err" && ! grep -qi null "$T/out" "$T/err"; then
    pass "a key missing from the JSON is named (exit 2), never printed as null"
else
    fail "a key missing from the JSON is named (exit 2), never printed as null" \
        "$(run_diag "$TABLE" --check --json "$T/missing.json" --doc "$T/doc.md")"
fi

# A figure the run did not measure (null: bench/pgconnect needs root).
cp "$T/bench.json" "$T/null.json"
json_set "$T/null.json" pg_connect_scram_tls_ms null
run "$TABLE" --json "$T/null.json"
row=$(grep '^| a new PostgreSQL connection' "$T/out")
if [ "$rc" -eq 0 ] && [[ $row == *"| not measured |"* ]] && ! grep -qi null "$T/out"; then
    pass "a figure that is null in the JSON is \"not measured\" in the table"
else
    fail "a figure that is null in the JSON is \"not measured\" in the table" "row: $row" \
        "$(run_diag "$TABLE" --json "$T/null.json")"
fi

[ "$failed" -eq 0 ]
