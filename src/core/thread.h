/* thread.h — starting one of the daemon's own threads under a name, so that
 * `top -H`, `ps -L`, gdb, perf and /proc/PID/task/TID/comm tell the step
 * thread from a worker or the disk tier's writer.  Any thread. */
#ifndef GPT2D_THREAD_H
#define GPT2D_THREAD_H

#include <pthread.h>

/* The kernel keeps 15 bytes of a thread's name; longer ones are cut. */
#define THREAD_NAME_MAX 15

/* pthread_create(thread, NULL, fn, arg), then names the new thread after
 * printf's `fmt` (the daemon's names start "gpt2d-").  Returns
 * pthread_create's result: 0, or an errno value and no thread.  A thread
 * that cannot take its name runs all the same. */
int thread_start(pthread_t *thread, void *(*fn)(void *), void *arg,
                 const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif
