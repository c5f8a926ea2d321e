/* order.h: what the sched plugins share: sorting the waiting queue by a per-plugin
 * comparator with the ties every policy breaks the same way (arrival, then id, then
 * queue position), and the descriptor fields and hooks that do not differ.
 *
 * A policy is one comparator over two requests plus an optional per-request key the
 * plugin computes once before sorting (lpm's cached prefix length), so no comparator
 * calls back into the core while the sort runs. */
#ifndef DSV4_PLUGINS_SCHED_ORDER_H
#define DSV4_PLUGINS_SCHED_ORDER_H

#include <dsv4d/sched.h>

#include <stddef.h>
#include <stdint.h>

/* < 0 when a runs before b, > 0 when after, 0 when the policy has no preference. */
typedef int (*dsv4_sched_cmp_fn)(const dsv4_sched_req *a, uint64_t key_a, const dsv4_sched_req *b,
                                 uint64_t key_b);

/* Write into order_out the permutation of 0..n-1 that sorts reqs by cmp, ties by arrival,
 * then id, then position. keys may be NULL (all keys 0). 0, -EINVAL when n does not
 * fit the uint32_t order, or -ENOMEM. */
int dsv4_sched_sort(const dsv4_sched_req *reqs, const uint64_t *keys, size_t n,
                    dsv4_sched_cmp_fn cmp, uint32_t *order_out);

/* The comparator of fcfs (no preference: arrival order); lpm falls back to it. */
int dsv4_sched_cmp_arrival(const dsv4_sched_req *a, uint64_t key_a, const dsv4_sched_req *b,
                           uint64_t key_b);

/* Hooks every sched plugin uses unchanged: any host can run them, no combination is
 * refused, and the state is the daemon-owned config struct (it outlives the state). */
int dsv4_sched_probe(const dsv4_host *host, char *why, size_t whylen);
int dsv4_sched_check(const dsv4_selection *sel, const void *config, dsv4_report_fn report,
                     dsv4_diag *diag);
int dsv4_sched_init(const dsv4_host *host, const void *config, void **state_p, char *err,
                    size_t errlen);
void dsv4_sched_fini(void *state);

/* The descriptor fields that are the same for every sched plugin. */
#define DSV4_SCHED_DESC_HEADER                                                                     \
    .abi_major = DSV4_ABI_MAJOR, .abi_minor = DSV4_ABI_MINOR,                                      \
    .struct_size = sizeof(dsv4_plugin_desc), .build_signature = DSV4_BUILD_SIGNATURE,              \
    .family = DSV4_FAMILY_SCHED, .family_version = DSV4_SCHED_VERSION, .probe = dsv4_sched_probe,  \
    .check = dsv4_sched_check, .init = dsv4_sched_init, .fini = dsv4_sched_fini

/* The schema of a plugin without keys. */
extern const dsv4_option dsv4_sched_no_options[];

#endif
