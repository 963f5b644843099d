/* file_store.h — the files of OpenAI's Files API (/v1/files), kept on the
 * daemon's own disk (--batch-dir/files): a batch's input, uploaded by a
 * client, and its output and error files, made by the batch runner.
 *
 * A file belongs to the caller that made it (api_caller.owner: the API
 * key, the same after a restart, or the client's address) and is seen by no other: another
 * account's file is "not found", exactly as a missing one.
 *
 * On disk each file is two: its bytes (`<id>`) and what the API shows of
 * it (`<id>.json`), each written under a temporary name, synced and
 * renamed, so a crash leaves a whole file or none; at open, bytes without
 * their description are a torn upload and are deleted.
 *
 * Threads: any; one mutex guards the table.  A file's bytes never change
 * once stored, so content is read without the lock. */
#ifndef GPT2D_FILE_STORE_H
#define GPT2D_FILE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/sha256.h"

/* Most files the store keeps (each account's and everyone's together): a
 * bound on the table, not on the bytes (--max-file-bytes bounds each). */
#define FILE_STORE_MAX_FILES 4096

typedef struct file_store file_store;

typedef struct stored_file {
    char id[32]; /* "file-" and 24 hex digits */
    uint8_t owner[SHA256_BYTES];
    size_t bytes;
    int64_t created_at; /* Unix seconds */
    uint64_t order;     /* creation order, for lists: later is larger */
    char filename[256];
    char purpose[16]; /* "batch", "batch_output" */
} stored_file;

/* Opens (making it, mode 0700) `dir` and reads its files.  0 or -1. */
int file_store_open(file_store **out, const char *dir, gpt2d_error *err);
void file_store_close(file_store *s);

/* Stores `len` bytes as a new file of `owner`.  0 with *out filled, or -1
 * (the store is full: FILE_STORE_MAX_FILES; the disk failed). */
int file_store_add(file_store *s, const uint8_t *owner, const char *purpose,
                   const char *filename, const char *data, size_t len,
                   stored_file *out, gpt2d_error *err);
/* Makes the finished file at `path` (on the store's file system) file `id`
 * of `owner` (an id from file_store_new_id, chosen beforehand so that a
 * caller that must survive a crash can write it down first), moving it
 * into the store.  0 with *out filled, or -1. */
int file_store_adopt(file_store *s, const uint8_t *owner, const char *id,
                     const char *purpose, const char *filename,
                     const char *path, stored_file *out, gpt2d_error *err);

/* Whether `owner` has file `id`; fills *out when it does. */
bool file_store_get(file_store *s, const uint8_t *owner, const char *id,
                    stored_file *out);
/* The file's bytes, open for reading (close it), or -1 when `owner` has no
 * such file or it cannot be opened. */
int file_store_open_content(file_store *s, const uint8_t *owner, const char *id,
                            size_t *bytes);
/* Deletes `owner`'s file `id`: 0, or -1 when it has none. */
int file_store_delete(file_store *s, const uint8_t *owner, const char *id);

/* `owner`'s files of `purpose` (NULL: any), newest first when `newest`
 * (else oldest first), starting after the file `after` (NULL: from the
 * start), into out[0..max).  Returns how many there are from that point
 * (may exceed max: the list has more). */
size_t file_store_list(file_store *s, const uint8_t *owner, const char *purpose,
                       bool newest, const char *after, stored_file *out,
                       size_t max);

/* A file in the store's directory with no name (created, then unlinked):
 * where an upload's bytes wait until they are parsed, on disk rather than
 * in memory, and gone with its descriptor however the process ends.  A
 * descriptor open for reading and writing, or -1 with errno. */
int file_store_spool(file_store *s);

/* A new random id: `prefix` and 24 hex digits, into out[cap]. */
void file_store_new_id(const char *prefix, char *out, size_t cap);

#endif
