/* kvdir.h — the KV cache's directory (--kv-cache-dir) as one daemon's own:
 * who may use it, one daemon at a time, and files made in it that a link
 * planted there cannot redirect.
 *
 * The disk tier writes, renames and deletes in the directory, and serves
 * what it reads there (within its checksums), so the directory must be the
 * daemon's alone:
 *   - owned by its effective uid and writable by no group or other user:
 *     anyone else who can write there can plant files or symbolic links;
 *   - used by one daemon at a time: two would each overwrite the other's
 *     sessions file, fill the directory to twice --kv-disk together, and
 *     each start would delete the other's files as over its budget.  The
 *     lock is flock() on KVDIR_LOCK_NAME, which holds the holder's PID; the
 *     kernel releases it when the holder exits, however it exits.
 * Every file the tier makes is created new (O_EXCL, after removing what was
 * at the name) and no file there is opened through a symbolic link.  The
 * directory itself may be one (systemd's /var/cache/gpt2d, under
 * DynamicUser=, is a link to /var/cache/private/gpt2d): it is the
 * operator's setting.
 *
 * Threads: kvdir_claim and kvdir_release from the main thread, at start
 * and exit; kvdir_check, kvdir_create and kvdir_open_read from any. */
#ifndef GPT2D_KVDIR_H
#define GPT2D_KVDIR_H

#include "core/error.h"

/* The lock file's name in the directory: never a block's name, so the
 * disk tier's scan passes it by. */
#define KVDIR_LOCK_NAME "gpt2d.lock"

/* A claimed directory: the lock file, open and locked (-1: none). */
typedef struct kv_dir_lock {
    int fd;
} kv_dir_lock;

#define KV_DIR_LOCK_NONE ((kv_dir_lock){ .fd = -1 })

/* Makes the directory (mode 0700) when it is missing, then checks that it
 * is a directory this process may read and write, owned by its effective
 * uid and not writable by group or others. */
int kvdir_check(const char *dir, gpt2d_error *err);

/* kvdir_check, then takes the directory's lock for this process (held
 * until kvdir_release or exit) and writes the process's PID into the lock
 * file.  Fails when another process holds the lock, naming its PID. */
int kvdir_claim(kv_dir_lock *lock, const char *dir, gpt2d_error *err);
/* Empties the lock file and releases the lock; a lock of KV_DIR_LOCK_NONE
 * is left alone. */
void kvdir_release(kv_dir_lock *lock);

/* Creates `path` as a new file (mode 0600) open for writing: whatever is
 * at that name (a torn write's leftover, a planted link) is removed first,
 * and a link that appears there in between is not followed.  A descriptor
 * (close-on-exec), or -1 with errno. */
int kvdir_create(const char *path);
/* Opens `path` for reading, not through a symbolic link (ELOOP).  A
 * descriptor (close-on-exec), or -1 with errno. */
int kvdir_open_read(const char *path);

#endif
