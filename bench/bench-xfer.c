/* bench-xfer.c: the KV handoff benchmarks' shared steps (bench-xfer.h). */
#include "config.h"

#include "bench/bench-xfer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench-util.h"
#include "core/config/schema.h"

static void bench_die(const char *what)
{
    fprintf(stderr, "%s: %s\n", program_invocation_short_name, what);
    exit(1);
}

void *bench_transport_new(const dsv4_plugin_desc *d, char *const *kv, uint32_t n_kv)
{
    void *conf = calloc(1, d->config_size ? d->config_size : 1), *st;
    char err[512];
    if (!conf || dsv4_schema_defaults(d->options, conf, err, sizeof(err)) != 0)
        bench_die("transport config");
    for (uint32_t k = 0; k < n_kv; k++) {
        char *eq = strchr(kv[k], '=');
        if (!eq)
            bench_die("a transport option wants KEY=VALUE");
        *eq = 0;
        const dsv4_option *opt = dsv4_schema_find(d->options, kv[k]);
        int rc = opt ? dsv4_schema_set(opt, conf, eq + 1, err, sizeof(err)) : -ENOENT;
        *eq = '=';
        if (rc != 0)
            bench_die(opt ? err : "no such transport key");
    }
    if (d->init(dsv4_host_default(), conf, &st, err, sizeof(err)) != 0)
        bench_die(err);
    return st;
}

int bench_send_exposed(const dsv4_transport_ops *ops, void *rx, const dsv4_kv_layout *layout,
                       int fd)
{
    static uint8_t blob[1 << 20];
    size_t len = sizeof(blob);
    uint64_t l64 = ops->expose(rx, layout, blob, &len) == 0 ? len : 0;
    return write(fd, &l64, 8) == 8 && write(fd, blob, l64) == (ssize_t)l64 ? 0 : -1;
}

size_t bench_read_exposed(int fd, uint8_t *blob, size_t cap)
{
    uint64_t len = 0;
    if (read(fd, &len, 8) != 8 || len == 0 || len > cap)
        bench_die("the receiver failed to expose its pool");
    for (size_t got = 0; got < len;) {
        ssize_t r = read(fd, blob + got, len - got);
        if (r <= 0)
            bench_die("the receiver's pool description was cut short");
        got += (size_t)r;
    }
    return len;
}

void bench_plan_pages(uint32_t n, uint32_t *sp, uint32_t *dp)
{
    for (uint32_t i = 0; i < n; i++) {
        sp[i] = 2 + i;
        dp[i] = i < n / 2 ? n + 3 + i : i - n / 2;
    }
}

uint64_t bench_request_bytes(const dsv4_kv_layout *l, uint32_t n)
{
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < l->n_buffers; i++)
        bytes += l->buffers[i].block_bytes * (dsv4_buf_is_paged(l->buffers[i].kind) ? n : 1);
    return bytes;
}

void bench_time_transfers(const dsv4_transport_ops *ops, void *tx, void *peer,
                          const dsv4_xfer_req *req, uint64_t *t, uint32_t reps)
{
    for (uint32_t r = 0; r <= reps; r++) {
        void *x;
        uint64_t t0 = bench_now_ns();
        if (ops->post(tx, peer, req, &x) != 0)
            bench_die("post failed");
        int rc;
        while ((rc = ops->poll(tx, x)) == -EAGAIN)
            ;
        t[r] = bench_now_ns() - t0;
        ops->release(tx, x);
        if (rc != 0)
            bench_die("transfer failed");
    }
}
