/* inspect_answer.h — the JSON answer of POST /v1/inspect, written straight
 * into a byte buffer: an answer may hold millions of probabilities, and as
 * jansson values they would take many times the memory of their text.
 *
 *   {"id": "insp-…", "object": "inspect", "model": NAME,
 *    "tokens": [{"id": 464, "text": "The"}, ...],
 *    "layers": [0, 5, 11],
 *    "attention": [layer][head][query] -> query + 1 probabilities,
 *    "logit_lens": [layer][position] -> [{"id", "text", "prob"}] x k,
 *    "residual_norms": [layer][position],
 *    "usage": {"prompt_tokens": n, "total_tokens": n}}
 *
 * The arrays follow `layers` (the order asked for); "attention" and
 * "logit_lens" are there only when asked for.  Token text is OpenAI's
 * (api_token_string: "bytes:\xNN" for a piece of a character).  Numbers
 * carry six significant digits (inspect_put_number).
 *
 * Threads: any; the capture must be complete (its request finished). */
#ifndef GPT2D_INSPECT_ANSWER_H
#define GPT2D_INSPECT_ANSWER_H

#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "model/inspect.h"
#include "text/tokenizer.h"

/* Appends the answer `id` for `prompt` (the capture's tokens) to `out`; -1
 * when memory runs out (out is then the caller's to free). */
int inspect_answer_write(gpt2d_buf *out, const char *id,
                         const inspect_capture *c, const int32_t *prompt,
                         const tokenizer *tok, const char *model_name);

/* The longest token text an answer can hold: every token of the vocabulary
 * as api_token_string spells it, escaped and quoted as the answer writes
 * it (computed once at start: it reads the whole vocabulary). */
size_t inspect_token_text_most(const tokenizer *tok);

/* The most bytes inspect_answer_write appends for a capture of `p` over
 * n_tokens positions of a model of n_head heads, when no token's text
 * takes more than `token_text` bytes (inspect_token_text_most), the id is
 * id_len bytes and the model's name name_len: what an answer is charged to
 * --response-memory before it is built.  Every number counted at its
 * longest (13 bytes). */
size_t inspect_answer_bound(const inspect_params *p, size_t n_tokens,
                            size_t n_head, size_t token_text, size_t id_len,
                            size_t name_len);

/* The largest inspect_answer_bound of any request the limits let through:
 * every one of n_layer layers, the longest lens, n_tokens positions, and
 * at most max_attention probabilities (0: no limit). */
size_t inspect_answer_most(size_t n_layer, size_t n_head, size_t n_tokens,
                           size_t max_attention, size_t token_text,
                           size_t id_len, size_t name_len);

/* Appends v as a JSON number the way printf's "%.6g" writes it ("0.25",
 * "0.000123457", "1.5e-07", "1"), two to three times faster: an answer holds
 * millions.  A value that is not finite becomes null.  0 or -1 (memory). */
int inspect_put_number(gpt2d_buf *b, double v);

#endif
