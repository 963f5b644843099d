/* choices_gbnf.c — one of a list of strings (see choices_gbnf.h). */
#include "grammar/choices_gbnf.h"

#include "grammar/gbnf_text.h"
#include "text/utf8.h"

int choices_gbnf(const char *const *choices, const size_t *lens, size_t n,
                 const char *rule, size_t max_bytes, gpt2d_buf *out,
                 size_t *bad, gpt2d_error *err)
{
    *bad = n;
    if (!gbnf_rule_name_valid(rule))
        return error_set(err, "the rule name is not [A-Za-z0-9-]+");
    if (n == 0)
        return error_set(err, "the list of choices is empty");
    for (size_t i = 0; i < n; i++)
        if (!utf8_valid(choices[i], lens[i])) {
            *bad = i;
            return error_set(err, "choice %zu is not valid UTF-8", i);
        }
    gpt2d_buf body = GPT2D_BUF_INIT;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = (i > 0 && gbnf_puts(&body, " | ") != 0) ||
                     gbnf_literal(&body, choices[i], lens[i]) != 0 ||
                     body.len > max_bytes
                 ? -1
                 : 0;
    gbnf_out o;
    gbnf_out_init(&o, out, rule, out->len + max_bytes);
    if (rc == 0)
        rc = gbnf_out_rule(&o, rule, (const char *)body.data, body.len);
    gbnf_out_free(&o);
    buf_free(&body);
    if (rc != 0)
        return error_set(err,
                         "the choices' grammar is larger than %zu bytes (or "
                         "memory ran out)",
                         max_bytes);
    return 0;
}
