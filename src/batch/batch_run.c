/* batch_run.c — the batches under --batch-dir and the workers that answer
 * their lines (batch_run.h).
 *
 * A batch's life, each step saved in its record before the next:
 *   validating   a worker reads its input file: the lines to answer
 *                (blank lines are not requests), or failed;
 *   in_progress  workers take its lines in order, round robin over the
 *                batches; each answer is appended whole to <id>.out or
 *                <id>.err, and the line marked answered;
 *   finalizing   every line answered: the two files become the batch's
 *                output and error files (ids chosen and saved first, so a
 *                crash here is finished by the next start);
 *   completed    or cancelled (cancel: lines in flight give up, the rest
 *                are never taken, the answers so far are its files), or
 *                expired (its window passed: every unanswered line gets
 *                an error line, code batch_expired).
 * At start, a batch left unfinished is resumed: its answered lines are
 * read back from its two files (a line cut short by a crash is dropped,
 * and its request runs again). */
#include "config.h"

#include "batch/batch_run.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "batch/batch_line.h"
#include "batch/batch_record.h"
#include "core/log.h"
#include "core/sha256.h"
#include "core/metrics.h"

typedef struct batch_job {
    batch_record rec;
    FILE *input;      /* open while lines remain to be taken */
    size_t next_line; /* the next line's index (blank lines not counted) */
    bool input_done;  /* every line taken */
    uint8_t *done;    /* a bit per line: answered */
    size_t in_flight; /* lines being answered */
    int out_fd, err_fd;
    bool busy;          /* a worker validates it */
    size_t metrics_key; /* its key's series in /metrics (rec.key_name) */
    atomic_bool stop;   /* its lines in flight give up (cancel, expiry) */
} batch_job;

struct batch_service {
    char dir[4096];
    const api_ctx *api;
    file_store *files;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    batch_job *jobs[BATCH_MAX_KEPT]; /* in creation order */
    size_t n_jobs;
    size_t turn; /* round robin over the jobs */
    pthread_t *workers;
    size_t n_workers;
    int64_t window; /* a new batch's seconds to expiry */
    atomic_bool stopping;
};

/* ---- paths and records ---- */

static void job_path(const batch_service *s, const batch_job *j,
                     const char *suffix, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s%s", s->dir, j->rec.id, suffix);
}

static void save(const batch_service *s, const batch_job *j)
{
    gpt2d_error err;
    if (batch_record_save(&j->rec, s->dir, &err) != 0)
        log_error("batch %s: %s", j->rec.id, err.message);
}

static bool is_done(const batch_job *j, size_t line)
{
    return line < j->rec.total && (j->done[line / 8] >> (line % 8) & 1);
}

static void mark_done(batch_job *j, size_t line)
{
    if (line < j->rec.total)
        j->done[line / 8] |= (uint8_t)(1u << (line % 8));
}

static void job_free(batch_job *j)
{
    if (j == NULL)
        return;
    if (j->input != NULL)
        fclose(j->input);
    if (j->out_fd >= 0)
        close(j->out_fd);
    if (j->err_fd >= 0)
        close(j->err_fd);
    free(j->done);
    batch_record_clear(&j->rec);
    free(j);
}

static batch_job *job_new(void)
{
    batch_job *j = calloc(1, sizeof *j);
    if (j != NULL) {
        j->out_fd = j->err_fd = -1;
        atomic_init(&j->stop, false);
    }
    return j;
}

/* Whether `text` holds only white space (a blank line: not a request). */
static bool blank(const char *text, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (text[i] != ' ' && text[i] != '\t' && text[i] != '\r' &&
            text[i] != '\n')
            return false;
    return true;
}

/* ---- finishing a batch ---- */

/* Every unanswered line of an expired batch gets its error line. */
static void expire_lines(batch_job *j)
{
    FILE *in = j->input;
    if (in != NULL)
        rewind(in);
    char *text = NULL;
    size_t cap = 0, line = 0;
    ssize_t len;
    while (in != NULL && (len = getline(&text, &cap, in)) >= 0) {
        if (blank(text, (size_t)len))
            continue;
        if (!is_done(j, line)) {
            json_t *req = json_loadb(text, (size_t)len, 0, NULL);
            char *out = batch_line_error(&j->rec, line,
                                         json_object_get(req, "custom_id"),
                                         "batch_expired",
                                         "the batch's completion window passed "
                                         "before this request ran");
            json_decref(req);
            if (out != NULL && batch_line_append(j->err_fd, out) == 0) {
                mark_done(j, line);
                j->rec.failed++;
            }
            free(out);
        }
        line++;
    }
    free(text);
}

/* Moves <id><suffix> into the file store as file `file_id` (or deletes
 * it when no line went there). */
static void adopt(batch_service *s, batch_job *j, const char *suffix,
                  const char *file_id, const char *what)
{
    char path[4400], name[128];
    job_path(s, j, suffix, path, sizeof path);
    if (file_id[0] == '\0') {
        unlink(path);
        return;
    }
    snprintf(name, sizeof name, "%s_%s.jsonl", j->rec.id, what);
    stored_file f;
    gpt2d_error err;
    struct stat st;
    if (stat(path, &st) != 0)
        return; /* adopted before a crash */
    if (file_store_get(s->files, j->rec.owner, file_id, &f)) {
        unlink(path); /* adopted, and then made again by a resume */
        return;
    }
    if (file_store_adopt(s->files, j->rec.owner, file_id, "batch_output", name,
                         path, &f, &err) != 0)
        log_error("batch %s: its %s file: %s", j->rec.id, what, err.message);
}

/* The batch's last step: its answers become its files, and it ends in
 * status `final`.  With s->lock held and no line in flight. */
static void finish(batch_service *s, batch_job *j, batch_status final)
{
    const int64_t now = (int64_t)time(NULL);
    if (final == BATCH_EXPIRED && j->rec.status != BATCH_FINALIZING)
        expire_lines(j);
    if (j->rec.output_file_id[0] == '\0' && j->rec.error_file_id[0] == '\0') {
        if (j->rec.completed > 0)
            file_store_new_id("file-", j->rec.output_file_id,
                              sizeof j->rec.output_file_id);
        if (j->rec.failed > 0)
            file_store_new_id("file-", j->rec.error_file_id,
                              sizeof j->rec.error_file_id);
        if (final == BATCH_COMPLETED) {
            j->rec.status = BATCH_FINALIZING;
            j->rec.finalizing_at = now;
        }
        save(s, j); /* the ids first: a crash from here is finished later */
    }
    if (j->out_fd >= 0)
        close(j->out_fd);
    if (j->err_fd >= 0)
        close(j->err_fd);
    j->out_fd = j->err_fd = -1;
    if (j->input != NULL)
        fclose(j->input);
    j->input = NULL;
    adopt(s, j, ".out", j->rec.output_file_id, "output");
    adopt(s, j, ".err", j->rec.error_file_id, "error");
    j->rec.status = final;
    if (final == BATCH_COMPLETED)
        j->rec.completed_at = now;
    else if (final == BATCH_EXPIRED)
        j->rec.expired_at = now;
    else if (final == BATCH_CANCELLED)
        j->rec.cancelled_at = now;
    save(s, j);
    free(j->done);
    j->done = NULL;
}

/* A batch that cannot run: failed, with why. */
static void fail(batch_service *s, batch_job *j, const char *code,
                 const char *message)
{
    batch_record_fail(&j->rec, code, message);
    j->rec.status = BATCH_FAILED;
    j->rec.failed_at = (int64_t)time(NULL);
    save(s, j);
}

/* ---- opening a batch's files ---- */

/* Opens the batch's answer files for appending; with `resume`, reads the
 * answered lines back from them (a last line cut short is dropped).  0 or
 * -1. */
static int open_answers(batch_service *s, batch_job *j, bool resume)
{
    const char *suffix[2] = { ".out", ".err" };
    int *fd[2] = { &j->out_fd, &j->err_fd };
    j->rec.completed = j->rec.failed = 0;
    for (int k = 0; k < 2; k++) {
        char path[4400];
        job_path(s, j, suffix[k], path, sizeof path);
        int flags = O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW;
        *fd[k] = open(path, resume ? flags : flags | O_TRUNC, 0600);
        if (*fd[k] < 0)
            return -1;
        FILE *f = resume ? fdopen(dup(*fd[k]), "r") : NULL;
        char *text = NULL;
        size_t cap = 0;
        off_t whole = 0;
        ssize_t len;
        while (f != NULL && (len = getline(&text, &cap, f)) > 0 &&
               text[len - 1] == '\n') {
            json_t *o = json_loadb(text, (size_t)len, 0, NULL);
            size_t line;
            if (batch_line_of_id(&j->rec,
                                 json_string_value(json_object_get(o, "id")),
                                 &line) &&
                !is_done(j, line)) {
                mark_done(j, line);
                if (k == 0)
                    j->rec.completed++;
                else
                    j->rec.failed++;
            }
            json_decref(o);
            whole += len;
        }
        free(text);
        if (f != NULL)
            fclose(f);
        if (ftruncate(*fd[k], whole) != 0 || lseek(*fd[k], 0, SEEK_END) < 0)
            return -1;
        if (fcntl(*fd[k], F_SETFL, O_APPEND) != 0)
            return -1;
    }
    return 0;
}

/* Opens the batch's input (and with `count`, counts its lines into
 * *lines); 0, or -1 with why in *code and *message. */
static int open_input(batch_service *s, const batch_record *rec, bool count,
                      FILE **in, size_t *lines, const char **code,
                      const char **message)
{
    size_t bytes;
    int fd = file_store_open_content(s->files, rec->owner, rec->input_file_id,
                                     &bytes);
    *in = fd >= 0 ? fdopen(fd, "r") : NULL;
    if (*in == NULL) {
        if (fd >= 0)
            close(fd);
        *code = "input_file_missing";
        *message = "the batch's input file is gone: it was deleted";
        return -1;
    }
    if (!count)
        return 0;
    char *text = NULL;
    size_t cap = 0;
    ssize_t len;
    batch_ids seen = { 0 };
    bool repeated = false;
    *lines = 0;
    while (!repeated && (len = getline(&text, &cap, *in)) >= 0) {
        if (blank(text, (size_t)len))
            continue;
        repeated = batch_ids_seen(&seen, text, (size_t)len);
        ++*lines;
    }
    free(text);
    batch_ids_free(&seen);
    rewind(*in);
    if (repeated) {
        fclose(*in);
        *in = NULL;
        *code = "duplicate_custom_id";
        *message = "two lines have the same custom_id: each line's must be "
                   "unique, so that its answer can be told apart";
        return -1;
    }
    if (*lines == 0) {
        fclose(*in);
        *in = NULL;
        *code = "empty_file";
        *message = "the input file has no requests";
        return -1;
    }
    return 0;
}

/* Makes the batch ready to take lines: its input open, its answers so far
 * known.  0, or -1 with the batch failed. */
static int ready(batch_service *s, batch_job *j, bool resume)
{
    j->done = calloc(j->rec.total / 8 + 1, 1);
    if (j->done == NULL || open_answers(s, j, resume) != 0) {
        fail(s, j, "server_error",
             "the batch's answer files cannot be written");
        return -1;
    }
    return 0;
}

/* ---- the workers ---- */

typedef enum { TASK_NONE, TASK_VALIDATE, TASK_LINE } task_kind;

typedef struct task {
    task_kind kind;
    batch_job *j;
    size_t line;
    char *text;
    size_t len;
} task;

/* The batch's next line not yet answered, or false when none is left. */
static bool take_line(batch_job *j, task *t)
{
    char *text = NULL;
    size_t cap = 0;
    ssize_t len;
    while (j->input != NULL && (len = getline(&text, &cap, j->input)) >= 0) {
        if (blank(text, (size_t)len))
            continue;
        const size_t line = j->next_line++;
        if (is_done(j, line))
            continue;
        *t = (task){ .kind = TASK_LINE,
                     .j = j,
                     .line = line,
                     .text = text,
                     .len = (size_t)len };
        return true;
    }
    free(text);
    j->input_done = true;
    return false;
}

/* What a worker does next, with s->lock held: a batch moved on where
 * nothing is left to run, else a line to answer or a batch to validate. */
static task next_task(batch_service *s)
{
    const int64_t now = (int64_t)time(NULL);
    for (size_t k = 0; k < s->n_jobs; k++) {
        batch_job *j = s->jobs[(s->turn + k) % s->n_jobs];
        if (j->busy)
            continue;
        switch (j->rec.status) {
        case BATCH_VALIDATING:
            j->busy = true;
            return (task){ .kind = TASK_VALIDATE, .j = j };
        case BATCH_IN_PROGRESS:
            if (now >= j->rec.expires_at) {
                atomic_store(&j->stop, true);
                if (j->in_flight == 0)
                    finish(s, j, BATCH_EXPIRED);
                continue;
            }
            if (!j->input_done) {
                task t;
                if (take_line(j, &t)) {
                    j->in_flight++;
                    s->turn = (s->turn + k + 1) % s->n_jobs;
                    return t;
                }
            }
            if (j->in_flight > 0)
                continue;
            if (j->rec.completed + j->rec.failed < j->rec.total &&
                j->input != NULL) {
                /* a line gave up without an answer (memory ran short):
                 * the input is read again for the lines it left */
                rewind(j->input);
                j->next_line = 0;
                j->input_done = false;
                k--; /* this batch again */
                continue;
            }
            finish(s, j, BATCH_COMPLETED);
            continue;
        case BATCH_CANCELLING:
            atomic_store(&j->stop, true);
            if (j->in_flight == 0)
                finish(s, j, BATCH_CANCELLED);
            continue;
        case BATCH_FINALIZING:
            finish(s, j, BATCH_COMPLETED);
            continue;
        default:
            continue;
        }
    }
    return (task){ .kind = TASK_NONE };
}

static void validate(batch_service *s, batch_job *j)
{
    /* the file is read without the lock: nothing else touches a batch a
     * worker validates (busy), but cancel may move its status on */
    const batch_record rec = j->rec;
    pthread_mutex_unlock(&s->lock);
    FILE *in;
    size_t lines = 0;
    const char *code = NULL, *message = NULL;
    int rc = open_input(s, &rec, true, &in, &lines, &code, &message);
    pthread_mutex_lock(&s->lock);
    j->busy = false;
    if (j->rec.status != BATCH_VALIDATING) { /* cancelled meanwhile */
        if (in != NULL)
            fclose(in);
        finish(s, j, BATCH_CANCELLED);
        return;
    }
    if (rc != 0) {
        fail(s, j, code, message);
        return;
    }
    j->input = in;
    j->rec.total = lines;
    if (ready(s, j, false) != 0)
        return;
    j->rec.status = BATCH_IN_PROGRESS;
    j->rec.in_progress_at = (int64_t)time(NULL);
    save(s, j);
}

static void answered(batch_job *j, size_t line, char *out, bool is_error)
{
    j->in_flight--;
    if (out == NULL || is_done(j, line)) {
        free(out);
        return;
    }
    if (j->rec.status != BATCH_IN_PROGRESS &&
        j->rec.status != BATCH_CANCELLING) {
        free(out);
        return;
    }
    if (batch_line_append(is_error ? j->err_fd : j->out_fd, out) == 0) {
        mark_done(j, line);
        if (is_error)
            j->rec.failed++;
        else
            j->rec.completed++;
    } else {
        log_error("batch %s: an answer could not be written: %s", j->rec.id,
                  strerror(errno));
    }
    free(out);
}

static void *worker(void *arg)
{
    batch_service *s = arg;
    pthread_mutex_lock(&s->lock);
    while (!atomic_load(&s->stopping)) {
        task t = next_task(s);
        if (t.kind == TASK_VALIDATE) {
            validate(s, t.j);
            continue;
        }
        if (t.kind == TASK_LINE) {
            pthread_mutex_unlock(&s->lock);
            bool is_error;
            const batch_line_ctx ctx = { .api = s->api,
                                         .rec = &t.j->rec,
                                         .metrics_key = t.j->metrics_key,
                                         .stopping = &s->stopping,
                                         .stop = &t.j->stop };
            char *out = batch_line_answer(&ctx, t.line, t.text, t.len,
                                          &is_error);
            free(t.text);
            pthread_mutex_lock(&s->lock);
            answered(t.j, t.line, out, is_error);
            pthread_cond_broadcast(&s->cond);
            continue;
        }
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 1; /* a window may pass with nothing else to wake us */
        pthread_cond_timedwait(&s->cond, &s->lock, &until);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* ---- start and stop ---- */

/* Forgets the oldest finished batch to make room; false when every kept
 * batch is unfinished.  With s->lock held. */
static bool make_room(batch_service *s)
{
    if (s->n_jobs < BATCH_MAX_KEPT)
        return true;
    for (size_t k = 0; k < s->n_jobs; k++)
        if (batch_status_final(s->jobs[k]->rec.status)) {
            char path[4400];
            job_path(s, s->jobs[k], ".json", path, sizeof path);
            unlink(path);
            job_free(s->jobs[k]);
            memmove(&s->jobs[k], &s->jobs[k + 1],
                    (s->n_jobs - k - 1) * sizeof *s->jobs);
            s->n_jobs--;
            return true;
        }
    return false;
}

static int by_created(const void *a, const void *b)
{
    const batch_job *x = *(batch_job *const *)a, *y = *(batch_job *const *)b;
    if (x->rec.created_at != y->rec.created_at)
        return x->rec.created_at < y->rec.created_at ? -1 : 1;
    return strcmp(x->rec.id, y->rec.id);
}

/* Reads the batches a previous run kept, and readies the unfinished. */
static int load(batch_service *s, gpt2d_error *err)
{
    DIR *d = opendir(s->dir);
    if (d == NULL)
        return error_set(err, "--batch-dir %s: %s", s->dir, strerror(errno));
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        const char *name = ent->d_name;
        size_t len = strlen(name);
        if (len < 5 || strcmp(name + len - 5, ".json") != 0 ||
            strncmp(name, "batch_", 6) != 0 || s->n_jobs == BATCH_MAX_KEPT)
            continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", s->dir, name);
        batch_job *j = job_new();
        gpt2d_error e;
        if (j == NULL || batch_record_load(&j->rec, path, &e) != 0) {
            log_warn("--batch-dir: %s",
                     j != NULL ? e.message : "out of memory");
            job_free(j);
            continue;
        }
        j->metrics_key = metrics_key_id(j->rec.key_name);
        s->jobs[s->n_jobs++] = j;
    }
    closedir(d);
    qsort(s->jobs, s->n_jobs, sizeof *s->jobs, by_created);
    for (size_t k = 0; k < s->n_jobs; k++) {
        batch_job *j = s->jobs[k];
        batch_status st = j->rec.status;
        /* a batch whose files were named was finishing: finish() ends
         * it from its record alone */
        const bool finishing = st == BATCH_FINALIZING ||
                               j->rec.output_file_id[0] != '\0' ||
                               j->rec.error_file_id[0] != '\0';
        if (st == BATCH_VALIDATING || batch_status_final(st) || finishing)
            continue;
        const char *code, *message;
        if (open_input(s, &j->rec, false, &j->input, NULL, &code, &message) !=
            0) {
            fail(s, j, code, message);
            continue;
        }
        if (ready(s, j, true) == 0)
            log_info("batch %s: resumed, %zu of %zu lines answered", j->rec.id,
                     j->rec.completed + j->rec.failed, j->rec.total);
    }
    return 0;
}

int batch_service_start(batch_service **out, const char *dir, size_t parallel,
                        unsigned window, const api_ctx *api, gpt2d_error *err)
{
    *out = NULL;
    batch_service *s = calloc(1, sizeof *s);
    if (s == NULL)
        return error_set(err, "out of memory");
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    atomic_init(&s->stopping, false);
    s->api = api;
    s->window = window > 0 ? (int64_t)window : BATCH_WINDOW_SECONDS;
    char files[4200];
    snprintf(files, sizeof files, "%s/files", dir);
    snprintf(s->dir, sizeof s->dir, "%s/batches", dir);
    if (file_store_open(&s->files, files, err) != 0 ||
        (mkdir(s->dir, 0700) != 0 && errno != EEXIST) || load(s, err) != 0) {
        if (errno != 0 && err->message[0] == '\0')
            error_set(err, "--batch-dir %s: %s", s->dir, strerror(errno));
        batch_service_free(s);
        return -1;
    }
    s->workers = calloc(parallel, sizeof *s->workers);
    for (size_t i = 0; s->workers != NULL && i < parallel; i++) {
        if (pthread_create(&s->workers[i], NULL, worker, s) != 0)
            break;
        s->n_workers++;
    }
    if (s->n_workers == 0) {
        batch_service_free(s);
        return error_set(err, "cannot start the batch workers");
    }
    *out = s;
    return 0;
}

void batch_service_stop(batch_service *s)
{
    if (s == NULL || atomic_exchange(&s->stopping, true))
        return;
    pthread_mutex_lock(&s->lock);
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < s->n_workers; i++)
        pthread_join(s->workers[i], NULL);
    s->n_workers = 0;
}

void batch_service_free(batch_service *s)
{
    if (s == NULL)
        return;
    batch_service_stop(s);
    for (size_t k = 0; k < s->n_jobs; k++)
        job_free(s->jobs[k]);
    free(s->workers);
    file_store_close(s->files);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

file_store *batch_service_files(batch_service *s)
{
    return s->files;
}

/* ---- the API's calls ---- */

static batch_job *find(batch_service *s, const uint8_t *owner, const char *id)
{
    for (size_t k = 0; k < s->n_jobs; k++)
        if (strcmp(s->jobs[k]->rec.id, id) == 0 &&
            memcmp(s->jobs[k]->rec.owner, owner, SHA256_BYTES) == 0)
            return s->jobs[k];
    return NULL;
}

int batch_service_create(batch_service *s, const api_caller *who,
                         const char *input_file_id, const char *endpoint,
                         json_t *metadata, json_t **out, api_error *e)
{
    batch_job *j = job_new();
    if (j == NULL)
        return api_error_set(e, 500, NULL, "out of memory");
    file_store_new_id("batch_", j->rec.id, sizeof j->rec.id);
    memcpy(j->rec.owner, who->owner, SHA256_BYTES);
    memcpy(j->rec.principal, who->principal, SHA256_BYTES);
    memcpy(j->rec.account, who->account, SHA256_BYTES);
    j->rec.limits = who->limits;
    j->metrics_key = who->metrics_key;
    snprintf(j->rec.key_name, sizeof j->rec.key_name, "%s",
             metrics_key_name(who->metrics_key));
    snprintf(j->rec.endpoint, sizeof j->rec.endpoint, "%s", endpoint);
    snprintf(j->rec.input_file_id, sizeof j->rec.input_file_id, "%s",
             input_file_id);
    j->rec.metadata = metadata != NULL ? json_incref(metadata) : NULL;
    j->rec.status = BATCH_VALIDATING;
    j->rec.created_at = (int64_t)time(NULL);
    j->rec.expires_at = j->rec.created_at + s->window;
    /* the file is looked up under the lock a delete takes too
     * (batch_service_delete_file): it cannot go between the two */
    pthread_mutex_lock(&s->lock);
    gpt2d_error err;
    int rc = -1;
    stored_file f;
    if (!file_store_get(s->files, who->owner, input_file_id, &f))
        api_error_set(e, 404, "input_file_id", "no such file: %s",
                      input_file_id);
    else if (strcmp(f.purpose, "batch") != 0)
        api_error_set(e, 400, "input_file_id",
                      "file %s has purpose \"%s\"; a batch reads a file "
                      "uploaded with purpose \"batch\"",
                      input_file_id, f.purpose);
    else if (!make_room(s))
        api_error_set(e, 429, NULL,
                      "the server keeps at most %d batches and all are "
                      "running: retry when one has finished",
                      BATCH_MAX_KEPT);
    else if (batch_record_save(&j->rec, s->dir, &err) != 0)
        api_error_set(e, 500, NULL, "the batch cannot be saved: %s",
                      err.message);
    else
        rc = 0;
    if (rc == 0) {
        s->jobs[s->n_jobs++] = j;
        *out = batch_record_json(&j->rec);
        pthread_cond_broadcast(&s->cond);
    }
    pthread_mutex_unlock(&s->lock);
    if (rc != 0)
        job_free(j);
    return rc;
}

json_t *batch_service_get(batch_service *s, const uint8_t *owner,
                          const char *id)
{
    pthread_mutex_lock(&s->lock);
    batch_job *j = find(s, owner, id);
    json_t *o = j != NULL ? batch_record_json(&j->rec) : NULL;
    pthread_mutex_unlock(&s->lock);
    return o;
}

/* Cancels `j` (s->lock held): cancelling while lines run, cancelled at
 * once when nothing ran. */
static void cancel_job(batch_service *s, batch_job *j)
{
    /* validating and no worker at it: nothing ran */
    const bool nothing_ran = j->rec.status == BATCH_VALIDATING && !j->busy;
    j->rec.status = BATCH_CANCELLING;
    j->rec.cancelling_at = (int64_t)time(NULL);
    atomic_store(&j->stop, true);
    if (nothing_ran) {
        j->rec.status = BATCH_CANCELLED;
        j->rec.cancelled_at = j->rec.cancelling_at;
    }
    save(s, j);
    pthread_cond_broadcast(&s->cond);
}

size_t batch_service_cancel_unaccepted(batch_service *s,
                                       bool (*accepted)(void *arg,
                                                        const uint8_t *owner),
                                       void *arg)
{
    size_t n = 0;
    pthread_mutex_lock(&s->lock);
    for (size_t k = 0; k < s->n_jobs; k++) {
        batch_job *j = s->jobs[k];
        if ((j->rec.status == BATCH_VALIDATING ||
             j->rec.status == BATCH_IN_PROGRESS) &&
            !accepted(arg, j->rec.owner)) {
            log_info("batch %s cancelled: its API key is no longer in the "
                     "keys file",
                     j->rec.id);
            cancel_job(s, j);
            n++;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return n;
}

int batch_service_cancel(batch_service *s, const uint8_t *owner, const char *id,
                         json_t **out, api_error *e)
{
    pthread_mutex_lock(&s->lock);
    batch_job *j = find(s, owner, id);
    if (j != NULL && (j->rec.status == BATCH_VALIDATING ||
                      j->rec.status == BATCH_IN_PROGRESS))
        cancel_job(s, j);
    if (j != NULL)
        *out = batch_record_json(&j->rec);
    pthread_mutex_unlock(&s->lock);
    if (j == NULL)
        return api_error_set(e, 404, NULL, "no such batch: %s", id);
    return 0;
}

json_t *batch_service_list(batch_service *s, const uint8_t *owner,
                           const char *after, size_t limit)
{
    json_t *data = json_array();
    bool more = false, started = after == NULL;
    pthread_mutex_lock(&s->lock);
    for (size_t k = s->n_jobs; k-- > 0;) {
        const batch_job *j = s->jobs[k];
        if (memcmp(j->rec.owner, owner, SHA256_BYTES) != 0)
            continue;
        if (!started) {
            started = strcmp(j->rec.id, after) == 0;
            continue;
        }
        if (json_array_size(data) == limit) {
            more = true;
            break;
        }
        json_array_append_new(data, batch_record_json(&j->rec));
    }
    pthread_mutex_unlock(&s->lock);
    size_t n = json_array_size(data);
    json_t *first = n > 0 ? json_object_get(json_array_get(data, 0), "id")
                          : NULL,
           *last = n > 0 ? json_object_get(json_array_get(data, n - 1), "id")
                         : NULL;
    return json_pack("{s:s, s:o, s:O, s:O, s:b}", "object", "list", "data",
                     data, "first_id", first != NULL ? first : json_null(),
                     "last_id", last != NULL ? last : json_null(), "has_more",
                     more);
}

int batch_service_delete_file(batch_service *s, const uint8_t *owner,
                              const char *id)
{
    bool used = false;
    pthread_mutex_lock(&s->lock);
    for (size_t k = 0; k < s->n_jobs && !used; k++)
        used = !batch_status_final(s->jobs[k]->rec.status) &&
               memcmp(s->jobs[k]->rec.owner, owner, SHA256_BYTES) == 0 &&
               strcmp(s->jobs[k]->rec.input_file_id, id) == 0;
    int rc = used ? 1 : file_store_delete(s->files, owner, id);
    pthread_mutex_unlock(&s->lock);
    return rc;
}
