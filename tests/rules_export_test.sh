#!/usr/bin/env bash
# `gpuwatch rules export`: the built-in rules as Prometheus alerting rules. The file passes
# `promtool check rules`, and `promtool test rules` drives its rules with series shaped as the
# agent serves them (tests/fixtures/rules/rules_test.yml): they fire where gpuwatch's engine
# would, with its cause, severity and layer, and stay quiet where not. --out writes the same
# bytes as stdout; an unwritable --out is an error naming the path.
GPUWATCH=$1 FIXTURES=$2
. "$(dirname "$0")/lib.sh"
need_peer promtool prometheus

"$GPUWATCH" rules export >"$TMP/stdout.yml" || fail "rules export exited non-zero"
"$GPUWATCH" rules export --out "$TMP/gpuwatch-rules.yml" || fail "rules export --out exited non-zero"
cmp -s "$TMP/stdout.yml" "$TMP/gpuwatch-rules.yml" || fail "--out and stdout differ"
promtool check rules "$TMP/gpuwatch-rules.yml" >"$TMP/check.txt" 2>&1 || { cat "$TMP/check.txt"; fail "promtool check rules"; }
grep -q 'SUCCESS: [0-9]* rules found' "$TMP/check.txt" || { cat "$TMP/check.txt"; fail "promtool found no rules"; }
cp "$FIXTURES/rules/rules_test.yml" "$TMP/"
(cd "$TMP" && promtool test rules rules_test.yml) >"$TMP/test.txt" 2>&1 || { cat "$TMP/test.txt"; fail "promtool test rules"; }
if "$GPUWATCH" rules export --out /nonexistent/dir/rules.yml 2>"$TMP/err.txt"; then fail "unwritable --out accepted"; fi
grep -q '/nonexistent/dir/rules.yml' "$TMP/err.txt" || { cat "$TMP/err.txt"; fail "the error does not name the path"; }
echo "rules_export_test: ok ($(grep -o '[0-9]* rules found' "$TMP/check.txt"))"
