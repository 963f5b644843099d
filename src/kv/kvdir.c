/* kvdir.c — the KV cache's directory as one daemon's own (see kvdir.h):
 * its owner and mode checked, its lock, files made without following
 * links. */
#include "config.h"

#include "kv/kvdir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

int kvdir_check(const char *dir, gpt2d_error *err)
{
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return error_set(err, "--kv-cache-dir %s: cannot create it: %s", dir,
                         strerror(errno));
    struct stat st;
    if (stat(dir, &st) != 0)
        return error_set(err, "--kv-cache-dir %s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return error_set(err, "--kv-cache-dir %s is not a directory", dir);
    if (st.st_uid != geteuid())
        return error_set(err,
                         "--kv-cache-dir %s belongs to uid %lu, not to "
                         "this daemon's uid %lu: the disk tier needs a "
                         "directory of its own (chown it to the daemon's "
                         "user, then chmod 700 it)",
                         dir, (unsigned long)st.st_uid,
                         (unsigned long)geteuid());
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
        return error_set(err,
                         "--kv-cache-dir %s is writable by %s (mode "
                         "%03o): another user could plant files or links in "
                         "it; chmod 700 %s",
                         dir,
                         (st.st_mode & S_IWGRP) != 0 ? "its group" : "others",
                         (unsigned)(st.st_mode & 0777), dir);
    if (faccessat(AT_FDCWD, dir, R_OK | W_OK | X_OK, AT_EACCESS) != 0)
        return error_set(err, "--kv-cache-dir %s: %s", dir, strerror(errno));
    return 0;
}

/* The PID the lock file holds, or 0 when it holds none (its holder has
 * not written it yet, or something else is there). */
static long holder_pid(int fd)
{
    char text[32];
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    if (n <= 0)
        return 0;
    text[n] = '\0';
    size_t digits = strspn(text, "0123456789");
    if (digits == 0 || digits > 10 ||
        (text[digits] != '\n' && text[digits] != '\0'))
        return 0;
    return strtol(text, NULL, 10);
}

int kvdir_claim(kv_dir_lock *lock, const char *dir, gpt2d_error *err)
{
    *lock = KV_DIR_LOCK_NONE;
    if (kvdir_check(dir, err) != 0)
        return -1;
    char path[4096];
    int len = snprintf(path, sizeof path, "%s/%s", dir, KVDIR_LOCK_NAME);
    if (len < 0 || (size_t)len >= sizeof path)
        return error_set(err, "--kv-cache-dir %s: the path is too long", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return error_set(err,
                         "--kv-cache-dir %s: cannot open its lock file "
                         "%s: %s",
                         dir, path,
                         errno == ELOOP ? "it is a symbolic link"
                                        : strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        long pid = e == EWOULDBLOCK ? holder_pid(fd) : 0;
        close(fd);
        if (e != EWOULDBLOCK)
            return error_set(err, "--kv-cache-dir %s: cannot lock %s: %s", dir,
                             path, strerror(e));
        char who[48] = "its PID not yet written";
        if (pid > 0)
            snprintf(who, sizeof who, "PID %ld", pid);
        return error_set(err,
                         "--kv-cache-dir %s is in use by another gpt2d "
                         "(%s, in %s): one daemon per cache directory; stop "
                         "that one or give this one a directory of its own",
                         dir, who, path);
    }
    char line[32];
    int n = snprintf(line, sizeof line, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)n, 0) != n) {
        int e = errno;
        close(fd);
        return error_set(err,
                         "--kv-cache-dir %s: cannot write this "
                         "daemon's PID into %s: %s",
                         dir, path, strerror(e));
    }
    lock->fd = fd;
    return 0;
}

void kvdir_release(kv_dir_lock *lock)
{
    if (lock->fd < 0)
        return;
    /* Emptied while still held, so no PID of a process that is gone stays
     * behind; if that fails, the PID is only stale: the lock is what a
     * second daemon asks, and closing releases it. */
    int emptied = ftruncate(lock->fd, 0);
    (void)emptied;
    close(lock->fd);
    lock->fd = -1;
}

int kvdir_create(const char *path)
{
    if (unlink(path) != 0 && errno != ENOENT)
        return -1;
    return open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                0600);
}

int kvdir_open_read(const char *path)
{
    return open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
}
