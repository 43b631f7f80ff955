/* secret: a password (or a key) read from a file, kept where a core dump does not reach.
 *
 * A secret lives in a page mapped for it alone, marked MADV_DONTDUMP (left
 * out of core dumps) and, when RLIMIT_MEMLOCK allows, locked in memory (not
 * swapped; best effort). Freeing wipes it (explicit_bzero) before the page is
 * unmapped. The file is read straight into that page, never through stdio's
 * buffers.
 *
 * The file (secret_read): a regular file, not readable by group or others
 * (the rule libpq applies to ~/.pgpass), at most SECRET_MAX bytes, not empty;
 * its content is the secret, one trailing newline ("\n" or "\r\n") stripped.
 * Errors name the path and what is wrong, never a byte of the content.
 *
 * Threads: a shared secret (one a running configuration holds, which a
 * reload replaces while other threads connect) is only read through
 * secret_dup, which copies it under the secret's lock into a private one;
 * secret_replace swaps new content in under that lock. secret_str is for a
 * private secret only. */
#ifndef SECKILL_SECRET_H
#define SECKILL_SECRET_H

#include <stddef.h>

/* The longest secret, in bytes (a generous password; libpq's own limit for
 * a .pgpass line is 320). */
#define SECRET_MAX 1024

struct secret;

/* Read the file at path into a new secret. 0 and *out (caller frees), or -1
 * with "PATH: reason" in err. */
int secret_read(const char *path, struct secret **out, char *err, size_t errlen);
/* The same for a key (an HS256 secret, common/base/jwt.h): the same file rules
 * and the same page, but any bytes, NUL included (a secret made with
 * `head -c 32 /dev/urandom`); secret_len is its length, secret_str its
 * first byte. */
int secret_read_key(const char *path, struct secret **out, char *err, size_t errlen);
/* A new, empty secret (no password): 0 or -1 (out of memory). */
int secret_empty(struct secret **out);
/* A private copy of s, taken under s's lock; NULL when out of memory. */
struct secret *secret_dup(struct secret *s);
/* Put src's content into dst under dst's lock (src is the caller's own). */
void secret_replace(struct secret *dst, const struct secret *src);
/* The secret's text, NUL-terminated ("" for an empty one). Private secrets only. */
const char *secret_str(const struct secret *s);
/* Its length in bytes. */
size_t secret_len(const struct secret *s);
/* Wipe and unmap; NULL is fine. */
void secret_free(struct secret *s);

/* The file a password_file setting names when it is a bare name (no '/')
 * and $CREDENTIALS_DIRECTORY is set (systemd's LoadCredential=): a heap
 * string "$CREDENTIALS_DIRECTORY/name". NULL when the rule does not apply
 * (the caller resolves the value as any other path), or out of memory. */
char *secret_credential_path(const char *value);

#endif
