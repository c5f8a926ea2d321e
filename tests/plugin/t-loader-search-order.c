/* t-loader-search-order: the registry searches --plugin-dir, then $DSV4D_PLUGIN_PATH, then
 * [core] plugin_dir, each directory in byte order of file names; the first copy of a
 * family/name wins and later copies are listed as duplicates naming it; a directory named
 * twice is scanned once; find() returns loaded plugins and the failed entry otherwise. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "core/plugin/registry.h"
#include "tests/tap.h"

#define MAIN_DIR FIXTURE_DIR "/.libs"
#define DUP_DIR FIXTURE_DIR "/dup/.libs"

/* The fixture files of MAIN_DIR, in the order a scan must see them. */
static const char *const main_files[] = {
    "dsv4-indexk-wrongfam.so", "dsv4-sched-abimajor.so", "dsv4-sched-abiminor.so",
    "dsv4-sched-foreign.so",   "dsv4-sched-future.so",   "dsv4-sched-good.so",
    "dsv4-sched-misnamed.so",  "dsv4-sched-needdep.so",  "dsv4-sched-nofamily.so",
    "dsv4-sched-nosym.so",     "dsv4-sched-small.so",    "dsv4-sched-unavail.so",
};
#define NMAIN (sizeof(main_files) / sizeof(main_files[0]))

static dsv4_registry *scan(const char *cli, const char *env, const char *conf)
{
    dsv4_registry *reg = dsv4_registry_new(NULL);

    if (env)
        setenv("DSV4D_PLUGIN_PATH", env, 1);
    else
        unsetenv("DSV4D_PLUGIN_PATH");
    if (!reg)
        bail_out("out of memory");
    is_int(dsv4_registry_scan(reg, cli, conf), 0, "scan (cli %s, env %s, conf %s)", cli ? cli : "-",
           env ? env : "-", conf ? conf : "-");
    return reg;
}

/* The version of the sched/good that won, or "" when none loaded. */
static const char *good_version(const dsv4_registry *reg, const char **path_p)
{
    const dsv4_plugin_entry *e = NULL;
    const dsv4_plugin_desc *d = dsv4_registry_find(reg, DSV4_FAMILY_SCHED, "good", &e);

    *path_p = e ? e->path : "";
    return d ? d->version : "";
}

int main(void)
{
    const dsv4_plugin_entry *e;
    const char *path;
    dsv4_registry *reg;

    plan(38);

    /* --plugin-dir first, then the environment; each directory sorted. */
    reg = scan(MAIN_DIR, DUP_DIR, NULL);
    ok(dsv4_registry_count(reg) >= NMAIN + 1, "every fixture file is listed");
    for (size_t i = 0; i < NMAIN; i++) {
        e = dsv4_registry_entry(reg, i);
        const char *base = e ? strrchr(e->path, '/') + 1 : "";
        is_str(base, main_files[i], "entry %zu in byte order", i);
    }
    e = dsv4_registry_entry(reg, NMAIN);
    is_str(e ? e->path : "", DUP_DIR "/dsv4-sched-good.so", "the environment's directory next");
    is_int(e ? (int)e->stage : -1, DSV4_STAGE_DUPLICATE, "its sched/good is a duplicate");
    is_int(e ? e->status : 0, DSV4_EDUP, "with DSV4_EDUP");
    is_str(e ? e->reason : "",
           "plugin sched/good (dsv4-sched-good.so): duplicate (already loaded from " MAIN_DIR
           "/dsv4-sched-good.so)",
           "naming the copy that won");
    is_str(good_version(reg, &path), "1.0.0", "find returns the first copy");
    is_str(path, MAIN_DIR "/dsv4-sched-good.so", "and its entry");
    ok(dsv4_registry_find(reg, DSV4_FAMILY_SCHED, "unavail", &e) == NULL,
       "find: a failed plugin is not returned");
    is_int(e ? (int)e->stage : -1, DSV4_STAGE_PROBE, "find: its failed entry is");
    ok(dsv4_registry_find(reg, DSV4_FAMILY_SCHED, "nothere", &e) == NULL && e == NULL,
       "find: an unknown plugin gives no entry");
    ok(dsv4_registry_find(reg, DSV4_FAMILY_INDEXK, "good", &e) == NULL && e == NULL,
       "find: the family is part of the key");
    dsv4_registry_free(reg);

    /* Swapped: the --plugin-dir copy wins over the environment's. */
    reg = scan(DUP_DIR, MAIN_DIR, NULL);
    is_str(good_version(reg, &path), "1.0.0-second", "--plugin-dir is searched first");
    e = dsv4_registry_entry(reg, 0);
    is_str(e ? e->path : "", DUP_DIR "/dsv4-sched-good.so", "and listed first");
    dsv4_registry_find(reg, DSV4_FAMILY_SCHED, "abimajor", &e);
    is_str(e ? e->path : "", MAIN_DIR "/dsv4-sched-abimajor.so", "then the environment");
    dsv4_registry_free(reg);

    /* The environment before [core] plugin_dir; empty path elements are skipped. */
    reg = scan(NULL, "::" DUP_DIR ":", MAIN_DIR);
    is_str(good_version(reg, &path), "1.0.0-second", "DSV4D_PLUGIN_PATH before plugin_dir");
    e = dsv4_registry_entry(reg, 1);
    is_str(e ? e->path : "", MAIN_DIR "/dsv4-indexk-wrongfam.so", "plugin_dir is searched too");
    dsv4_registry_free(reg);

    /* [core] plugin_dir alone. */
    reg = scan(NULL, NULL, DUP_DIR);
    is_str(good_version(reg, &path), "1.0.0-second", "plugin_dir alone");
    dsv4_registry_free(reg);

    /* The same directory twice is one directory, not twelve duplicates. */
    reg = scan(MAIN_DIR, MAIN_DIR ":" FIXTURE_DIR "/.libs/", MAIN_DIR);
    size_t dups = 0;
    for (size_t i = 0; i < dsv4_registry_count(reg); i++)
        dups += dsv4_registry_entry(reg, i)->stage == DSV4_STAGE_DUPLICATE;
    is_int(dups, 0, "a directory named three times is scanned once");
    is_str(good_version(reg, &path), "1.0.0", "and its plugins load");
    dsv4_registry_free(reg);

    /* Directories that do not exist hold no plugins; that is not an error. */
    reg = scan("/nonexistent/dsv4", "/nonexistent/a:/nonexistent/b", "/nonexistent/c");
    e = dsv4_registry_entry(reg, 0);
    ok(e == NULL || strncmp(e->path, "/nonexistent", 12) != 0,
       "nothing is listed from missing directories");
    dsv4_registry_free(reg);

    return done_testing();
}
