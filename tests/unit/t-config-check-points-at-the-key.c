/* t-config-check-points-at-the-key: a plugin's check hook sees the whole selection and its
 * own parsed config, and each violation it reports comes out at the file:line of the key
 * (or section header) it names; dsv4_config_defaults selects indexk/fp8 and sched/fcfs and
 * fills the selection with the core defaults. Uses the real plugins on DSV4D_PLUGIN_PATH. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config/config.h"
#include "tests/tap.h"

static const dsv4_selection *seen_sel;
static const void *seen_config;

static int fake_check(const dsv4_selection *sel, const void *config, dsv4_report_fn report,
                      dsv4_diag *diag)
{
    seen_sel = sel;
    seen_config = config;
    report(diag, "sched.fcfs", NULL, "about the section (%d)", 1);
    report(diag, "core", "device", "about a key");
    report(diag, "pd", "secret", "about a key not in the file");
    return 3;
}

static void entry_is(const dsv4_diags *d, size_t i, const char *want, const char *what)
{
    char got[512] = "(missing)";
    if (i < d->n)
        dsv4_diag_format(&d->v[i], got, sizeof(got));
    is_str(got, want, "%s", what);
}

int main(void)
{
    if (!getenv("DSV4D_PLUGIN_PATH"))
        skip_all("DSV4D_PLUGIN_PATH is not set (run under make check)");
    dsv4_registry *reg = dsv4_registry_new(NULL);
    if (!reg || dsv4_registry_scan(reg, NULL, NULL) != 0)
        bail_out("cannot scan plugins");
    dsv4_diags diags;
    dsv4_diags_init(&diags);

    dsv4_config *def = dsv4_config_defaults(reg, &diags);
    ok(def != NULL, "defaults build a config");
    is_int(diags.n, 0, "defaults have no diagnostics");
    is_str(def->selection.names[DSV4_FAMILY_INDEXK], "fp8", "default indexk is fp8");
    is_str(def->selection.names[DSV4_FAMILY_SCHED], "fcfs", "default sched is fcfs");
    ok(def->selection.names[DSV4_FAMILY_TRANSPORT] == NULL, "no transport by default");
    ok(def->selection.names[DSV4_FAMILY_HOSTCACHE] == NULL, "no hostcache by default");
    ok(def->desc[DSV4_FAMILY_INDEXK] && def->plugin_conf[DSV4_FAMILY_INDEXK] &&
           def->selection.configs[DSV4_FAMILY_INDEXK] == def->plugin_conf[DSV4_FAMILY_INDEXK],
       "the selected plugin's parsed config is in the selection");
    ok(def->selection.struct_size == sizeof(dsv4_selection) &&
           def->selection.device == DSV4_DEVICE_AUTO && def->selection.role == DSV4_ROLE_UNIFIED &&
           def->selection.kv_dtype == DSV4_KV_BF16 && def->selection.cuda_device == -1,
       "the selection carries the core defaults");
    is_int(dsv4_config_check(def, &diags), 0, "defaults pass every check");
    dsv4_config_free(def);

    char path[] = "/tmp/t-config-check.XXXXXX";
    int fd = mkstemp(path);
    const char *text = "[core]\ndevice = cpu\n\n[sched]\nplugin = fcfs\n\n[sched.fcfs]\n";
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
        bail_out("cannot write %s", path);
    close(fd);
    dsv4_config *conf = dsv4_config_load(path, reg, &diags);
    ok(conf != NULL && diags.n == 0, "the file loads cleanly");
    if (!conf)
        bail_out("cannot go on without a config");

    /* Stand in for sched/fcfs with a check that reports three things. */
    dsv4_plugin_desc fake = *conf->desc[DSV4_FAMILY_SCHED];
    fake.check = fake_check;
    conf->desc[DSV4_FAMILY_SCHED] = &fake;
    is_int(dsv4_config_check(conf, &diags), 3, "the check's three reports are three errors");
    ok(seen_sel == &conf->selection, "the check sees the whole selection");
    ok(seen_sel && seen_sel->device == DSV4_DEVICE_CPU &&
           strcmp(seen_sel->names[DSV4_FAMILY_INDEXK], "fp8") == 0,
       "the selection says device cpu and the other families' plugins");
    ok(seen_config == conf->plugin_conf[DSV4_FAMILY_SCHED], "the check gets its own config");
    char want[256];
    snprintf(want, sizeof(want), "%s:7: [sched.fcfs] about the section (1)", path);
    entry_is(&diags, 0, want, "a section-wide report points at the header");
    snprintf(want, sizeof(want), "%s:2: [core] device: about a key", path);
    entry_is(&diags, 1, want, "a key report points at the key's line");
    snprintf(want, sizeof(want), "%s: [pd] secret: about a key not in the file", path);
    entry_is(&diags, 2, want, "a key that is not in the file has no line");

    unlink(path);
    dsv4_config_free(conf);
    dsv4_diags_free(&diags);
    dsv4_registry_free(reg);
    return done_testing();
}
