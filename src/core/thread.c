/* thread.c — named threads (see thread.h). */
#include "config.h"

#include "core/thread.h"

#include <stdarg.h>
#include <stdio.h>

int thread_start(pthread_t *thread, void *(*fn)(void *), void *arg,
                 const char *fmt, ...)
{
    int rc = pthread_create(thread, NULL, fn, arg);
    if (rc != 0)
        return rc;
    char name[THREAD_NAME_MAX + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    /* Named from here, the thread shows its process's name for its first
     * instants.  A name is for people: failing to set one changes nothing
     * else. */
    (void)pthread_setname_np(*thread, name);
    return 0;
}
