/* admtoken: the waiting room's admission tokens (issue #58), minted by a
 * producer for a buyer the room admitted, and required by a queued item's
 * buy (the Seckill-Admission header, docs/api.md).
 *
 * A token names the item, the buyer, the sale it admits to (the item's
 * starts_ms: an item created again is another sale), when it was minted
 * (Redis's clock at the asking), when the admission ends and a nonce (the
 * buyer's place in the line, unique within the item), and carries
 * "KID:HEX", HMAC-SHA256 (OpenSSL) under a key of producer.admission_keys
 * that only producers hold (never buyers, never Kafka), over the text
 *   "seckill-admission-v1\n<item>\n<user>\n<starts_ms>\n<minted_ms>\n<expires_ms>\n<nonce>\n"
 * On the wire: "<item>.<user>.<starts_ms>.<minted_ms>.<expires_ms>.<nonce>.<KID>:<HEX>",
 * every number a positive decimal without a sign or leading zero (one token,
 * one spelling), safe in a header.
 *
 * A producer checks a token before Redis is asked (adm_check: shape, MAC,
 * item, buyer, minted not before the sale's opening, not expired); Redis
 * checks what only it knows, in the same atomic step as the reservation
 * (seckill_reserve_admitted: the same sale, not spent, still outstanding)
 * and spends it. Each refusal has a reason (ADM_REASONS), answered 403.
 *
 * Keys: producer.admission_keys, "KID:FILE" under producer.admission_key_dir,
 * with common/base/keyring.h's rules: the first signs, every one verifies,
 * so a key rotates by adding the new one to every producer, then putting it
 * first, then dropping the old one once the tokens it signed have expired.
 * The process's set is loaded by adm_load and replaced on SIGHUP through a
 * keyring_reload_hook of adm_live(); adm_mint and adm_check may be called
 * from any thread at any time. adm_keys_* work on a set the caller owns
 * (tests, seckillctl). adm_encode, adm_decode and adm_judge hold no state. */
#ifndef SECKILL_ADMTOKEN_H
#define SECKILL_ADMTOKEN_H

#include <stddef.h>
#include <stdint.h>

#include "cfg.h"
#include "keyring.h"

/* A token on the wire with its NUL: six numbers of at most 19 digits, six
 * separators, a MAC. */
#define ADM_TOKEN_MAX (6 * 20 + KEYRING_SIG_MAX + 8)
/* The request header that carries it. */
#define ADM_HEADER "Seckill-Admission"

/* Why a buy's admission was refused, declared once: X(name, the word the
 * 403 answers as "reason"), after OK (no refusal). The first ones the
 * producer decides before Redis; used, lapsed and other_sale Redis
 * decides. */
#define ADM_REASONS(X) X(OK, "ok") ADM_REASONS_REFUSED(X)
#define ADM_REASONS_REFUSED(X)                                                                    \
    X(MISSING, "missing")               /* a queued item's buy without a token */                 \
    X(MALFORMED, "malformed")           /* not a token's shape */                                 \
    X(UNKNOWN_KEY, "unknown_key")       /* signed by no key this producer holds */                \
    X(BAD_SIGNATURE, "bad_signature")   /* forged or altered */                                   \
    X(OTHER_ITEM, "other_item")         /* admits to another item */                              \
    X(OTHER_BUYER, "other_buyer")       /* admits another buyer */                                \
    X(BEFORE_OPENING, "before_opening") /* minted before the sale's opening */                    \
    X(EXPIRED, "expired")               /* its admission ended (this producer's clock) */         \
    X(USED, "used")                     /* spent by an earlier buy (Redis) */                     \
    X(LAPSED, "lapsed")                 /* not outstanding by Redis's clock: ended, slot given on */ \
    X(OTHER_SALE, "other_sale")         /* the item was created again since, or has no room now */

enum adm_reason {
#define ADM_ENUM(name, word) ADM_##name,
    ADM_REASONS(ADM_ENUM)
#undef ADM_ENUM
        ADM_NREASONS
};

/* The reason's word ("bad_signature"). */
const char *adm_reason_word(enum adm_reason r);

struct adm_token {
    int64_t item_id, user_id;
    int64_t starts_ms;  /* the sale's opening: the item's starts_ms when admitted */
    int64_t minted_ms;  /* Redis's clock when the producer minted it */
    int64_t expires_ms; /* the admission's end (Redis's), exclusive */
    int64_t nonce;      /* the buyer's place in the line: unique within the item */
    char sig[KEYRING_SIG_MAX];
};

/* The text the MAC covers into buf: its length, or -1 when it does not fit. */
int adm_text(const struct adm_token *t, char *buf, size_t len);
/* t (signed) on the wire into out: 0, or -1 when it does not fit. */
int adm_encode(const struct adm_token *t, char *out, size_t len);
/* A token from the wire (its fields, its sig unchecked): 0, or -1 when s is
 * not a token's shape. */
int adm_decode(const char *s, struct adm_token *t);
/* What a buy of item by buyer at now_ms (this host's clock) may think of a
 * token whose MAC verified: ADM_OK, or the reason to refuse it. */
enum adm_reason adm_judge(const struct adm_token *t, int64_t item_id, int64_t buyer, int64_t now_ms);

/* Sign t with the set's first key and put it on the wire into out: 0, or
 * -1 (no key, or it does not fit). */
int adm_keys_mint(const struct keyring *ks, struct adm_token *t, char *out, size_t len);
/* Check a token from the wire for a buy of item by buyer at now_ms: the
 * shape, the MAC, then adm_judge. ADM_OK with the token in *out (may be
 * NULL), or the reason. */
enum adm_reason adm_keys_check(const struct keyring *ks, const char *wire, int64_t item_id, int64_t buyer,
                               int64_t now_ms, struct adm_token *out);

/* The process's set: adm_load installs c's producer.admission_keys (an empty
 * list is an error): 0, or -1 with err and the set as it was. */
int adm_load(const struct cfg *c, char *err, size_t errlen);
void adm_unload(void);
/* adm_keys_mint and adm_keys_check with the process's set (without one,
 * minting fails and every token is ADM_UNKNOWN_KEY). */
int adm_mint(struct adm_token *t, char *out, size_t len);
enum adm_reason adm_check(const char *wire, int64_t item_id, int64_t buyer, int64_t now_ms,
                          struct adm_token *out);
/* The process's set, for a reload hook of several (keyring_reload_hook). */
struct keyring_live *adm_live(void);
/* For -t and tests: c's keys load (0), or -1 with err; adm_keys_load gives
 * the set to the caller (keyring_free). */
int adm_check_cfg(const struct cfg *c, char *err, size_t errlen);
int adm_keys_load(const struct cfg *c, struct keyring **out, char *err, size_t errlen);

#endif
