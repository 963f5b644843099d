/* fuzz_request.h — what the request-body targets (fuzz_completion_request.c,
 * fuzz_inspect_request.c) share: the oracle of a refused body.
 *
 * A refused body is the client's fault (400), and its error object must
 * reach the client intact: serialisable, with the same status, naming the
 * same `param`. */
#ifndef GPT2D_FUZZ_REQUEST_H
#define GPT2D_FUZZ_REQUEST_H

#include <jansson.h>
#include <string.h>

#include "api/api_common.h"
#include "fuzz.h"

static inline void fuzz_check_refused(const api_error *e)
{
    FUZZ_CHECK(e->status == 400, "status %d for a client's body: %s", e->status,
               e->message);
    FUZZ_CHECK(e->message[0] != '\0', "empty error message");
    api_response r = { 0 };
    api_response_error(&r, e);
    FUZZ_CHECK(r.status == 400 && r.body != NULL,
               "error object did not serialise (status %d) for: %s", r.status,
               e->message);
    json_error_t jerr;
    /* JSON_ALLOW_NUL: "\u0000" is valid JSON (a NUL byte in the text). */
    json_t *back = json_loadb(r.body, r.body_len, JSON_ALLOW_NUL, &jerr);
    FUZZ_CHECK(back != NULL, "error body is not JSON: %s", jerr.text);
    json_t *err = json_object_get(back, "error");
    FUZZ_CHECK(json_is_string(json_object_get(err, "message")),
               "error.message missing");
    json_t *param = json_object_get(err, "param");
    FUZZ_CHECK(e->param[0] == '\0'
                   ? json_is_null(param)
                   : json_is_string(param) &&
                         strcmp(json_string_value(param), e->param) == 0,
               "error.param does not name '%s'", e->param);
    json_decref(back);
    api_response_free(&r);
}

#endif
