/* test_json_schema.c — JSON Schema to GBNF (json_schema.h): each keyword's
 * grammar on small cases, its texts checked by gbnf_match.h (a recognizer
 * written from the GBNF language, independent of src/grammar/), and every
 * refusal with its param and message. */
#include "config.h"

#include <jansson.h>

#include "core/buf.h"
#include "gbnf_match.h"
#include "grammar/gbnf_text.h"
#include "grammar/json_schema.h"
#include "test_util.h"

static json_t *parse(const char *text)
{
    json_error_t jerr;
    json_t *v = json_loads(text, JSON_DECODE_ANY, &jerr);
    ck_assert_msg(v != NULL, "bad test JSON %s: %s", text, jerr.text);
    return v;
}

/* The grammar of a schema (whole, start rule "root"); fails the test on
 * a refusal. */
static gm_grammar *grammar_of(const char *schema_text, bool strict)
{
    json_t *schema = parse(schema_text);
    json_schema_options opt;
    json_schema_options_default(&opt);
    opt.strict = strict;
    gpt2d_buf out = GPT2D_BUF_INIT;
    json_schema_error err;
    int rc = json_schema_grammar(schema, &opt, &out, &err);
    ck_assert_msg(rc == 0, "%s refused: %s: %s", schema_text, err.param,
                  err.message);
    gm_grammar *g = gm_parse((const char *)out.data, out.len);
    buf_free(&out);
    json_decref(schema);
    return g;
}

/* Each of `yes` is an answer, none of `no` is.  Lists end with NULL. */
static void check_texts(const char *schema, bool strict, const char *const *yes,
                        const char *const *no)
{
    gm_grammar *g = grammar_of(schema, strict);
    for (size_t i = 0; yes[i] != NULL; i++)
        ck_assert_msg(gm_accepts(g, "root", yes[i]), "%s should accept %s",
                      schema, yes[i]);
    for (size_t i = 0; no[i] != NULL; i++)
        ck_assert_msg(!gm_accepts(g, "root", no[i]), "%s should refuse %s",
                      schema, no[i]);
    gm_free(g);
}

#define TEXTS(...)                                                             \
    (const char *const[])                                                      \
    {                                                                          \
        __VA_ARGS__, NULL                                                      \
    }

static void check_refusal(const char *schema_text, bool strict,
                          const char *param, const char *message)
{
    json_t *schema = parse(schema_text);
    json_schema_options opt;
    json_schema_options_default(&opt);
    opt.strict = strict;
    opt.param = "response_format.json_schema.schema";
    gpt2d_buf out = GPT2D_BUF_INIT;
    ck_assert_int_eq(buf_append(&out, "keep\n", 5), 0);
    json_schema_error err;
    ck_assert_msg(json_schema_grammar(schema, &opt, &out, &err) == -1,
                  "%s should be refused", schema_text);
    ck_assert_str_eq(err.param, param);
    ck_assert_str_eq(err.message, message);
    ck_assert_uint_eq(out.len, 5); /* the buffer as it was */
    buf_free(&out);
    json_decref(schema);
}

#define BASE "response_format.json_schema.schema"

START_TEST(test_string_spelling_is_canonical)
{
    check_texts(
        "{\"type\":\"string\"}", true,
        TEXTS("\"\"", "\"a b\"", "\"\\\"\\\\\"", "\"\\n\\t\\r\\b\\f\"",
              "\"\\u0001\\u001f\\u000b\"", "\"é€😀\"", "\"\x7f\"", "\"/\""),
        TEXTS("\"\n\"", "\"\\/\"", "\"\\u000a\"", "\"\\u001F\"", "\"\\u00e9\"",
              "\"\\ud83d\\ude00\"", "\"a", "'a'", "\"\\x41\"", " \"a\""));
}
END_TEST

START_TEST(test_string_lengths_count_characters)
{
    check_texts("{\"type\":\"string\",\"minLength\":1,\"maxLength\":2}", true,
                TEXTS("\"a\"", "\"éé\"", "\"\\n\\t\"", "\"😀\\u0000\""),
                TEXTS("\"\"", "\"abc\"", "\"\\n\\t\\r\""));
    check_texts("{\"type\":\"string\",\"maxLength\":0}", true, TEXTS("\"\""),
                TEXTS("\"a\""));
    check_texts("{\"type\":\"string\",\"minLength\":2.0}", true,
                TEXTS("\"ab\"", "\"abc\""), TEXTS("\"a\""));
}
END_TEST

START_TEST(test_integer_bounds_are_exact)
{
    check_texts("{\"type\":\"integer\",\"minimum\":-3,\"maximum\":12}", true,
                TEXTS("-3", "-1", "0", "9", "10", "12"),
                TEXTS("-4", "13", "-0", "01", "1.0", "1e1", "+1", "", "100"));
    check_texts("{\"type\":\"integer\",\"exclusiveMinimum\":0.5,"
                "\"exclusiveMaximum\":3}",
                true, TEXTS("1", "2"), TEXTS("0", "3", "0.5"));
    check_texts("{\"type\":\"integer\",\"minimum\":99,\"maximum\":1001}", true,
                TEXTS("99", "100", "999", "1000", "1001"),
                TEXTS("98", "1002", "9", "10000"));
    check_texts("{\"type\":\"integer\"}", true,
                TEXTS("0", "-1", "123456789012345", "-999999999999999"),
                TEXTS("1234567890123456", "-0", "00", "1.5"));
}
END_TEST

START_TEST(test_number_bounds_are_exact_decimals)
{
    check_texts("{\"type\":\"number\",\"exclusiveMinimum\":0.1,"
                "\"maximum\":2.5}",
                true, TEXTS("0.11", "0.1000000000001", "1", "2.5", "2.49"),
                TEXTS("0.1", "0.09", "2.51", "2.50", "3", "-1", "0"));
    check_texts("{\"type\":\"number\",\"minimum\":-1.5,\"maximum\":-0.25}",
                true, TEXTS("-1.5", "-1", "-0.25", "-0.3"),
                TEXTS("-1.51", "-0.2", "0", "-0", "-2"));
    check_texts("{\"type\":\"number\"}", true,
                TEXTS("0", "-0.5", "1.25", "123456789012345",
                      "0.12345678901234", "12345678901234.5"),
                TEXTS("1e5", "1.50", "-0", ".5", "1.", "0.123456789012345",
                      "1234567890123456", "12345678901234.56", "01"));
}
END_TEST

START_TEST(test_boolean_null_and_type_lists)
{
    check_texts("{\"type\":\"boolean\"}", true, TEXTS("true", "false"),
                TEXTS("null", "1", "True"));
    check_texts("{\"type\":\"null\"}", true, TEXTS("null"), TEXTS("nul"));
    check_texts("{\"type\":[\"string\",\"null\"],\"maxLength\":1}", true,
                TEXTS("null", "\"a\""), TEXTS("\"ab\"", "1"));
    check_texts("{\"type\":[\"integer\",\"number\"],\"maximum\":1}", true,
                TEXTS("1", "0.5"), TEXTS("1.5"));
}
END_TEST

START_TEST(test_enum_and_const)
{
    check_texts("{\"enum\":[\"a\",1,null,{\"k\":[1,2.50]},\"q\\\"\"]}", true,
                TEXTS("\"a\"", "1", "null", "{\"k\":[1,2.5]}", "\"q\\\"\""),
                TEXTS("\"b\"", "1.0", "{\"k\": [1,2.5]}", "\"q\"\""));
    check_texts("{\"type\":\"string\",\"enum\":[\"a\",1,\"abc\"],"
                "\"maxLength\":2}",
                true, TEXTS("\"a\""), TEXTS("1", "\"abc\""));
    check_texts("{\"const\":2.0}", true, TEXTS("2"), TEXTS("2.0", "3"));
    check_texts("{\"type\":\"integer\",\"enum\":[1,1.5,2.0]}", true,
                TEXTS("1", "2"), TEXTS("1.5"));
    check_texts("{\"enum\":[1,2,3],\"const\":2}", true, TEXTS("2"),
                TEXTS("1", "3"));
    /* values kept only when they match the pattern (a search) or format */
    check_texts("{\"enum\":[\"ab\",\"xaby\",\"b\",3],\"pattern\":\"a.\"}", true,
                TEXTS("\"ab\"", "\"xaby\"", "3"), TEXTS("\"b\""));
    check_texts("{\"enum\":[\"2024-02-30\",\"2024-02-29\"],"
                "\"format\":\"date\"}",
                true, TEXTS("\"2024-02-29\""), TEXTS("\"2024-02-30\""));
}
END_TEST

START_TEST(test_any_of_one_of_all_of)
{
    const char *any = "{\"anyOf\":[{\"type\":\"integer\"},"
                      "{\"type\":\"string\",\"maxLength\":1}],"
                      "\"description\":\"d\"}";
    check_texts(any, true, TEXTS("5", "\"x\""), TEXTS("\"xy\"", "null"));
    /* not strict: oneOf as anyOf */
    check_texts("{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"null\"}]}",
                false, TEXTS("5", "null"), TEXTS("\"x\""));
    check_texts("{\"allOf\":[{\"type\":\"boolean\"}]}", true, TEXTS("true"),
                TEXTS("1"));
    /* an alternative without instances is dropped */
    check_texts("{\"anyOf\":[{\"type\":\"integer\",\"minimum\":5,"
                "\"maximum\":3},{\"type\":\"null\"}]}",
                true, TEXTS("null"), TEXTS("4"));
}
END_TEST

START_TEST(test_object_members_in_schema_order)
{
    const char *s = "{\"type\":\"object\",\"properties\":{"
                    "\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"},"
                    "\"c\":{\"type\":\"integer\"}},\"required\":[\"a\"],"
                    "\"additionalProperties\":false}";
    check_texts(s, true,
                TEXTS("{\"a\":1}", "{\"a\":1,\"c\":2}", "{\"a\":1,\"b\":2}",
                      "{\"a\":1,\"b\":2,\"c\":3}"),
                TEXTS("{\"c\":2,\"a\":1}", "{\"b\":1}", "{\"a\":1,\"d\":1}",
                      "{}", "{ \"a\":1}", "{\"a\":1,}", "{\"a\":1,\"a\":1}"));
    /* all optional: any in order, or none */
    check_texts(
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"null\"},"
        "\"b\":{\"type\":\"null\"}}}",
        true,
        TEXTS("{}", "{\"a\":null}", "{\"b\":null}", "{\"a\":null,\"b\":null}"),
        TEXTS("{\"b\":null,\"a\":null}", "{,\"b\":null}", "{\"c\":1}"));
    /* optional members before the first required one */
    check_texts(
        "{\"type\":\"object\",\"properties\":{\"x\":{\"const\":1},"
        "\"y\":{\"const\":2},\"z\":{\"const\":3},\"w\":{\"const\":4}},"
        "\"required\":[\"y\"]}",
        true,
        TEXTS("{\"y\":2}", "{\"x\":1,\"y\":2}", "{\"y\":2,\"z\":3}",
              "{\"x\":1,\"y\":2,\"z\":3,\"w\":4}", "{\"y\":2,\"w\":4}"),
        TEXTS("{\"x\":1}", "{\"x\":1,\"z\":3}", "{}", "{\"x\":1,\"w\":4}"));
    /* a property name needing escapes */
    check_texts(
        "{\"type\":\"object\",\"properties\":{\"a\\\"b\":{\"const\":1}},"
        "\"required\":[\"a\\\"b\"]}",
        true, TEXTS("{\"a\\\"b\":1}"), TEXTS("{\"a\"b\":1}"));
}
END_TEST

START_TEST(test_object_required_and_additional_properties)
{
    /* a required name missing from properties takes any value */
    check_texts("{\"type\":\"object\",\"properties\":{\"a\":{\"const\":1}},"
                "\"required\":[\"a\",\"q\"]}",
                true, TEXTS("{\"a\":1,\"q\":true}", "{\"a\":1,\"q\":[1]}"),
                TEXTS("{\"a\":1}", "{\"q\":1,\"a\":1}"));
    check_texts("{\"type\":\"object\",\"required\":[\"q\"],"
                "\"additionalProperties\":{\"type\":\"integer\"}}",
                true, TEXTS("{\"q\":5}"), TEXTS("{\"q\":\"s\"}", "{}"));
    /* no properties: any object, values as additionalProperties says */
    check_texts("{\"type\":\"object\",\"additionalProperties\":"
                "{\"type\":\"integer\"}}",
                true, TEXTS("{}", "{\"x\":1,\"y\":2}", "{\"\":0}"),
                TEXTS("{\"x\":\"s\"}", "{x:1}"));
    check_texts("{\"type\":\"object\"}", true,
                TEXTS("{}", "{\"a\":[1,{\"b\":null}],\"c\":\"d\"}"),
                TEXTS("[]", "{\"a\"}"));
    check_texts("{\"type\":\"object\",\"additionalProperties\":false}", true,
                TEXTS("{}"), TEXTS("{\"a\":1}"));
    /* an optional property without instances is left out */
    check_texts("{\"type\":\"object\",\"properties\":{\"a\":false,"
                "\"b\":{\"type\":\"null\"}}}",
                true, TEXTS("{}", "{\"b\":null}"), TEXTS("{\"a\":null}"));
}
END_TEST

START_TEST(test_array_items_and_counts)
{
    check_texts("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},"
                "\"minItems\":1,\"maxItems\":2}",
                true, TEXTS("[1]", "[1,2]"),
                TEXTS("[]", "[1,2,3]", "[1, 2]", "[\"a\"]", "[1,]"));
    check_texts("{\"type\":\"array\",\"items\":{\"type\":\"null\"}}", true,
                TEXTS("[]", "[null]", "[null,null,null]"), TEXTS("[1]"));
    check_texts("{\"type\":\"array\",\"items\":false}", true, TEXTS("[]"),
                TEXTS("[1]"));
    check_texts("{\"type\":\"array\",\"minItems\":2}", true,
                TEXTS("[1,\"a\"]", "[[],{},null]"), TEXTS("[1]"));
    check_texts("{\"type\":\"array\",\"maxItems\":0}", true, TEXTS("[]"),
                TEXTS("[1]"));
}
END_TEST

START_TEST(test_pattern_is_a_search)
{
    check_texts("{\"type\":\"string\",\"pattern\":\"^[a-z]+$\"}", true,
                TEXTS("\"abc\""), TEXTS("\"ab1\"", "\"\"", "\"Abc\""));
    check_texts("{\"type\":\"string\",\"pattern\":\"b\\\\d\"}", true,
                TEXTS("\"b1\"", "\"xb2y\"", "\"\\nb3\""),
                TEXTS("\"b\"", "\"bx\""));
    check_texts("{\"type\":\"string\",\"pattern\":\"q\\\"\"}", true,
                TEXTS("\"aq\\\"\""), TEXTS("\"aq\""));
    /* minLength and maxLength beside a pattern: its strings kept to them */
    check_texts("{\"type\":\"string\",\"pattern\":\"^[a-z]+$\","
                "\"maxLength\":3}",
                true, TEXTS("\"a\"", "\"abc\""), TEXTS("\"abcd\"", "\"\""));
    check_texts("{\"type\":\"string\",\"pattern\":\"^[A-Z][a-z]*$\","
                "\"minLength\":3,\"maxLength\":5}",
                true, TEXTS("\"Abc\"", "\"Abcde\""),
                TEXTS("\"Ab\"", "\"Abcdef\"", "\"abc\""));
    check_texts("{\"type\":\"string\",\"pattern\":\"@\",\"minLength\":2,"
                "\"maxLength\":4}",
                true, TEXTS("\"@b\"", "\"a@b\""),
                TEXTS("\"@\"", "\"ab\"", "\"a@bcd\""));
    check_texts("{\"type\":\"string\",\"format\":\"email\","
                "\"maxLength\":20}",
                true, TEXTS("\"a@b.co\"", "\"ab.cd@x.y.org\""),
                TEXTS("\"abcdefghij@klmnopq.rs\"", "\"a@b\""));
    /* the pattern alone keeps the lengths: minLength and maxLength hold */
    check_texts("{\"type\":\"string\",\"pattern\":\"^[0-9]{3}$\","
                "\"minLength\":3,\"maxLength\":3}",
                true, TEXTS("\"123\""), TEXTS("\"12\""));
}
END_TEST

START_TEST(test_formats)
{
    check_texts("{\"type\":\"string\",\"format\":\"date\"}", true,
                TEXTS("\"2024-02-29\"", "\"2000-02-29\"", "\"0001-01-01\"",
                      "\"1999-12-31\"", "\"2023-04-30\""),
                TEXTS("\"2023-02-29\"", "\"1900-02-29\"", "\"0000-01-01\"",
                      "\"2024-13-01\"", "\"2024-04-31\"", "\"20240101\""));
    check_texts(
        "{\"type\":\"string\",\"format\":\"date-time\"}", true,
        TEXTS("\"2024-01-31T23:59:59.123Z\"", "\"2024-01-31T00:00:00+05:30\""),
        TEXTS("\"2024-01-31T23:59:60Z\"", "\"2024-01-31t00:00:00Z\"",
              "\"2024-01-31T00:00:00\"", "\"2024-01-31T00:00:00.1234567Z\""));
    check_texts("{\"type\":\"string\",\"format\":\"time\"}", true,
                TEXTS("\"12:30:00Z\"", "\"23:59:59.5-11:00\""),
                TEXTS("\"24:00:00Z\"", "\"12:30Z\"", "\"12:30:00\""));
    check_texts("{\"type\":\"string\",\"format\":\"uuid\"}", true,
                TEXTS("\"123e4567-e89b-12d3-A456-426614174000\""),
                TEXTS("\"123e4567e89b12d3a456426614174000\"",
                      "\"123e4567-e89b-12d3-a456-42661417400g\""));
    check_texts("{\"type\":\"string\",\"format\":\"email\"}", true,
                TEXTS("\"a@b.co\"", "\"x.y+z@mail.example.org\""),
                TEXTS("\"a@b\"", "\"@b.co\"", "\"a..b@c.de\"", "\"a@-b.co\""));
    check_texts("{\"type\":\"string\",\"format\":\"ipv4\"}", true,
                TEXTS("\"0.0.0.0\"", "\"255.255.255.255\"", "\"10.1.20.199\""),
                TEXTS("\"256.1.1.1\"", "\"01.1.1.1\"", "\"1.1.1\""));
    /* not strict: an unknown format is ignored */
    check_texts("{\"type\":\"string\",\"format\":\"uri\"}", false,
                TEXTS("\"anything\""), TEXTS("1"));
}
END_TEST

START_TEST(test_refs_and_recursion)
{
    /* a linked list: at most 6 unrolled levels below the root */
    const char *list =
        "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{"
        "\"v\":{\"type\":\"integer\"},\"next\":{\"$ref\":\"#/$defs/node\"}},"
        "\"required\":[\"v\"],\"additionalProperties\":false}},"
        "\"$ref\":\"#/$defs/node\"}";
    check_texts(list, true,
                TEXTS("{\"v\":1}", "{\"v\":1,\"next\":{\"v\":2}}",
                      "{\"v\":1,\"next\":{\"v\":2,\"next\":{\"v\":3,\"next\":{"
                      "\"v\":4}}}}"),
                TEXTS("{\"next\":{\"v\":2}}", "{\"v\":1,\"next\":null}"));
    /* "#" and definitions */
    check_texts(
        "{\"type\":\"array\",\"maxItems\":2,\"items\":{\"$ref\":\"#\"}}", true,
        TEXTS("[]", "[[],[[]]]"), TEXTS("[1]", "[[],[],[]]"));
    check_texts("{\"definitions\":{\"b\":{\"type\":\"boolean\"}},"
                "\"type\":\"object\",\"properties\":{\"x\":{\"$ref\":"
                "\"#/definitions/b\"},\"y\":{\"$ref\":\"#/definitions/b\"}},"
                "\"required\":[\"x\",\"y\"]}",
                true, TEXTS("{\"x\":true,\"y\":false}"), TEXTS("{\"x\":true}"));
    /* JSON pointer escapes in a name */
    check_texts("{\"$defs\":{\"a/b~c\":{\"const\":7}},"
                "\"$ref\":\"#/$defs/a~1b~0c\"}",
                true, TEXTS("7"), TEXTS("8"));
}
END_TEST

START_TEST(test_recursion_depth_is_bounded)
{
    /* 7 nested lists from the root: the 7th level is past max_recursion */
    const char *s = "{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}}";
    check_texts(s, true, TEXTS("[[[[[[[]]]]]]]"), TEXTS("[[[[[[[[]]]]]]]]"));
}
END_TEST

START_TEST(test_annotations_and_ignored_keywords)
{
    check_texts("{\"type\":\"integer\",\"title\":\"t\",\"description\":\"d\","
                "\"default\":1,\"examples\":[1],\"$comment\":\"c\","
                "\"deprecated\":false,\"readOnly\":true,\"writeOnly\":false,"
                "\"$schema\":\"https://json-schema.org/draft/2020-12/schema\","
                "\"$id\":\"x\"}",
                true, TEXTS("1"), TEXTS("\"1\""));
    check_texts("{\"type\":\"integer\",\"multipleOf\":2,\"x-vendor\":1}", false,
                TEXTS("1", "2"), TEXTS("\"1\""));
    /* no type: what its keywords are about */
    check_texts("{\"properties\":{\"a\":{\"const\":1}},\"required\":[\"a\"]}",
                true, TEXTS("{\"a\":1}"), TEXTS("1", "\"s\""));
    check_texts("{}", true, TEXTS("1", "\"s\"", "[]", "{\"a\":null}", "true"),
                TEXTS("", "tru"));
    check_texts("true", true, TEXTS("null"), TEXTS("nul"));
}
END_TEST

START_TEST(test_json_value_grammars)
{
    json_schema_options opt;
    json_schema_options_default(&opt);
    opt.max_value_depth = 2;
    gpt2d_buf out = GPT2D_BUF_INIT;
    json_schema_error err;
    ck_assert_int_eq(json_value_gbnf(true, &opt, "obj", &out, &err), 0);
    ck_assert_int_eq(json_value_gbnf(false, &opt, "any", &out, &err), 0);
    gm_grammar *g = gm_parse((const char *)out.data, out.len);
    /* at most two levels of non-empty containers */
    ck_assert(gm_accepts(g, "obj", "{\"a\":[1,{}]}"));
    ck_assert(!gm_accepts(g, "obj", "{\"a\":[1,{\"b\":null}]}"));
    ck_assert(gm_accepts(g, "obj", "{}"));
    ck_assert(!gm_accepts(g, "obj", "[1]"));
    ck_assert(!gm_accepts(g, "obj", "1"));
    ck_assert(gm_accepts(g, "any", "1"));
    ck_assert(gm_accepts(g, "any", "[[[]]]"));
    ck_assert(!gm_accepts(g, "any", "[[[1]]]")); /* nested too deep */
    ck_assert(gm_accepts(g, "any", "\"s\""));
    gm_free(g);
    ck_assert_int_eq(json_value_gbnf(true, &opt, "bad name", &out, &err), -1);
    ck_assert_str_eq(err.message, "the rule name 'bad name' is not "
                                  "[A-Za-z0-9-]+");
    buf_free(&out);
}
END_TEST

START_TEST(test_two_schemas_share_one_grammar)
{
    json_t *a = parse("{\"type\":\"object\",\"properties\":{\"x\":{\"type\":"
                      "\"string\"}},\"required\":[\"x\"]}");
    json_t *b = parse("{\"type\":\"array\",\"items\":{\"type\":\"string\"}}");
    json_schema_options opt;
    json_schema_options_default(&opt);
    gpt2d_buf out = GPT2D_BUF_INIT;
    json_schema_error err;
    ck_assert_int_eq(json_schema_gbnf(a, &opt, "tool-0", &out, &err), 0);
    ck_assert_int_eq(json_schema_gbnf(b, &opt, "tool-1", &out, &err), 0);
    ck_assert_int_eq(buf_append(&out, "root ::= tool-0 | tool-1\n", 25), 0);
    gm_grammar *g = gm_parse((const char *)out.data, out.len);
    ck_assert(gm_accepts(g, "root", "{\"x\":\"a\"}"));
    ck_assert(gm_accepts(g, "root", "[\"a\",\"b\"]"));
    ck_assert(!gm_accepts(g, "root", "[1]"));
    gm_free(g);
    buf_free(&out);
    json_decref(a);
    json_decref(b);
}
END_TEST

START_TEST(test_refusals_name_param_and_reason)
{
    check_refusal("{\"type\":\"object\",\"properties\":{\"age\":{\"type\":"
                  "\"int\"}}}",
                  true, BASE ".properties.age.type", "unknown type 'int'");
    check_refusal("{\"type\":[\"string\",3]}", true, BASE ".type[1]",
                  "unknown type");
    check_refusal("{\"type\":[]}", true, BASE ".type",
                  "type must be a type name or a non-empty array of them");
    check_refusal("{\"type\":\"integer\",\"multipleOf\":2}", true,
                  BASE ".multipleOf",
                  "the keyword 'multipleOf' is not supported");
    check_refusal("{\"oneOf\":[{\"type\":\"null\"}]}", true, BASE ".oneOf",
                  "oneOf is not supported in strict mode (use anyOf)");
    check_refusal("{\"type\":\"string\",\"maxLength\":-1}", true,
                  BASE ".maxLength",
                  "maxLength must be a non-negative integer");
    check_refusal("{\"type\":\"array\",\"minItems\":\"2\"}", true,
                  BASE ".minItems", "minItems must be a non-negative integer");
    check_refusal("{\"$ref\":5}", true, BASE ".$ref", "$ref must be a string");
    check_refusal(
        "{\"$ref\":\"#/$defs/a\",\"type\":\"string\",\"$defs\":{\"a\":"
        "{}}}",
        true, BASE ".type",
        "'type' beside $ref is not supported (move it into the "
        "referenced schema)");
    check_refusal("{\"$ref\":\"#/$defs/missing\"}", true, BASE ".$ref",
                  "$ref '#/$defs/missing' does not resolve (only local "
                  "references \"#\", \"#/$defs/NAME\", \"#/definitions/NAME\" "
                  "or other JSON pointers into this schema)");
    check_refusal("{\"$ref\":\"https://example.com/s.json\"}", true,
                  BASE ".$ref",
                  "$ref 'https://example.com/s.json' does not resolve (only "
                  "local references \"#\", \"#/$defs/NAME\", "
                  "\"#/definitions/NAME\" or other JSON pointers into this "
                  "schema)");
    check_refusal("{\"anyOf\":[]}", true, BASE ".anyOf",
                  "anyOf must be a non-empty array of schemas");
    check_refusal("{\"anyOf\":[{}],\"type\":\"object\"}", true, BASE ".type",
                  "'type' beside anyOf is not supported (move it into each "
                  "alternative)");
    check_refusal("{\"allOf\":[{},{}]}", true, BASE ".allOf",
                  "allOf with more than one schema is not supported");
    check_refusal("{\"type\":\"number\",\"maximum\":\"3\"}", true,
                  BASE ".maximum", "maximum must be a number");
    check_refusal("{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", true,
                  BASE ".pattern",
                  "backreferences (\\1) are not supported at offset 3");
    check_refusal("{\"type\":\"string\",\"pattern\":\"(?=a)\"}", true,
                  BASE ".pattern",
                  "lookahead ((?=...) are not supported at offset 0");
    check_refusal("{\"type\":\"string\",\"pattern\":7}", true, BASE ".pattern",
                  "pattern must be a string");
    check_refusal("{\"type\":\"string\",\"format\":7}", true, BASE ".format",
                  "format must be a string");
    check_refusal("{\"type\":\"string\",\"format\":\"uri\"}", true,
                  BASE ".format",
                  "the format 'uri' is not supported (date, time, date-time, "
                  "uuid, email, ipv4 are)");
    check_refusal("{\"type\":\"string\",\"format\":\"date\",\"pattern\":\"a\"}",
                  true, BASE ".pattern",
                  "pattern together with format is not supported");
    check_refusal("{\"type\":\"array\",\"items\":[{}]}", true, BASE ".items",
                  "items as an array (a tuple) is not supported");
    check_refusal("{\"type\":\"object\",\"properties\":[]}", true,
                  BASE ".properties", "properties must be an object");
    check_refusal("{\"type\":\"object\",\"required\":\"a\"}", true,
                  BASE ".required", "required must be an array of strings");
    check_refusal("{\"type\":\"object\",\"required\":[\"a\",1]}", true,
                  BASE ".required[1]", "required must list strings");
    check_refusal("{\"type\":\"object\",\"additionalProperties\":1}", true,
                  BASE ".additionalProperties",
                  "additionalProperties must be a boolean or a schema");
    check_refusal("{\"enum\":[\"a\"],\"items\":{}}", true, BASE ".items",
                  "'items' beside enum or const is not supported");
    check_refusal("{\"enum\":\"a\"}", true, BASE ".enum",
                  "enum must be an array");
    check_refusal("[]", true, BASE, "a schema must be an object or a boolean");
    check_refusal("{\"type\":\"object\",\"properties\":{\"a b\":3}}", true,
                  BASE ".properties[\"a b\"]",
                  "a schema must be an object or a boolean");
}
END_TEST

START_TEST(test_schemas_without_instances_are_refused)
{
    check_refusal("{\"type\":\"integer\",\"minimum\":5,\"maximum\":3}", true,
                  BASE ".minimum",
                  "no integer of at most 15 digits lies within the bounds");
    check_refusal("{\"type\":\"number\",\"minimum\":1e20}", true,
                  BASE ".minimum",
                  "no number of at most 15 digits lies within the bounds");
    check_refusal("{\"type\":\"integer\",\"exclusiveMaximum\":0,"
                  "\"exclusiveMinimum\":-1}",
                  true, BASE ".exclusiveMinimum",
                  "no integer of at most 15 digits lies within the bounds");
    check_refusal("{\"type\":\"string\",\"minLength\":5,\"maxLength\":3}", true,
                  BASE ".minLength", "minLength 5 is above maxLength 3");
    check_refusal("{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", true,
                  BASE ".minItems", "minItems 3 is above maxItems 2");
    check_refusal("{\"type\":\"array\",\"items\":false,\"minItems\":1}", true,
                  BASE ".items", "items is false");
    check_refusal("{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":"
                  "[\"a\",\"b\"],\"additionalProperties\":false}",
                  true, BASE ".required[1]",
                  "the required property 'b' is not in properties and "
                  "additionalProperties allows no other");
    check_refusal(
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":"
        "\"object\",\"properties\":{\"b\":false},\"required\":[\"b\"]}},"
        "\"required\":[\"a\"]}",
        true, BASE ".properties.a.properties.b", "the schema is false");
    check_refusal("{\"enum\":[1,\"x\"],\"type\":\"boolean\"}", true,
                  BASE ".enum",
                  "no value of enum satisfies the schema's other keywords");
    check_refusal("{\"type\":\"string\",\"pattern\":\"[^\\\\s\\\\S]\"}", true,
                  BASE ".pattern", "the pattern matches no string");
    check_refusal("{\"type\":\"string\",\"pattern\":\"^a{5}$\","
                  "\"maxLength\":3}",
                  true, BASE ".pattern",
                  "no string the pattern allows has a length within "
                  "minLength and maxLength");
    check_refusal("{\"anyOf\":[{\"type\":\"integer\",\"minimum\":2,\"maximum\":"
                  "1},false]}",
                  true, BASE ".anyOf[1]", "the schema is false");
    check_refusal("false", true, BASE, "the schema is false");
    /* only infinite instances: the recursion cannot stop */
    check_refusal(
        "{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{"
        "\"next\":{\"$ref\":\"#/$defs/n\"}},\"required\":[\"next\"]}},"
        "\"$ref\":\"#/$defs/n\"}",
        true, BASE ".$defs.n.properties.next.$ref",
        "a recursive $ref nested deeper than 6 levels (the schema "
        "has only instances deeper than that)");
    check_refusal("{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"$ref\":"
                  "\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}",
                  true, BASE ".$defs.b.$ref",
                  "a recursive $ref nested deeper than 6 levels (the schema "
                  "has only instances deeper than that)");
}
END_TEST

START_TEST(test_budgets)
{
    /* nesting deeper than max_depth */
    gpt2d_buf deep = GPT2D_BUF_INIT;
    for (int i = 0; i < 40; i++)
        ck_assert_int_eq(gbnf_puts(&deep, "{\"type\":\"array\",\"items\":"), 0);
    ck_assert_int_eq(gbnf_puts(&deep, "{}"), 0);
    for (int i = 0; i < 40; i++)
        ck_assert_int_eq(gbnf_puts(&deep, "}"), 0);
    ck_assert_int_eq(buf_append(&deep, "", 1), 0);
    json_t *schema = parse((const char *)deep.data);
    json_schema_options opt;
    json_schema_options_default(&opt);
    gpt2d_buf out = GPT2D_BUF_INIT;
    json_schema_error err;
    ck_assert_int_eq(json_schema_grammar(schema, &opt, &out, &err), -1);
    ck_assert_str_eq(err.message, "the schema is nested deeper than 32 levels");
    ck_assert_uint_eq(strlen(err.param), strlen("schema") + 32 * 6);
    json_decref(schema);
    buf_free(&deep);
    /* a grammar past max_bytes */
    schema = parse("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":"
                   "\"number\",\"minimum\":0.123456789,\"maximum\":"
                   "987654321.5}}}");
    opt.max_bytes = 300;
    ck_assert_int_eq(json_schema_grammar(schema, &opt, &out, &err), -1);
    ck_assert_str_eq(err.message,
                     "the schema's grammar is larger than 300 bytes");
    ck_assert_uint_eq(out.len, 0);
    json_decref(schema);
    buf_free(&out);
}
END_TEST

/* Shared definitions are compiled once, however often they are used. */
START_TEST(test_shared_definitions_stay_small)
{
    gpt2d_buf s = GPT2D_BUF_INIT;
    ck_assert_int_eq(gbnf_puts(&s, "{\"$defs\":{\"big\":{\"type\":\"object\","
                                   "\"properties\":{"),
                     0);
    for (int i = 0; i < 30; i++)
        ck_assert_int_eq(gbnf_printf(&s,
                                     "%s\"p%d\":{\"type\":\"string\","
                                     "\"format\":\"date-time\"}",
                                     i ? "," : "", i),
                         0);
    ck_assert_int_eq(gbnf_puts(&s, "}}},\"type\":\"object\","
                                   "\"properties\":{"),
                     0);
    for (int i = 0; i < 50; i++)
        ck_assert_int_eq(gbnf_printf(&s,
                                     "%s\"u%d\":{\"$ref\":"
                                     "\"#/$defs/big\"}",
                                     i ? "," : "", i),
                         0);
    ck_assert_int_eq(gbnf_puts(&s, "}}"), 0);
    ck_assert_int_eq(buf_append(&s, "", 1), 0);
    json_t *schema = parse((const char *)s.data);
    json_schema_options opt;
    json_schema_options_default(&opt);
    gpt2d_buf out = GPT2D_BUF_INIT;
    json_schema_error err;
    ck_assert_int_eq(json_schema_grammar(schema, &opt, &out, &err), 0);
    /* one definition's worth of date-times, not fifty */
    ck_assert_uint_lt(out.len, 64 * 1024);
    json_decref(schema);
    buf_free(&s);
    buf_free(&out);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("json_schema");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_string_spelling_is_canonical);
    tcase_add_test(tc, test_string_lengths_count_characters);
    tcase_add_test(tc, test_integer_bounds_are_exact);
    tcase_add_test(tc, test_number_bounds_are_exact_decimals);
    tcase_add_test(tc, test_boolean_null_and_type_lists);
    tcase_add_test(tc, test_enum_and_const);
    tcase_add_test(tc, test_any_of_one_of_all_of);
    tcase_add_test(tc, test_object_members_in_schema_order);
    tcase_add_test(tc, test_object_required_and_additional_properties);
    tcase_add_test(tc, test_array_items_and_counts);
    tcase_add_test(tc, test_pattern_is_a_search);
    tcase_add_test(tc, test_formats);
    tcase_add_test(tc, test_refs_and_recursion);
    tcase_add_test(tc, test_recursion_depth_is_bounded);
    tcase_add_test(tc, test_annotations_and_ignored_keywords);
    tcase_add_test(tc, test_json_value_grammars);
    tcase_add_test(tc, test_two_schemas_share_one_grammar);
    tcase_add_test(tc, test_refusals_name_param_and_reason);
    tcase_add_test(tc, test_schemas_without_instances_are_refused);
    tcase_add_test(tc, test_budgets);
    tcase_add_test(tc, test_shared_definitions_stay_small);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
