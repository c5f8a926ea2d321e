/* plugin-harness.h: what the plugin unit tests share: open a built plugin .so the way the
 * daemon finds it ($DSV4D_PLUGIN_PATH), check its descriptor against the loader's rules,
 * a mock host table, and config structs filled by the real schema layer.
 *
 * Testing the installed artifact (not the sources linked into the test) catches a plugin
 * that builds but exports the wrong symbol or links something it should not. */
#ifndef DSV4_TESTS_PLUGIN_HARNESS_H
#define DSV4_TESTS_PLUGIN_HARNESS_H

#include <dsv4d/plugin.h>

/* Number of TAP tests plugtest_check_desc emits. */
#define PLUGTEST_DESC_TESTS 7

/* dlopen dsv4-<family>-<name>.so from the first $DSV4D_PLUGIN_PATH directory that has it;
 * bails out (TAP "Bail out!") when it cannot. */
const dsv4_plugin_desc *plugtest_open(const char *family, const char *name);
/* The loader's rules: ABI, struct size, build signature, family and its version, name,
 * ops struct_size (>= ops_size), one-line lowercase help on every option. */
void plugtest_check_desc(const dsv4_plugin_desc *desc, dsv4_family family, uint32_t family_version,
                         const char *name, size_t ops_size);
/* A host whose log goes to TAP diagnostics and counts warnings. */
const dsv4_host *plugtest_host(void);
int plugtest_warnings(void);
/* A config struct with the schema defaults, then "key", "value" pairs applied (NULL
 * ends them); bails out on an invalid value. Free with plugtest_config_free. */
void *plugtest_config(const dsv4_plugin_desc *desc, ...);
void plugtest_config_free(const dsv4_plugin_desc *desc, void *conf);
/* desc->init with the mock host; bails out on failure. */
void *plugtest_init(const dsv4_plugin_desc *desc, const void *conf);
/* Deterministic pseudo-random numbers (splitmix64), so failures reproduce. */
uint64_t plugtest_rand(void);
/* Uniform in [lo, hi). */
double plugtest_uniform(double lo, double hi);

#endif
