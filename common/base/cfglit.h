/* cfglit: the text of a setting's value as a libconfig file writes it.
 *
 * libconfig 1.5 (Debian's) keeps an integer literal without the L suffix
 * in 32 bits and wraps what does not fit, so cfg.c checks an integer's
 * literal, not libconfig's value. This finds that literal where libconfig
 * parsed the setting: libconfig tells the file and the line of the
 * setting's name (config_setting_source_file, _source_line); the file is
 * read again and scanned with libconfig's lexical rules (strings, comments
 * #, // and slash-star, line ends anywhere between tokens), and the value is
 * the token after the '=' or ':' that follows that name on that line. Names
 * in strings and comments are none, and the groups the file opens tell
 * redis = { port = 1; } from producer = { port = 2; } on one line (within
 * a file included into a group, the path inside that file). What it cannot
 * place for certain (the name not found there, or found twice) is refused,
 * never guessed.
 *
 * Plain functions: any thread. */
#ifndef SECKILL_CFGLIT_H
#define SECKILL_CFGLIT_H

#include <stddef.h>

/* The value's text of the setting path ("redis.port") whose name libconfig
 * parsed at line of file, into lit (NUL-terminated; a longer text is cut to
 * litlen - 1). 0, or -1 with err ("FILE:LINE: 'PATH' ...": the file cannot
 * be read again, the name is not found there or found twice, or what
 * follows it is no bare literal). */
int cfglit_find(const char *file, int line, const char *path, char *lit, size_t litlen, char *err,
                size_t errlen);

#endif
