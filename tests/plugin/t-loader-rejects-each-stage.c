/* t-loader-rejects-each-stage: every loader stage rejects its fixture plugin with its own
 * status and message (core/plugin/registry.h), and the valid fixture loads. */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/plugin/registry.h"
#include "tests/tap.h"

#define LIBS FIXTURE_DIR "/.libs"

struct expect {
    const char *file;
    dsv4_load_stage stage;
    int status;
    const char *reason;
};

static const struct expect cases[] = {
    {"dsv4-sched-abimajor.so", DSV4_STAGE_ABI, DSV4_EABI,
     "plugin sched/abimajor (dsv4-sched-abimajor.so): ABI 2.1 not supported (daemon 1.x)"},
    {"dsv4-sched-abiminor.so", DSV4_STAGE_ABI, DSV4_EABI,
     "plugin sched/abiminor (dsv4-sched-abiminor.so): ABI 1.1 not supported (daemon 1.0)"},
    {"dsv4-sched-foreign.so", DSV4_STAGE_SIGNATURE, DSV4_ESIG,
     "plugin sched/foreign (dsv4-sched-foreign.so): build signature mismatch (plugin "
     "dsv4-abi1/ptr2/sz2/le, daemon " DSV4_BUILD_SIGNATURE ")"},
    {"dsv4-sched-nofamily.so", DSV4_STAGE_FAMILY, DSV4_EFAMILY,
     "plugin sched/nofamily (dsv4-sched-nofamily.so): unknown family 9"},
    {"dsv4-sched-future.so", DSV4_STAGE_FAMILY, DSV4_EFAMILY,
     "plugin sched/future (dsv4-sched-future.so): sched interface 2 not supported (daemon 1)"},
    {"dsv4-sched-nosym.so", DSV4_STAGE_SYMBOL, DSV4_EFORMAT,
     "plugin sched/nosym (dsv4-sched-nosym.so): no dsv4_plugin symbol (not a dsv4d plugin)"},
    {"dsv4-sched-misnamed.so", DSV4_STAGE_NAME, DSV4_ENAME,
     "plugin sched/misnamed (dsv4-sched-misnamed.so): descriptor is sched/othername (file "
     "name must be dsv4-sched-othername.so)"},
    {"dsv4-indexk-wrongfam.so", DSV4_STAGE_NAME, DSV4_ENAME,
     "plugin indexk/wrongfam (dsv4-indexk-wrongfam.so): descriptor is sched/wrongfam (file "
     "name must be dsv4-sched-wrongfam.so)"},
    {"dsv4-sched-unavail.so", DSV4_STAGE_PROBE, DSV4_EUNAVAIL,
     "plugin sched/unavail (dsv4-sched-unavail.so): not available here (needs a device this "
     "fixture never finds)"},
    {"dsv4-sched-needdep.so", DSV4_STAGE_DLOPEN, DSV4_EFORMAT,
     "plugin sched/needdep (dsv4-sched-needdep.so): cannot load (libdsv4fixdep.so: cannot "
     "open shared object file: No such file or directory)"},
};
#define NCASES (sizeof(cases) / sizeof(cases[0]))

/* Load path into reg and check where it stopped and what it said. */
static void expect_load(dsv4_registry *reg, const char *path, dsv4_load_stage stage, int status,
                        const char *reason, bool reason_is_prefix)
{
    const dsv4_plugin_entry *e = NULL;
    int rc = dsv4_registry_load_file(reg, path, &e);

    is_int(rc, status, "%s: load returns %s", path, status ? "its stage's status" : "0");
    if (!e) {
        skip(3, "no entry for %s", path);
        return;
    }
    is_int(e->stage, stage, "%s: stops at stage %d", path, stage);
    ok(e->desc == NULL || stage == DSV4_STAGE_OK, "%s: descriptor only when loaded", path);
    if (reason_is_prefix)
        has_str(e->reason, reason, "%s: message", path);
    else
        is_str(e->reason, reason, "%s: message", path);
}

int main(void)
{
    char tmpl[] = "/tmp/dsv4-t-loader.XXXXXX";
    char path[4096], want[8192];
    dsv4_registry *reg = dsv4_registry_new(NULL);
    FILE *f;

    plan((int)(NCASES + 7) * 4 + 3);
    if (!reg || !mkdtemp(tmpl))
        bail_out("setup failed (%s)", strerror(errno));

    for (size_t i = 0; i < NCASES; i++) {
        snprintf(path, sizeof(path), "%s/%s", LIBS, cases[i].file);
        expect_load(reg, path, cases[i].stage, cases[i].status, cases[i].reason, false);
    }

    /* The size stage; ABI 1.0's descriptor size depends on the pointer width. */
    snprintf(want, sizeof(want),
             "plugin sched/small (dsv4-sched-small.so): descriptor too small (16 bytes, ABI "
             "1.0 has %zu)",
             offsetof(dsv4_plugin_desc, ops) + sizeof(void *));
    expect_load(reg, LIBS "/dsv4-sched-small.so", DSV4_STAGE_SIZE, DSV4_EABI, want, false);

    /* The file stage: missing, not a regular file. */
    snprintf(path, sizeof(path), "%s/dsv4-sched-missing.so", tmpl);
    expect_load(reg, path, DSV4_STAGE_FILE, -ENOENT,
                "plugin sched/missing (dsv4-sched-missing.so): cannot read (No such file or "
                "directory)",
                false);
    snprintf(path, sizeof(path), "%s/dsv4-sched-dir.so", tmpl);
    if (mkdir(path, 0700) != 0)
        bail_out("mkdir %s (%s)", path, strerror(errno));
    expect_load(reg, path, DSV4_STAGE_FILE, -EINVAL,
                "plugin sched/dir (dsv4-sched-dir.so): not a regular file", false);

    /* Unreadable: root reads every file, so this case needs another user. */
    snprintf(path, sizeof(path), "%s/dsv4-sched-secret.so", tmpl);
    f = fopen(path, "w");
    if (!f || fclose(f) != 0 || chmod(path, 0) != 0)
        bail_out("create %s failed", path);
    if (geteuid() == 0)
        skip(4, "running as root, who can read a mode 000 file");
    else
        expect_load(reg, path, DSV4_STAGE_FILE, -EACCES,
                    "plugin sched/secret (dsv4-sched-secret.so): cannot read (Permission denied)",
                    false);
    unlink(path);

    /* dlopen of something that is not ELF: dlerror's text, which names the file. */
    snprintf(path, sizeof(path), "%s/dsv4-sched-text.so", tmpl);
    f = fopen(path, "w");
    if (!f || fputs("not an ELF object\n", f) < 0 || fclose(f) != 0)
        bail_out("write %s failed", path);
    snprintf(want, sizeof(want), "plugin sched/text (dsv4-sched-text.so): cannot load (%s: ", path);
    expect_load(reg, path, DSV4_STAGE_DLOPEN, DSV4_EFORMAT, want, true);

    /* A file not named dsv4-<family>-<name>.so is still checked, under its file name. */
    snprintf(path, sizeof(path), "%s/not-a-plugin-name.so", tmpl);
    if (symlink(LIBS "/dsv4-sched-good.so", path) != 0)
        bail_out("symlink %s (%s)", path, strerror(errno));
    expect_load(reg, path, DSV4_STAGE_NAME, DSV4_ENAME,
                "plugin not-a-plugin-name.so: descriptor is sched/good (file name must be "
                "dsv4-sched-good.so)",
                false);

    /* The valid fixture loads; the same file loaded again is a duplicate of the first. */
    const dsv4_plugin_entry *e = NULL;
    expect_load(reg, LIBS "/dsv4-sched-good.so", DSV4_STAGE_OK, 0, "", false);
    dsv4_registry_load_file(reg, LIBS "/dsv4-sched-good.so", &e);
    is_int(e ? (int)e->stage : -1, DSV4_STAGE_DUPLICATE, "a second copy is a duplicate");
    is_str(e ? e->detail : "", "duplicate (already loaded from " LIBS "/dsv4-sched-good.so)",
           "the duplicate names the first copy's path");
    is_int(dsv4_registry_count(reg), NCASES + 7 + (geteuid() != 0),
           "every file stays listed, loaded or not");

    dsv4_registry_free(reg);
    unlink(path);
    snprintf(path, sizeof(path), "%s/dsv4-sched-text.so", tmpl);
    unlink(path);
    snprintf(path, sizeof(path), "%s/dsv4-sched-dir.so", tmpl);
    rmdir(path);
    rmdir(tmpl);
    return done_testing();
}
