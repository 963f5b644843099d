/* fd_io.h — whole reads and writes on a file descriptor (fd_io.c): the
 * loop over short transfers and EINTR that every file the daemon writes
 * whole (KV blocks, stored responses, batch answers, uploads) needs.
 *
 * Threads: any. */
#ifndef GPT2D_FD_IO_H
#define GPT2D_FD_IO_H

#include <stdbool.h>
#include <stddef.h>

/* Writes all `n` bytes of `p`; false on an error (errno says which) or a
 * write that takes nothing. */
bool fd_write_all(int fd, const void *p, size_t n);
/* Reads exactly `n` bytes into `p`; false on an error or end of file
 * first. */
bool fd_read_all(int fd, void *p, size_t n);

#endif
