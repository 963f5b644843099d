/* log.c — one-line log records on stderr (see log.h).
 *
 * Line format:  <P>2024-05-01T12:00:00.123Z info: message
 *   <P>        syslog priority, parsed by journald (SyslogLevelPrefix=yes)
 *   timestamp  ISO-8601 UTC with milliseconds; left out when stderr is the
 *              systemd journal (journald stamps every record itself), i.e.
 *              when $JOURNAL_STREAM names the device:inode of our fd 2, as
 *              systemd.exec(5) documents.  Kept everywhere else: terminals,
 *              files, pipes, test logs.
 *   level      a word, so a plain `grep error:` works without journald.
 *
 * Each record is formatted into one buffer and written with a single
 * write(2), so lines from different threads never interleave (stderr is
 * unbuffered and O_APPEND-style writes of < PIPE_BUF bytes are atomic).
 * Control characters in the message (a newline in a logged prompt, say)
 * become spaces: one record is always exactly one line. */
#include "core/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Records longer than this are cut (and marked): PIPE_BUF on Linux, the
 * largest write a pipe keeps atomic. */
enum { LOG_LINE_MAX = 4096 };

static atomic_int current_level = LOG_LEVEL_INFO;
static pthread_once_t journal_once = PTHREAD_ONCE_INIT;
static bool stderr_is_journal;

void log_set_level(int level)
{
    if (level < LOG_LEVEL_ERROR)
        level = LOG_LEVEL_ERROR;
    if (level > LOG_LEVEL_DEBUG)
        level = LOG_LEVEL_DEBUG;
    atomic_store_explicit(&current_level, level, memory_order_relaxed);
}

static void detect_journal(void)
{
    const char *js = getenv("JOURNAL_STREAM");
    unsigned long long dev = 0, ino = 0;
    struct stat st;
    if (js == NULL || sscanf(js, "%llu:%llu", &dev, &ino) != 2 ||
        fstat(STDERR_FILENO, &st) != 0)
        return;
    stderr_is_journal = (unsigned long long)st.st_dev == dev &&
                        (unsigned long long)st.st_ino == ino;
}

static const char *level_word(int level)
{
    switch (level) {
    case LOG_LEVEL_ERROR:
        return "error";
    case LOG_LEVEL_WARN:
        return "warn";
    case LOG_LEVEL_INFO:
        return "info";
    default:
        return "debug";
    }
}

/* Appends the timestamp at buf; returns its length (0 if the clock fails). */
static size_t format_timestamp(char *buf, size_t size)
{
    struct timespec ts;
    struct tm tm;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0 ||
        gmtime_r(&ts.tv_sec, &tm) == NULL)
        return 0;
    size_t n = strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
    if (n == 0)
        return 0;
    int m = snprintf(buf + n, size - n, ".%03ldZ ", ts.tv_nsec / 1000000L);
    return (m > 0 && (size_t)m < size - n) ? n + (size_t)m : 0;
}

static void write_all(const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t w = write(STDERR_FILENO, buf, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* nowhere left to report a logging failure */
        buf += w;
        len -= (size_t)w;
    }
}

void log_msg(int level, const char *fmt, ...)
{
    if (level > atomic_load_explicit(&current_level, memory_order_relaxed))
        return;
    pthread_once(&journal_once, detect_journal);

    char line[LOG_LINE_MAX];
    int head = snprintf(line, sizeof line, "<%d>", level);
    size_t len = head > 0 ? (size_t)head : 0;
    if (!stderr_is_journal)
        len += format_timestamp(line + len, sizeof line - len);
    len += (size_t)snprintf(line + len, sizeof line - len,
                            "%s: ", level_word(level));

    size_t body = len;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line + len, sizeof line - len - 1, fmt,
                      ap); /* -1: room for \n */
    va_end(ap);
    if (n < 0)
        n = 0;
    len += (size_t)n;
    if (len > sizeof line - 2) { /* cut: mark it so nobody trusts the tail */
        len = sizeof line - 2;
        memcpy(line + len - 3, "...", 3);
    }
    for (size_t i = body; i < len; i++)
        if ((unsigned char)line[i] < 0x20 || line[i] == 0x7f)
            line[i] = ' ';
    line[len++] = '\n';
    write_all(line, len);
}
