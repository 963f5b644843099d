/* json_format.c — the supported `format`s as patterns (see json_format.h). */
#include "grammar/json_format.h"

#include <string.h>

#define YEAR "(000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})"
/* Leap years: divisible by 4 but not by 100, or by 400 (not year 0). */
#define LEAP_YEAR                                                              \
    "([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])" \
    "00)"
#define MONTH_DAY                                                              \
    "((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]" \
    "|30)|02-(0[1-9]|1[0-9]|2[0-8]))"
#define DATE "(" YEAR "-" MONTH_DAY "|" LEAP_YEAR "-02-29)"
#define HOUR "([01][0-9]|2[0-3])"
#define MINUTE "[0-5][0-9]"
#define TIME                                                                   \
    HOUR ":" MINUTE ":" MINUTE "(\\.[0-9]{1,6})?(Z|[+\\-]" HOUR ":" MINUTE ")"
#define HEX "[0-9a-fA-F]"
#define ATOM "[A-Za-z0-9!#$%&'*+/=?\\^_`{|}~\\-]+"
#define LABEL "[A-Za-z0-9]([A-Za-z0-9\\-]{0,61}[A-Za-z0-9])?"
#define OCTET "(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"

static const struct {
    const char *name, *pattern;
} formats[] = {
    { "date", "^" DATE "$" },
    { "time", "^" TIME "$" },
    { "date-time", "^" DATE "T" TIME "$" },
    { "uuid", "^" HEX "{8}-" HEX "{4}-" HEX "{4}-" HEX "{4}-" HEX "{12}$" },
    { "email", "^" ATOM "(\\." ATOM ")*@(" LABEL "\\.)+[A-Za-z]{2,63}$" },
    { "ipv4", "^" OCTET "(\\." OCTET "){3}$" },
};

const char *json_format_pattern(const char *format)
{
    for (size_t i = 0; i < sizeof formats / sizeof *formats; i++)
        if (strcmp(formats[i].name, format) == 0)
            return formats[i].pattern;
    return NULL;
}
