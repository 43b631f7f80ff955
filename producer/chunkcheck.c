#include "chunkcheck.h"

void ck_begin(struct ck_body *b, const char *head, size_t head_size, size_t room)
{
    b->start = (uintptr_t)head + head_size;
    b->room = room;
    b->left = 0;
    b->pieces = 0;
    b->lost = 0;
}

static int hex(char c, unsigned *v)
{
    if (c >= '0' && c <= '9')
        *v = (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f')
        *v = (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
        *v = (unsigned)(c - 'A' + 10);
    else
        return 0;
    return 1;
}

/* A chunk line's content (its CRLF excluded): HEXDIG, then an extension of
 * visible ASCII, spaces and tabs (no CR, no control) of CK_EXT_MAX bytes at
 * most. NULL with the size in *size, or what is wrong; 1 in *ours when the
 * line is not what the library takes either (it would have refused it: the
 * buffer is not what we think, and nothing is refused). */
static const char *line(const char *s, size_t n, uint64_t *size, int *ours)
{
    size_t i = 0;
    unsigned d;
    *size = 0;
    *ours = 0;
    for (; i < n && i <= 16 && hex(s[i], &d); i++)
        *size = *size << 4 | d;
    /* More than 16 digits are past 64 bits: the library refuses those. */
    if (i == 0 || i > 16 || (i < n && s[i] != ';')) {
        *ours = 1;
        return "not a chunk line";
    }
    if (n - i > CK_EXT_MAX + 1)
        return "an over-long chunk extension";
    for (; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c < 0x20 && c != '\t') || c >= 0x7f)
            return "a control character in a chunk extension (a bare CR?)";
    }
    return NULL;
}

/* The piece at p came past the start: its chunk line ends just before it,
 * and began after the LF of the chunk before, or at the start. */
static const char *framed(struct ck_body *b, const char *p, size_t len)
{
    const char *start = (const char *)b->start, *s = p - 1, *why;
    uint64_t size;
    int ours;
    if (*s != '\n')
        goto blind;
    if (s - 1 < start || s[-1] != '\r')
        return "a chunk line ended by a bare LF";
    /* Its start, no further back than the longest line taken. */
    for (s -= 1; s > start && s[-1] != '\n'; s--)
        if (p - s > 16 + CK_EXT_MAX + 4)
            return "an over-long chunk extension";
    if ((why = line(s, (size_t)(p - 2 - s), &size, &ours)) != NULL) {
        if (ours)
            goto blind;
        return why;
    }
    if (s > start) {
        if (b->pieces == 0)
            goto blind; /* nothing comes before the first chunk's line */
        if (s - 2 < start || s[-2] != '\r')
            return "chunk data ended by a bare LF";
    }
    if (len > size)
        goto blind;
    b->left = size - len;
    b->lost = 0;
    return NULL;
blind:
    b->lost = 1;
    return NULL;
}

const char *ck_piece(struct ck_body *b, const char *data, size_t len)
{
    uintptr_t p = (uintptr_t)data;
    const char *why = NULL;
    if (p < b->start || p - b->start >= b->room)
        b->lost = 1; /* not where the body is read: nothing to say */
    else if (p > b->start)
        why = framed(b, data, len);
    else if (!b->lost && b->pieces && len <= b->left)
        b->left -= len; /* the same chunk, read on */
    else
        b->lost = 1; /* its line was taken at the end of a read before */
    b->pieces++;
    return why;
}
