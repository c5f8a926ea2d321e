/* t-transport-nccl-refuses-what-it-cannot-move: the built transport/nccl module, without a
 * GPU. Its descriptor passes the loader's rules and fills the two-sided ops; probe says why
 * it cannot run on a machine without a visible CUDA device (and accepts one that has it);
 * check refuses device = auto with the house message and leaves device = cpu to the core's
 * GPU rule and device = cuda alone; expose, attach and accept refuse a pool that is not in
 * device memory of one GPU, naming the reason, before any CUDA or NCCL call. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <dsv4d/transport.h>

#include "tests/plugin/plugin-harness.h"
#include "tests/tap.h"

struct dsv4_diag {
    int n;
    char text[1024];
};

static void report(dsv4_diag *d, const char *section, const char *key, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    snprintf(d->text, sizeof(d->text), "[%s] %s: %s", section, key ? key : "-", msg);
    d->n++;
}

static int check_with(const dsv4_plugin_desc *desc, const void *conf, dsv4_device device,
                      dsv4_diag *d)
{
    dsv4_selection sel = {
        .struct_size = sizeof(sel), .device = device, .role = DSV4_ROLE_DECODE, .cuda_device = 1};
    *d = (dsv4_diag){0};
    return desc->check(&sel, conf, report, d);
}

int main(void)
{
    plan(PLUGTEST_DESC_TESTS + 12);
    const dsv4_plugin_desc *desc = plugtest_open("transport", "nccl");
    plugtest_check_desc(desc, DSV4_FAMILY_TRANSPORT, DSV4_TRANSPORT_VERSION, "nccl",
                        sizeof(dsv4_transport_ops));
    const dsv4_transport_ops *ops = desc->ops;
    ok(DSV4_HAS_FIELD(ops, dsv4_transport_ops, recv_post) && ops->bootstrap && ops->accept &&
           ops->recv_post,
       "the two-sided ops are filled");
    ok((desc->flags & DSV4_PLUGIN_NEEDS_CUDA) && (desc->flags & DSV4_PLUGIN_NEEDS_GPU),
       "flagged needs-cuda and needs-gpu");

    char why[256] = "";
    int rc = desc->probe(plugtest_host(), why, sizeof(why));
    /* with a GPU visible it may run; without one it must say why */
    ok(rc == 0 || (rc == DSV4_EUNAVAIL && strstr(why, "no CUDA device visible")), "probe: %s",
       rc == 0 ? "a CUDA device is visible here" : why);

    void *conf = plugtest_config(desc, NULL);
    dsv4_diag d;
    is_int(check_with(desc, conf, DSV4_DEVICE_AUTO, &d), 1, "check: device = auto is refused");
    is_str(d.text,
           "[core] device: transport/nccl moves device memory only: set device = cuda (auto may "
           "fall back to the CPU pool)",
           "check: the message names the key and the fix");
    is_int(check_with(desc, conf, DSV4_DEVICE_CUDA, &d), 0, "check: device = cuda is fine");
    is_int(check_with(desc, conf, DSV4_DEVICE_CPU, &d), 0,
           "check: device = cpu is left to the core's rule for GPU plugins (one message)");

    /* a host pool: refused before anything touches CUDA */
    dsv4_kv_buffer b = {.kind = DSV4_BUF_CSA_KV,
                        .mem = DSV4_MEM_HOST,
                        .cuda_device = -1,
                        .base = (uint8_t *)&b,
                        .block_bytes = 8,
                        .n_blocks = 1};
    dsv4_kv_layout l = {.struct_size = sizeof(l),
                        .page_tokens = 256,
                        .n_pages = 1,
                        .n_state_slots = 1,
                        .n_buffers = 1,
                        .buffers = &b,
                        .shm_fd = -1};
    void *state = plugtest_init(desc, conf);
    uint8_t blob[512];
    size_t len = sizeof(blob);
    is_int(ops->expose(state, &l, blob, &len), -ENOTSUP, "expose: a host pool is refused");
    char err[512] = "";
    void *peer = NULL;
    is_int(ops->attach(state, &l, blob, 0, &peer, err, sizeof(err)), -ENOTSUP,
           "attach: a host pool is refused");
    has_str(err, "transport/nccl: the kv pool is not in device memory of one GPU",
            "attach: and says why");
    err[0] = '\0';
    is_int(ops->accept(state, &l, blob, 0, &peer, err, sizeof(err)), -ENOTSUP,
           "accept: a host pool is refused");
    ok(peer == NULL && strstr(err, "device = cuda is needed"),
       "accept: no peer is created, and the reason names the setting");
    desc->fini(state);
    plugtest_config_free(desc, conf);
    return done_testing();
}
