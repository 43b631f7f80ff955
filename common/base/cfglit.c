#include "cfglit.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* Groups, lists and arrays open at once; a setting deeper than this is
 * never found (none of seckill's is past two). */
#define CFGLIT_DEPTH 16
/* The longest in-file path compared (seckill's are far shorter). */
#define CFGLIT_PATH_MAX 512

enum tok_kind { T_END, T_NAME, T_STRING, T_PUNCT, T_OTHER };

struct tok {
    enum tok_kind kind;
    const char *s;
    size_t len;
    int line; /* of its first character */
};

struct lex {
    const char *p, *end;
    int line;
};

/* What the scan looks for, and what it found. */
struct scan {
    const char *path, *name; /* the setting's full path, and its last part */
    size_t namelen;
    int line;
    /* the names of the groups open (kind T_END: a list's or an array's,
     * or a group inside one: it has no name) */
    struct tok frame[CFGLIT_DEPTH];
    int depth;
    int found;       /* the times the name was set on that line */
    struct tok value; /* the token after the first one's '=' */
};

static bool name_char(char c)
{
    return isalnum((unsigned char)c) || c == '_' || c == '*' || c == '-';
}

static bool lit_char(char c)
{
    return isalnum((unsigned char)c) || c == '_' || c == '.' || c == '+' || c == '-';
}

/* Past blanks, line ends and comments: # and // to the line's end, and
 * slash-star to star-slash (over lines; unclosed: to the file's end). */
static void skip_space(struct lex *x)
{
    while (x->p < x->end) {
        char c = *x->p;
        bool two = x->p + 1 < x->end;
        if (c == '\n') {
            x->line++;
            x->p++;
        } else if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
            x->p++;
        } else if (c == '#' || (c == '/' && two && x->p[1] == '/')) {
            while (x->p < x->end && *x->p != '\n')
                x->p++;
        } else if (c == '/' && two && x->p[1] == '*') {
            for (x->p += 2; x->p < x->end && !(x->p[0] == '*' && x->p + 1 < x->end && x->p[1] == '/'); x->p++)
                x->line += *x->p == '\n';
            x->p = x->p < x->end ? x->p + 2 : x->end;
        } else {
            return;
        }
    }
}

/* The next token into t. A string runs to its closing quote, a backslash
 * escaping the character after it. */
static void next(struct lex *x, struct tok *t)
{
    skip_space(x);
    t->s = x->p;
    t->line = x->line;
    t->kind = T_OTHER;
    if (x->p >= x->end) {
        t->kind = T_END;
    } else if (*x->p == '"') {
        for (x->p++; x->p < x->end && *x->p != '"'; x->p++) {
            if (*x->p == '\\' && x->p + 1 < x->end)
                x->p++;
            x->line += *x->p == '\n';
        }
        x->p += x->p < x->end;
        t->kind = T_STRING;
    } else if (isalpha((unsigned char)*x->p) || *x->p == '*') {
        while (x->p < x->end && name_char(*x->p))
            x->p++;
        t->kind = T_NAME;
    } else if (*x->p && strchr("=:;,{}()[]", *x->p)) {
        x->p++;
        t->kind = T_PUNCT;
    } else if (lit_char(*x->p)) {
        while (x->p < x->end && lit_char(*x->p))
            x->p++;
    } else {
        x->p++; /* '@' of @include, or what libconfig refused already */
    }
    t->len = (size_t)(x->p - t->s);
}

/* Whether the open groups and name make a path that ends sc->path (all of
 * it, or after one of its dots: the file may be included into a group). */
static bool in_path(const struct scan *sc, const struct tok *name)
{
    char in[CFGLIT_PATH_MAX];
    size_t n = 0, plen = strlen(sc->path);
    if (sc->depth > CFGLIT_DEPTH)
        return false;
    for (int i = 0; i <= sc->depth; i++) {
        const struct tok *t = i < sc->depth ? &sc->frame[i] : name;
        if (t->kind != T_NAME || n + t->len + 1 >= sizeof(in))
            return false;
        memcpy(in + n, t->s, t->len);
        n += t->len;
        in[n++] = '.';
    }
    n--; /* the last dot */
    return n <= plen && memcmp(sc->path + plen - n, in, n) == 0 &&
           (n == plen || sc->path[plen - n - 1] == '.');
}

static void push(struct scan *sc, const struct tok *named)
{
    if (sc->depth < CFGLIT_DEPTH)
        sc->frame[sc->depth] = named ? *named : (struct tok){ .kind = T_END };
    sc->depth++;
}

/* One pass over the file: every "NAME =" (or ':') of the setting's name on
 * its line, in its path, counted; the first one's value kept. */
static void scan(struct scan *sc, struct lex *x)
{
    struct tok t, name = { .kind = T_END }, assigned = { .kind = T_END };
    for (next(x, &t); t.kind != T_END; next(x, &t)) {
        if (t.kind == T_NAME && assigned.kind == T_END) {
            name = t; /* a setting's name, if '=' follows */
            continue;
        }
        if (t.kind == T_PUNCT && (*t.s == '=' || *t.s == ':') && name.kind == T_NAME) {
            assigned = name;
            if (name.line == sc->line && name.len == sc->namelen && memcmp(name.s, sc->name, name.len) == 0 &&
                in_path(sc, &name) && sc->found++ == 0) {
                struct lex peek = *x;
                next(&peek, &sc->value);
            }
        } else if (t.kind == T_PUNCT && strchr("{([", *t.s)) {
            push(sc, assigned.kind == T_NAME ? &assigned : NULL);
            assigned.kind = T_END;
        } else if (t.kind == T_PUNCT && strchr("})]", *t.s)) {
            sc->depth -= sc->depth > 0;
            assigned.kind = T_END;
        } else {
            assigned.kind = T_END; /* a value, or the end of one */
        }
        name.kind = T_END;
    }
}

int cfglit_find(const char *file, int line, const char *path, char *lit, size_t litlen, char *err,
                size_t errlen)
{
    const char *dot = strrchr(path, '.');
    struct scan sc = { .path = path, .name = dot ? dot + 1 : path, .line = line };
    char *buf = NULL;
    size_t len = 0;
    int ret = -1;
    sc.namelen = strlen(sc.name);
    if (util_read_file(file, &buf, &len) != 0) {
        snprintf(err, errlen, "%s:%d: '%s': cannot read the file again to check the integer as written: %s",
                 file, line, path, strerror(errno));
        return -1;
    }
    struct lex x = { buf, buf + len, 1 };
    scan(&sc, &x);
    if (sc.found == 0)
        snprintf(err, errlen, "%s:%d: '%s': its name is not on this line as libconfig read it (the file "
                 "changed?): cannot check the integer as written", file, line, path);
    else if (sc.found > 1)
        snprintf(err, errlen, "%s:%d: '%s' is set %d times on this line: cannot tell which integer is its "
                 "own; write one on a line of its own", file, line, path, sc.found);
    else if (sc.value.kind != T_OTHER || !lit_char(*sc.value.s))
        snprintf(err, errlen, "%s:%d: '%s': its value is not a bare integer: cannot check it as written",
                 file, line, path);
    else
        ret = 0;
    if (ret == 0)
        snprintf(lit, litlen, "%.*s", (int)sc.value.len, sc.value.s);
    free(buf);
    return ret;
}
