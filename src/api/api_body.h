/* api_body.h — answers made as they are sent (api_body.c): /tokenize's
 * {"tokens":[...]} and /detokenize's {"content":"..."}, byte for byte as
 * the JSON of the whole would be, held as their token ids alone (4 bytes
 * each) and written piece by piece as the client takes them, so a client
 * that does not read pins its ids, never the rendered answer.  A response
 * carries one as its source (api_body_source).
 *
 * Threads: a body belongs to one connection at a time. */
#ifndef GPT2D_API_BODY_H
#define GPT2D_API_BODY_H

#include <stddef.h>
#include <stdint.h>

#include "api/api_common.h"
#include "api/workpool.h"
#include "text/tokenizer.h"

typedef struct api_body api_body;

/* Take ownership of ids[0, n) (malloc'ed; valid ids of tok); NULL on OOM,
 * and then the ids are still the caller's.  A content body renders its
 * text from `tok` as it is sent: tok must outlive the body. */
api_body *api_body_token_list(int32_t *ids, size_t n);
api_body *api_body_content(const tokenizer *tok, int32_t *ids, size_t n);
/* What a body of n ids holds: the most its answer's charge needs. */
size_t api_body_bytes(size_t n_ids);
/* The body holds the charge from now on, lowered to what it holds, and
 * releases it when freed; *charge is zeroed. */
void api_body_take_charge(api_body *b, work_charge *charge);
/* The answer's length in bytes, known from the start. */
size_t api_body_length(const api_body *b);
/* Copies the next bytes of the answer into buf; 0 at its end. */
size_t api_body_read(api_body *b, char *buf, size_t max);
void api_body_free(api_body *b);
/* The body as a response's source, which owns it from now on. */
api_source api_body_source(api_body *b);

#endif
