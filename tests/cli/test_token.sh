#!/usr/bin/env bash
# tests/cli/test_token.sh BUILD_DIR: `seckillctl token issue`, the bearer
# tokens for buyers. Needs no running stack: tokens are signed from the key
# files alone. Tokens are decoded and their signatures checked here with
# python3 and the openssl command, not with seckill's own code. Speaks TAP.
set -u

BUILD_ARG=${1:?usage: tests/cli/test_token.sh BUILD_DIR}
BUILD=$(cd "$BUILD_ARG" 2>/dev/null && pwd) || { echo "Bail out! no build dir $BUILD_ARG"; exit 1; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
command -v python3 >/dev/null 2>&1 || { echo "1..0 # SKIP python3 is needed to decode tokens"; exit 0; }

CTL=$BUILD/seckillctl
CFG=config/seckill.cfg
SECRET=config/dev-keys/DEV-ONLY-hs256.secret # jwt.keys "dev-hs256" in $CFG

T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

# shellcheck source=../tap.sh
. "$(dirname "${BASH_SOURCE[0]}")/../tap.sh"

# refused DESC SUBSTR ARGS...: token issue ARGS exits 2, prints nothing on
# stdout and SUBSTR on stderr.
refused() {
    local desc=$1 sub=$2 why=""
    shift 2
    run "$CTL" -c "${REFCFG:-$CFG}" token "$@"
    [ "$rc" -eq 2 ] || why="exit status $rc, want 2"
    [ -s "$T/out" ] && why="${why:+$why; }stdout is not empty"
    grep -qF -- "$sub" "$T/err" || why="${why:+$why; }stderr lacks '$sub'"
    if [ -z "$why" ]; then pass "$desc"; else fail "$desc" "$why" "$(run_diag token "$@")"; fi
}

# seg TOKEN PART: the decoded JSON of segment PART (0 header, 1 payload).
# field TOKEN PART KEY: that member as JSON ("42" for the string 42), or MISSING.
seg() {
    python3 -c '
import base64, sys
s = sys.argv[1].split(".")[int(sys.argv[2])]
sys.stdout.write(base64.urlsafe_b64decode(s + "=" * (-len(s) % 4)).decode())' "$1" "$2" 2>/dev/null
}
field() {
    python3 -c '
import base64, json, sys
s = sys.argv[1].split(".")[int(sys.argv[2])]
o = json.loads(base64.urlsafe_b64decode(s + "=" * (-len(s) % 4)))
print(json.dumps(o[sys.argv[3]]) if sys.argv[3] in o else "MISSING")' "$1" "$2" "$3" 2>/dev/null || echo UNDECODABLE
}
# hs_ok TOKEN SECRETFILE: the HS256 signature checks out with the file's
# secret (one trailing newline dropped, as the producer reads it).
hs_ok() {
    python3 -c '
import base64, hashlib, hmac, sys
t, path = sys.argv[1], sys.argv[2]
key = open(path, "rb").read()
key = key[:-2] if key.endswith(b"\r\n") else key[:-1] if key.endswith(b"\n") else key
h, p, s = t.split(".")
mac = hmac.new(key, (h + "." + p).encode(), hashlib.sha256).digest()
sys.exit(0 if hmac.compare_digest(mac, base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))) else 1)' "$1" "$2"
}
b64url_re='^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$'

# --- 1: one token ------------------------------------------------------------------

if [ ! -x "$CTL" ]; then
    echo "Bail out! missing $CTL"
    exit 1
fi
before=$(date +%s)
run "$CTL" -c "$CFG" token issue --user 42
after=$(date +%s)
is "token issue --user 42 exits 0" "$rc" 0
is "it prints exactly one line" "$(wc -l <"$T/out")" 1
is "and nothing on stderr" "$(cat "$T/err")" ""
tok=$(head -n 1 "$T/out")
desc="the token is three base64url segments"
if [[ $tok =~ $b64url_re ]]; then pass "$desc"; else fail "$desc" "'$tok'"; fi
is "header alg is HS256" "$(field "$tok" 0 alg)" '"HS256"'
is "header typ is JWT" "$(field "$tok" 0 typ)" '"JWT"'
is "header kid is jwt.signing_key (dev-hs256)" "$(field "$tok" 0 kid)" '"dev-hs256"'
is "payload sub is the string \"42\"" "$(field "$tok" 1 sub)" '"42"'
iat=$(field "$tok" 1 iat)
exp=$(field "$tok" 1 exp)
if [[ $iat =~ ^[0-9]+$ ]] && [ "$iat" -ge "$before" ] && [ "$iat" -le "$after" ]; then
    pass "iat is now"
else
    fail "iat is now" "iat '$iat', clock $before..$after"
fi
is "the default --ttl is 1h (exp - iat)" "$(( ${exp:-0} - ${iat:-0} ))" 3600
is "no iss or aud when none are configured" "$(field "$tok" 1 iss) $(field "$tok" 1 aud)" "MISSING MISSING"
if hs_ok "$tok" "$SECRET"; then pass "the HMAC-SHA256 signature checks out with the dev secret"
else fail "the HMAC-SHA256 signature checks out with the dev secret" "$(seg "$tok" 0) $(seg "$tok" 1)"; fi
# Not just any HMAC: another secret does not verify it.
printf 'another-secret-0123456789abcdef-0123456789\n' >"$T/other.secret"
desc="another secret does not verify it"
if hs_ok "$tok" "$T/other.secret"; then fail "$desc" "it does"; else pass "$desc"; fi

for user in 1 9223372036854775807; do
    run "$CTL" -c "$CFG" token issue --user "$user"
    is "--user $user: sub is \"$user\"" "$rc $(field "$(cat "$T/out")" 1 sub)" "0 \"$user\""
done

# --- 2: --ttl ----------------------------------------------------------------------

for pair in 90:90 90s:90 15m:900 2h:7200 7d:604800 1s:1 366d:31622400 31622400:31622400; do
    ttl=${pair%%:*} want=${pair#*:}
    run "$CTL" -c "$CFG" token issue --user 7 --ttl "$ttl"
    t=$(cat "$T/out")
    is "--ttl $ttl: exp - iat is $want" "$rc $(( $(field "$t" 1 exp) - $(field "$t" 1 iat) ))" "0 $want"
done

# --- 3: --users --------------------------------------------------------------------

run "$CTL" -c "$CFG" token issue --users 5-7 --ttl 15m
is "--users 5-7 exits 0 and prints 3 lines" "$rc $(wc -l <"$T/out")" "0 3"
subs=$(while read -r t; do field "$t" 1 sub; done <"$T/out" | tr '\n' ' ')
is "their subs are \"5\", \"6\", \"7\" in order" "$subs" '"5" "6" "7" '
is "the three tokens differ" "$(sort -u "$T/out" | wc -l)" 3
bad_sig=0
while read -r t; do hs_ok "$t" "$SECRET" || bad_sig=$((bad_sig + 1)); done <"$T/out"
is "each of them is signed" "$bad_sig" 0
run "$CTL" -c "$CFG" token issue --users 9-9
is "--users 9-9 prints one token for 9" "$rc $(wc -l <"$T/out") $(field "$(cat "$T/out")" 1 sub)" '0 1 "9"'

# --- 4: refused arguments -------------------------------------------------------------

for bad in 0 -5 1w 5x 367d 31622401 1.5h m s "" " 60" 99999999999999999999d 9223372036854775807; do
    refused "--ttl '$bad' exits 2 and names --ttl" "--ttl" issue --user 1 --ttl "$bad"
done
for bad in 0 -5 abc 9223372036854775808 "" "+5" "5 " 0x10; do
    refused "--user '$bad' exits 2 and names --user" "--user" issue --user "$bad"
done
for bad in 7-5 0-3 -3 3- 1-1000001 a-b 5 "5 - 7" -5-7; do
    refused "--users '$bad' exits 2 and names --users" "--users" issue --users "$bad"
done
refused "--user and --users together exit 2" "--users" issue --user 1 --users 2-3
refused "--user twice exits 2" "--user" issue --user 1 --user 2
refused "an unknown --key exits 2 and names it" "no key 'nope' in jwt.keys" issue --user 1 --key nope
refused "no --user exits 2 with the usage" "usage:" issue
refused "a stray argument exits 2 with the usage" "usage:" issue --user 1 extra
refused "token without a subcommand exits 2" "usage:"
refused "an unknown subcommand exits 2" "usage:" revoke --user 1
refused "an unknown option exits 2" "usage:" issue --user 1 --bogus

# --- 5: other keys: RS256 and ES256 private keys sign, public ones cannot -------

mkdir -p "$T/keys"
if openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$T/keys/rs.pem" 2>/dev/null &&
    openssl pkey -in "$T/keys/rs.pem" -pubout -out "$T/keys/rs.pub.pem" 2>/dev/null &&
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$T/keys/es.pem" 2>/dev/null &&
    openssl pkey -in "$T/keys/es.pem" -pubout -out "$T/keys/es.pub.pem" 2>/dev/null; then
    pass "openssl made RSA-2048 and P-256 key pairs"
else
    fail "openssl made RSA-2048 and P-256 key pairs"
fi
(umask 077 && printf 'rotated-secret-0123456789abcdef-0123456789\n' >"$T/keys/hs.secret") # 0600, as a password file
# jwtcfg FILE KEYS SIGNING [ISS AUD]: a minimal configuration with a jwt section.
jwtcfg() {
    {
        echo 'kafka = { brokers = "127.0.0.1:19092"; };'
        echo 'postgres = { dbname = "seckill"; admin_user = "admin"; };'
        echo "jwt = { key_dir = \"$T/keys\"; keys = [ $2 ]; signing_key = \"$3\";"
        echo "  issuer = \"${4:-}\"; audience = \"${5:-}\"; };"
    } >"$1"
}
jwtcfg "$T/multi.cfg" \
    '"rs:RS256:rs.pem", "rpub:RS256:rs.pub.pem", "es:ES256:es.pem", "epub:ES256:es.pub.pem", "hs:HS256:hs.secret"' "" \
    "https://login.example" "seckill"

run "$CTL" -c "$T/multi.cfg" token issue --user 11
t=$(cat "$T/out")
is "no jwt.signing_key: the first key that can sign (rs) signs" \
    "$rc $(field "$t" 0 kid) $(field "$t" 0 alg)" '0 "rs" "RS256"'
is "configured iss and aud are in the payload" \
    "$(field "$t" 1 iss) $(field "$t" 1 aud)" '"https://login.example" "seckill"'
# The RS256 signature, checked by the openssl command with the public key.
python3 -c '
import base64, sys
h, p, s = sys.argv[1].split(".")
open(sys.argv[2], "wb").write((h + "." + p).encode())
open(sys.argv[3], "wb").write(base64.urlsafe_b64decode(s + "=" * (-len(s) % 4)))' "$t" "$T/signed" "$T/sig" 2>/dev/null
if openssl dgst -sha256 -verify "$T/keys/rs.pub.pem" -signature "$T/sig" "$T/signed" >/dev/null 2>&1; then
    pass "openssl verifies the RS256 signature (PKCS#1 v1.5, SHA-256)"
else
    fail "openssl verifies the RS256 signature (PKCS#1 v1.5, SHA-256)" "$t"
fi
run "$CTL" -c "$T/multi.cfg" token issue --user 12 --key es
t=$(cat "$T/out")
is "--key es signs with ES256" "$rc $(field "$t" 0 kid) $(field "$t" 0 alg)" '0 "es" "ES256"'
sig=${t##*.}
is "an ES256 signature is 64 bytes r||s (86 base64url characters)" "${#sig}" 86
run "$CTL" -c "$T/multi.cfg" token issue --user 13 --key hs
if [ "$rc" -eq 0 ] && hs_ok "$(cat "$T/out")" "$T/keys/hs.secret"; then
    pass "--key hs signs with the secret of that file"
else
    fail "--key hs signs with the secret of that file" "$(run_diag token issue --user 13 --key hs)"
fi
REFCFG=$T/multi.cfg refused "--key rpub (a public key) exits 2: cannot sign" \
    "key rpub holds only a public key: cannot sign" issue --user 1 --key rpub
REFCFG=$T/multi.cfg refused "--key epub (a public key) exits 2: cannot sign" \
    "key epub holds only a public key: cannot sign" issue --user 1 --key epub

jwtcfg "$T/pub.cfg" '"rpub:RS256:rs.pub.pem"' ""
REFCFG=$T/pub.cfg refused "public keys only: exits 2, no key can sign" "no key in jwt.keys can sign" issue --user 1

jwtcfg "$T/broken.cfg" '"hs:HS256:no-such.secret"' "hs"
run "$CTL" -c "$T/broken.cfg" token issue --user 1
is "an unreadable key file exits 1" "$rc" 1
if grep -qF "no-such.secret" "$T/err" && [ ! -s "$T/out" ]; then
    pass "the error names the file, nothing is printed on stdout"
else
    fail "the error names the file, nothing is printed on stdout" "$(run_diag token issue --user 1)"
fi
printf 'tiny-xyzzy\n' >"$T/keys/short.secret"
jwtcfg "$T/short.cfg" '"hs:HS256:short.secret"' "hs"
run "$CTL" -c "$T/short.cfg" token issue --user 1
if [ "$rc" -eq 1 ] && grep -qF "short.secret" "$T/err" && ! grep -qF "xyzzy" "$T/err"; then
    pass "a too short secret exits 1, naming the file, not its content"
else
    fail "a too short secret exits 1, naming the file, not its content" "$(run_diag token issue --user 1)"
fi

echo "1..$n"
[ "$failed" -eq 0 ]
