/* secret: password files read strictly, errors without the content, the
 * systemd credential rule, and the password_file settings that use them. */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "secret.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/sktest-secret-XXXXXX");
    assert_non_null(mkdtemp(dir));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    unsetenv("CREDENTIALS_DIRECTORY");
    return 0;
}

/* name under dir, with content (len bytes) and mode; path receives it. */
static void put(const char *name, const char *content, size_t len, mode_t mode, char *path, size_t plen)
{
    snprintf(path, plen, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(content, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(path, mode), 0);
}

static void expect_refused(const char *path, const char *want, const char *content)
{
    struct secret *s = NULL;
    char err[512] = "";
    assert_int_equal(secret_read(path, &s, err, sizeof(err)), -1);
    assert_null(s);
    if (!strstr(err, want))
        fail_msg("error '%s' does not contain '%s'", err, want);
    assert_non_null(strstr(err, path));
    if (content && *content)
        assert_null(strstr(err, content));
}

static void test_trailing_newline_stripped(void **state)
{
    (void)state;
    char p[256], err[512];
    struct secret *s = NULL;
    put("nl", "Hunter2-pw\n", 11, 0600, p, sizeof(p));
    assert_int_equal(secret_read(p, &s, err, sizeof(err)), 0);
    assert_string_equal(secret_str(s), "Hunter2-pw");
    assert_int_equal(secret_len(s), 10);
    /* a private copy, and new content put in under the lock */
    struct secret *d = secret_dup(s), *t = NULL;
    assert_string_equal(secret_str(d), "Hunter2-pw");
    put("crlf", "other\r\n", 7, 0400, p, sizeof(p));
    assert_int_equal(secret_read(p, &t, err, sizeof(err)), 0);
    assert_string_equal(secret_str(t), "other");
    secret_replace(s, t);
    assert_string_equal(secret_str(s), "other");
    assert_string_equal(secret_str(d), "Hunter2-pw");
    /* only one newline is the editor's: inner ones and spaces are kept */
    secret_free(t);
    put("two", "a b\n\n", 5, 0600, p, sizeof(p));
    assert_int_equal(secret_read(p, &t, err, sizeof(err)), 0);
    assert_string_equal(secret_str(t), "a b\n");
    secret_free(t);
    secret_free(d);
    secret_free(s);
    secret_free(NULL);
}

static void test_mode_0644_refused(void **state)
{
    (void)state;
    char p[256];
    put("open", "Sesame-0644\n", 12, 0644, p, sizeof(p));
    expect_refused(p, "mode 0644", "Sesame-0644");
    put("group", "Sesame-0640\n", 12, 0640, p, sizeof(p));
    expect_refused(p, "must be 0600", "Sesame-0640");
}

static void test_empty_refused(void **state)
{
    (void)state;
    char p[256];
    put("empty", "", 0, 0600, p, sizeof(p));
    expect_refused(p, "empty", NULL);
    put("newline", "\n", 1, 0600, p, sizeof(p));
    expect_refused(p, "empty", NULL);
}

static void test_large_and_odd_refused(void **state)
{
    (void)state;
    char p[256], big[SECRET_MAX + 8];
    memset(big, 'x', sizeof(big));
    put("big", big, sizeof(big), 0600, p, sizeof(p));
    expect_refused(p, "larger than", NULL);
    /* the longest secret with its newline still fits */
    struct secret *s = NULL;
    char err[512];
    big[SECRET_MAX] = '\n';
    put("max", big, SECRET_MAX + 1, 0600, p, sizeof(p));
    assert_int_equal(secret_read(p, &s, err, sizeof(err)), 0);
    assert_int_equal(secret_len(s), SECRET_MAX);
    secret_free(s);
    put("nul", "ab\0cd", 5, 0600, p, sizeof(p));
    expect_refused(p, "NUL", NULL);
    expect_refused(dir, "not a regular file", NULL);
}

static void test_missing_names_path_not_content(void **state)
{
    (void)state;
    char p[256];
    snprintf(p, sizeof(p), "%s/no-such-file", dir);
    expect_refused(p, "No such file", NULL);
}

static void test_credentials_directory(void **state)
{
    (void)state;
    unsetenv("CREDENTIALS_DIRECTORY");
    assert_null(secret_credential_path("pg-consumer"));
    setenv("CREDENTIALS_DIRECTORY", "/run/credentials/seckill-consumer@1.service", 1);
    char *p = secret_credential_path("pg-consumer");
    assert_string_equal(p, "/run/credentials/seckill-consumer@1.service/pg-consumer");
    free(p);
    /* a path (absolute or relative) is never a credential name */
    assert_null(secret_credential_path("/etc/seckill/pg-consumer"));
    assert_null(secret_credential_path("secrets/pg-consumer"));
    assert_null(secret_credential_path(""));
    unsetenv("CREDENTIALS_DIRECTORY");
}

/* The settings: a bare name is the credential under systemd and a file
 * beside the configuration otherwise; errors name the setting, the
 * configuration's file:line and the password file, never the password. */
static void test_password_file_settings(void **state)
{
    (void)state;
    char cfgp[256], p[256], text[512], err[1024];
    struct cfg c;
    memset(&c, 0, sizeof(c));
    snprintf(cfgp, sizeof(cfgp), "%s/seckill.cfg", dir);
    snprintf(text, sizeof(text),
             "kafka = { brokers = \"b\"; };\n"
             "postgres = { dbname = \"d\";\n"
             "  consumer_password_file = \"pg-consumer\";\n"
             "  producer_password_file = \"pg-producer\"; };\n");
    FILE *f = fopen(cfgp, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    cfg_role_set(CFG_ROLE_CONSUMER, 0);

    /* beside the file */
    put("pg-consumer", "beside-pw\n", 10, 0600, p, sizeof(p));
    assert_int_equal(cfg_load(cfgp, &c, err, sizeof(err)), 0);
    assert_string_equal(c.postgres.password_file[CFG_ROLE_CONSUMER], p);
    assert_string_equal(secret_str(c.postgres.password[CFG_ROLE_CONSUMER]), "beside-pw");
    /* another role's file is not read (pg-producer does not exist) */
    assert_null(c.postgres.password[CFG_ROLE_PRODUCER]);
    assert_non_null(c.postgres.password[CFG_ROLE_CONSUMER]);
    cfg_free(&c);

    /* the systemd credential */
    char cred[256];
    snprintf(cred, sizeof(cred), "%s/cred", dir);
    assert_int_equal(mkdir(cred, 0700), 0);
    setenv("CREDENTIALS_DIRECTORY", cred, 1);
    put("cred/pg-consumer", "credential-pw", 13, 0400, p, sizeof(p));
    assert_int_equal(cfg_load(cfgp, &c, err, sizeof(err)), 0);
    assert_string_equal(c.postgres.password_file[CFG_ROLE_CONSUMER], p);
    assert_string_equal(secret_str(c.postgres.password[CFG_ROLE_CONSUMER]), "credential-pw");
    cfg_free(&c);

    /* a readable one: refused, with setting, file:line and path */
    assert_int_equal(chmod(p, 0644), 0);
    assert_int_equal(cfg_load(cfgp, &c, err, sizeof(err)), -1);
    if (!strstr(err, ":3: 'postgres.consumer_password_file': ") || !strstr(err, p) || !strstr(err, "0644"))
        fail_msg("unexpected error: %s", err);
    assert_null(strstr(err, "credential-pw"));
    unsetenv("CREDENTIALS_DIRECTORY");

    /* the producer's file is read only by the producer */
    cfg_role_set(CFG_ROLE_PRODUCER, 0);
    assert_int_equal(cfg_load(cfgp, &c, err, sizeof(err)), -1);
    assert_non_null(strstr(err, ":4: 'postgres.producer_password_file': "));
    assert_non_null(strstr(err, "pg-producer: cannot read: No such file"));
    cfg_role_set(CFG_ROLE_ADMIN, 0);
    /* admin sets no file: no password, libpq's defaults */
    assert_int_equal(cfg_load(cfgp, &c, err, sizeof(err)), 0);
    assert_string_equal(c.postgres.password_file[CFG_ROLE_ADMIN], "");
    assert_string_equal(secret_str(c.postgres.password[CFG_ROLE_ADMIN]), "");
    cfg_free(&c);
}

/* A reload copies the new password into the running configuration's
 * secret: a pointer another thread holds stays valid. */
static void test_reload_replaces_password(void **state)
{
    (void)state;
    char cfgp[256], p[256], err[1024];
    struct cfg cur, next;
    snprintf(cfgp, sizeof(cfgp), "%s/r.cfg", dir);
    FILE *f = fopen(cfgp, "w");
    assert_non_null(f);
    fputs("kafka = { brokers = \"b\"; };\npostgres = { dbname = \"d\"; consumer_password_file = \"pw\"; };\n", f);
    fclose(f);
    cfg_role_set(CFG_ROLE_CONSUMER, 0);
    put("pw", "old-pw\n", 7, 0600, p, sizeof(p));
    assert_int_equal(cfg_load(cfgp, &cur, err, sizeof(err)), 0);
    struct secret *held = cur.postgres.password[CFG_ROLE_CONSUMER];
    put("pw", "new-pw\n", 7, 0600, p, sizeof(p));
    assert_int_equal(cfg_load(cfgp, &next, err, sizeof(err)), 0);
    assert_int_equal(cfg_reload_check(&cur, &next, err, sizeof(err)), 0);
    cfg_apply_reload(&cur, &next);
    cfg_free(&next);
    assert_ptr_equal(cur.postgres.password[CFG_ROLE_CONSUMER], held);
    struct secret *d = secret_dup(held);
    assert_string_equal(secret_str(d), "new-pw");
    secret_free(d);
    /* a broken file fails the load: the daemon keeps what it runs with */
    put("pw", "", 0, 0600, p, sizeof(p));
    assert_int_equal(cfg_load(cfgp, &next, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "empty"));
    cfg_free(&cur);
    cfg_role_set(CFG_ROLE_ADMIN, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_trailing_newline_stripped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mode_0644_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_large_and_odd_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_names_path_not_content, setup, teardown),
        cmocka_unit_test_setup_teardown(test_credentials_directory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_password_file_settings, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reload_replaces_password, setup, teardown),
    };
    harness_filter();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
