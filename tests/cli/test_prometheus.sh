#!/usr/bin/env bash
# tests/cli/test_prometheus.sh BUILD_DIR: the shipped alerting rules
# (config/prometheus/seckill-rules.yml) are valid for Prometheus, their unit
# tests (tests/prometheus/*.test.yml, input series -> which alerts fire
# when) pass, every rule has a test in which it fires, and every metric a
# rule names is one a daemon serves. promtool comes with Debian's prometheus
# package (scripts/stack up installs it). Speaks TAP.
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
RULES=config/prometheus/seckill-rules.yml
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

# shellcheck source=../tap.sh
. "$(dirname "${BASH_SOURCE[0]}")/../tap.sh"

echo "1..4"

run promtool check rules "$RULES"
if [ "$rc" -eq 0 ]; then pass "promtool check rules $RULES"; else fail "promtool check rules $RULES" "$(run_diag promtool check rules "$RULES")"; fi

run promtool test rules tests/prometheus/*.test.yml
if [ "$rc" -eq 0 ]; then pass "promtool test rules: every case as expected"; else fail "promtool test rules" "$(run_diag promtool test rules tests/prometheus/*.test.yml)"; fi

# Every alert fires in at least one test case (an exp_labels under its name).
sed -n 's/^ *- alert: *//p' "$RULES" | sort -u >"$T/rules"
awk '/alertname:/ {a = $2} /exp_labels:/ && a != "" {print a}' tests/prometheus/*.test.yml | sort -u >"$T/fired"
missing=$(comm -23 "$T/rules" "$T/fired" | tr '\n' ' ')
if [ -s "$T/rules" ] && [ -z "$missing" ]; then
    pass "each of the $(wc -l <"$T/rules") rules fires in a test"
else
    fail "each rule fires in a test" "never seen firing: ${missing:-no rules found}"
fi

# The rules name only metrics the daemons declare (a renamed metric would
# silently never alert). Families are the quoted seckill_* names in the
# metric lists; counters' _total is part of the name there.
grep -ohE 'seckill_(producer|consumer)_[a-z0-9_]+' "$RULES" | sort -u >"$T/used"
grep -ohE '"seckill_(producer|consumer)_[a-z0-9_]+"' producer/*.[ch] consumer/*.[ch] | tr -d '"' | sort -u >"$T/served"
unknown=$(comm -23 "$T/used" "$T/served" | tr '\n' ' ')
if [ -s "$T/used" ] && [ -z "$unknown" ]; then
    pass "the rules' $(wc -l <"$T/used") metrics are all served"
else
    fail "the rules name only served metrics" "not served: ${unknown:-no metrics found}"
fi
exit $((failed > 0))
