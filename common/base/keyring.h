/* keyring: named HMAC-SHA256 keys from a "KID:FILE" list, and the MACs they
 * make, which travel inside messages as "KID:HEX" (the orders' producer MAC,
 * common/sale/ordersig.h; the payments' MAC, common/sale/paysig.h).
 *
 * A list is a CFG_LIST setting (kafka.order_keys, kafka.payment_keys) and a
 * folder setting beside it (kafka.order_key_dir, ...), described once by a
 * struct keyring_spec. The first entry signs, every entry verifies, so a key
 * is rotated by adding the new one where MACs are checked, then putting it
 * first where they are made, then dropping the old one (docs/security.md).
 * FILE is absolute; or a bare name, which is the systemd credential of that
 * name when $CREDENTIALS_DIRECTORY is set (as for password files); or a path
 * under the folder setting. A key file follows secret_read_key's rules (a
 * regular file of mode 0600 or 0400, one trailing newline stripped: the
 * key is the file's other bytes) and holds at least KEYRING_KEY_MIN bytes;
 * KID is [A-Za-z0-9_-]{1,KEYRING_KID_MAX}. The MAC is OpenSSL's
 * HMAC-SHA256 over a text the caller makes (the message's fields, each
 * module its own), compared in constant time.
 *
 * keyring_* work on a set the caller owns (tests, -t, seckillctl). A
 * struct keyring_live is a process's current set of one list: loaded at
 * start (keyring_live_load), replaced on SIGHUP (keyring_reload_hook: every
 * key file read again, a bad one refuses the reload and every set stays as
 * it was). keyring_live_sign and keyring_live_verify may be called from any
 * thread at any time: they hold the live set's lock across the one HMAC, so
 * a reload's commit cannot free the keys under them (it waits for that
 * HMAC, nothing more). Loading, unloading and the hook belong to the main
 * thread. */
#ifndef SECKILL_KEYRING_H
#define SECKILL_KEYRING_H

#include <pthread.h>
#include <stddef.h>

#include "cfg.h"
#include "daemon.h"

#define KEYRING_KID_MAX 32
#define KEYRING_KEY_MIN 32
/* "KID:HEX" with its NUL: a key id, ':', 64 hex digits (SHA-256). */
#define KEYRING_SIG_MAX (KEYRING_KID_MAX + 1 + 64 + 1)

enum keyring_verdict {
    KEYRING_OK,
    KEYRING_NONE,        /* the message has no MAC */
    KEYRING_UNKNOWN_KID, /* made with a key this set does not hold */
    KEYRING_BAD,         /* the MAC does not match: forged or altered */
};

/* Which settings a list is, and the words its errors and log lines use. */
struct keyring_spec {
    const char *setting;   /* "kafka.order_keys" */
    size_t list_off;       /* offsetof(struct cfg, <its struct cfg_list>) */
    size_t dir_off;        /* offsetof(struct cfg, <its folder, a char *>) */
    const char *signer;    /* "a producer key": "not signed by a producer key: ..." */
    const char *empty_why; /* why an empty list is refused (ends the error) */
    const char *name;      /* "order keys": "order keys: 2 loaded; ..." */
    const char *signs;     /* "orders are signed": "...; orders are signed with key id k1" */
};

struct keyring;

/* Load c's list of spec. An empty list is an error; errors name the
 * setting's place and the entry. 0 and *out (caller frees), or -1 with err. */
int keyring_load(const struct keyring_spec *spec, const struct cfg *c, struct keyring **out, char *err,
                 size_t errlen);
void keyring_free(struct keyring *k);
size_t keyring_count(const struct keyring *k);
/* sig = "KID:HEX", the MAC of text under k's first key. 0, or -1 (no key,
 * or OpenSSL failed). */
int keyring_sign(const struct keyring *k, const void *text, size_t len, char sig[KEYRING_SIG_MAX]);
/* Check sig ("" when the message had none) against text. Anything but
 * KEYRING_OK puts the reason in err ("not signed by <signer>: ..."). */
enum keyring_verdict keyring_verify(const struct keyring *k, const void *text, size_t len, const char *sig,
                                    char *err, size_t errlen);

/* A process's current set of one list. */
struct keyring_live {
    const struct keyring_spec *spec;
    pthread_mutex_t mu;
    struct keyring *cur;  /* under mu */
    struct keyring *next; /* main thread only: prepared by a reload, not committed */
};
#define KEYRING_LIVE_INIT(specp) { .spec = (specp), .mu = PTHREAD_MUTEX_INITIALIZER }

/* Install c's keys (replacing any): 0, or -1 with err and the set as it was. */
int keyring_live_load(struct keyring_live *l, const struct cfg *c, char *err, size_t errlen);
/* Free the set (at exit). */
void keyring_live_unload(struct keyring_live *l);
/* keyring_sign / keyring_verify with the current set; without one, sign
 * fails and verify says KEYRING_UNKNOWN_KID. */
int keyring_live_sign(struct keyring_live *l, const void *text, size_t len, char sig[KEYRING_SIG_MAX]);
enum keyring_verdict keyring_live_verify(struct keyring_live *l, const void *text, size_t len,
                                         const char *sig, char *err, size_t errlen);
/* For -t: c's list of spec loads. 0, or -1 with err. */
int keyring_check(const struct keyring_spec *spec, const struct cfg *c, char *err, size_t errlen);

/* The reload hook of the live sets of v (NULL-terminated; v must outlive
 * the hook): each reads its list again; any failure refuses the whole
 * reload (the sets prepared are dropped), and only then do all of them
 * commit, each saying "<name>: N loaded; <signs> with key id <first>". */
struct daemon_reload_hook keyring_reload_hook(struct keyring_live *const *v);

#endif
