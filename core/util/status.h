/* status.h: status codes to text (the codes themselves are in dsv4d/plugin.h). */
#ifndef DSV4_CORE_STATUS_H
#define DSV4_CORE_STATUS_H

#include <dsv4d/plugin.h>

/* Text for 0, a negative DSV4_E* code or a negative errno. Never NULL. */
const char *dsv4_strerror(int status);

#endif
