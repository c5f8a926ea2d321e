/* backend.h: resolving an engine's backend request (engine.h dsv4_backend) into the
 * backend it runs on, for engine.c. */
#ifndef DSV4_CORE_ENGINE_BACKEND_H
#define DSV4_CORE_ENGINE_BACKEND_H

#include "core/engine/engine.h"

/* CPU stays CPU. CUDA makes device conf->cuda_device current, or fails with -ENODEV and
 * the reason in err. AUTO gives CUDA (device made current) when the build has CUDA, the
 * device answers and every selected plugin's check takes device = cuda, else CPU; it
 * never fails. The choice is logged (info) unless the request was CPU. */
int dsv4_backend_pick(const dsv4_engine_conf *conf, dsv4_backend *backend_p, char *err,
                      size_t errlen);

#endif
