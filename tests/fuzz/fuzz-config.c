/* fuzz-config.c: the INI reader, the schema layer and the configuration checks on any
 * file: dsv4_config_load (reader.c's own pass, inih, every typed value) then
 * dsv4_config_check (the selected plugins' check hooks and the cross-family rules), and
 * every diagnostic formatted. The plugins come from $DSV4D_PLUGIN_PATH, as for dsv4d. */
#include "tests/fuzz/fuzz.h"

#include "core/config/config.h"

static dsv4_registry *reg;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    reg = dsv4_registry_new(NULL);
    if (!reg || dsv4_registry_scan(reg, NULL, NULL) != 0)
        dsv4_fuzz_fail("cannot scan plugins");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dsv4_diags diags;
    dsv4_diags_init(&diags);
    dsv4_config *conf = dsv4_config_load(dsv4_fuzz_file(data, size), reg, &diags);
    if (conf) {
        dsv4_config_check(conf, &diags);
        dsv4_config_free(conf);
    }
    char line[1024];
    for (size_t i = 0; i < diags.n; i++)
        dsv4_diag_format(&diags.v[i], line, sizeof(line));
    dsv4_diags_free(&diags);
    return 0;
}
