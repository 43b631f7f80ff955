#include "pgarr.h"

#include <endian.h>
#include <stdlib.h>
#include <string.h>

/* array_send's header: the number of dimensions, a has-NULLs flag and the
 * element type; then, per dimension, its length and lower bound. */
#define HEAD_NODIM 12
#define HEAD_ONEDIM 20
/* The longest value the server takes (a varlena's limit, 1 GiB - 1). */
#define TEXT_MAX ((size_t)(1u << 30) - 1)

static void put(struct pgarr *a, const void *p, size_t n)
{
    if (a->failed)
        return;
    if (a->len + n > a->cap) {
        size_t cap = a->cap ? a->cap : 256;
        while (cap < a->len + n)
            cap *= 2;
        unsigned char *d = realloc(a->data, cap);
        if (!d) {
            a->failed = true;
            return;
        }
        a->data = d;
        a->cap = cap;
    }
    memcpy(a->data + a->len, p, n);
    a->len += n;
}

static void put32(struct pgarr *a, uint32_t v)
{
    v = htobe32(v);
    put(a, &v, sizeof(v));
}

/* The big-endian v at a->data + at (room already there). */
static void set32(struct pgarr *a, size_t at, uint32_t v)
{
    v = htobe32(v);
    memcpy(a->data + at, &v, sizeof(v));
}

void pgarr_begin(struct pgarr *a, enum pgarr_type type)
{
    a->len = 0;
    a->n = 0;
    a->type = type;
    a->failed = false;
    /* Room for the one-dimension header, filled in by pgarr_end: the
     * element count is known only then. */
    for (int i = 0; i < HEAD_ONEDIM / 4; i++)
        put32(a, 0);
}

void pgarr_add_i64(struct pgarr *a, int64_t v)
{
    uint64_t x = htobe64((uint64_t)v);
    put32(a, sizeof(x));
    put(a, &x, sizeof(x));
    a->n++;
}

void pgarr_add_text(struct pgarr *a, const char *s, size_t len)
{
    if (len > TEXT_MAX) {
        a->failed = true;
        return;
    }
    put32(a, (uint32_t)len);
    put(a, s, len);
    a->n++;
}

int pgarr_end(struct pgarr *a)
{
    if (a->failed || a->len < HEAD_ONEDIM)
        return -1;
    /* No dimension at all for an empty array (what array_send writes for
     * '{}'): the 12 bytes of header alone. */
    if (a->n == 0)
        a->len = HEAD_NODIM;
    set32(a, 0, a->n ? 1 : 0);
    set32(a, 4, 0); /* no NULLs */
    set32(a, 8, (uint32_t)a->type);
    if (a->n) {
        set32(a, 12, a->n);
        set32(a, 16, 1); /* lower bound */
    }
    return 0;
}

int pgarr_i64(struct pgarr *a, const int64_t *v, size_t n)
{
    pgarr_begin(a, PGARR_INT8);
    for (size_t i = 0; i < n; i++)
        pgarr_add_i64(a, v[i]);
    return pgarr_end(a);
}

void pgarr_free(struct pgarr *a)
{
    free(a->data);
    memset(a, 0, sizeof(*a));
}
