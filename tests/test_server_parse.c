/* test_server_parse.c: the request parser of tela serve (src/server/
 * api_parse.c) on hand-written bodies: UTF-8 checking and repair against
 * RFC 3629's rules, the defaults of the OpenAI API reference (temperature
 * 1, top_p 1, n 1, completions' max_tokens 16), every field's type and
 * range, the field named in each error, and the byte offsets of JSON
 * errors. */
#include <string.h>

#include "server/api_parse.h"
#include "test.h"

static int chat(const char *body, int32_t n_vocab, api_chat_request *r, api_error *e) {
    memset(e, 0, sizeof *e);
    return api_parse_chat(body, strlen(body), n_vocab, r, e);
}

static int completion(const char *body, int32_t n_vocab, api_completion_request *r, api_error *e) {
    memset(e, 0, sizeof *e);
    return api_parse_completion(body, strlen(body), n_vocab, r, e);
}

/* The chat body fails with status 400 naming param. */
static void chat_fails(const char *body, const char *param) {
    api_chat_request r;
    api_error e;
    int rc = chat(body, 4096, &r, &e);
    CHECK_MSG(rc == -1, "%s was accepted", body);
    if (rc == -1) {
        CHECK_EQ_INT(e.status, 400);
        CHECK_MSG(!strcmp(e.param, param), "%s: param '%s', expected '%s' (%s)", body, e.param, param, e.message);
        CHECK(!strcmp(e.type, "invalid_request_error"));
        CHECK(e.message[0] != '\0');
    }
    api_chat_request_free(&r);
}

static void completion_fails(const char *body, int32_t n_vocab, const char *param) {
    api_completion_request r;
    api_error e;
    int rc = completion(body, n_vocab, &r, &e);
    CHECK_MSG(rc == -1, "%s was accepted", body);
    if (rc == -1) {
        CHECK_EQ_INT(e.status, 400);
        CHECK_MSG(!strcmp(e.param, param), "%s: param '%s', expected '%s' (%s)", body, e.param, param, e.message);
    }
    api_completion_request_free(&r);
}

static void test_utf8(void) {
    struct { const char *s; size_t n, ok; } cases[] = {
        {"abc", 3, 3},
        {"\xc3\xa9", 2, 2},                  /* U+00E9 */
        {"\xe2\x82\xac", 3, 3},              /* U+20AC */
        {"\xf0\x9f\x98\x80", 4, 4},          /* U+1F600 */
        {"\xf4\x8f\xbf\xbf", 4, 4},          /* U+10FFFF, the last code point */
        {"\xc0\xaf", 2, 0},                  /* '/' overlong in two bytes */
        {"\xc1\xbf", 2, 0},                  /* overlong */
        {"\xe0\x80\xaf", 3, 0},              /* overlong in three */
        {"\xf0\x80\x80\xaf", 4, 0},          /* overlong in four */
        {"\xed\xa0\x80", 3, 0},              /* U+D800, a surrogate */
        {"\xed\x9f\xbf", 3, 3},              /* U+D7FF, just below them */
        {"\xf4\x90\x80\x80", 4, 0},          /* U+110000 */
        {"\xf5\x80\x80\x80", 4, 0},
        {"\x80", 1, 0},                      /* a lone continuation byte */
        {"\xff", 1, 0},
        {"a\xe2\x82", 3, 1},                 /* cut short */
        {"ab\xc3(", 4, 2},                   /* no continuation */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK_MSG(api_utf8_check(cases[i].s, cases[i].n) == cases[i].ok, "case %zu: %zu", i,
                  api_utf8_check(cases[i].s, cases[i].n));
    char out[64];
    CHECK_EQ_INT(api_utf8_sanitize("a\xff" "b", 3, out), 5);
    CHECK(!strcmp(out, "a\xef\xbf\xbd" "b"));
    /* each bad byte of a cut-short sequence becomes one U+FFFD */
    CHECK_EQ_INT(api_utf8_sanitize("\xe2\x82", 2, out), 6);
    CHECK(!strcmp(out, "\xef\xbf\xbd\xef\xbf\xbd"));
    CHECK_EQ_INT(api_utf8_sanitize("\xc3\xa9", 2, out), 2);
    CHECK(!strcmp(out, "\xc3\xa9"));
}

static void test_chat_defaults(void) {
    api_chat_request r;
    api_error e;
    CHECK_EQ_INT(chat("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", 4096, &r, &e), 0);
    CHECK_EQ_INT(r.n_messages, 1);
    CHECK_EQ_INT(r.messages[0].role, API_ROLE_USER);
    CHECK(!strcmp(r.messages[0].content, "hi"));
    CHECK(r.model == NULL);
    CHECK_NEAR(r.gen.temperature, 1.0, 0);
    CHECK_NEAR(r.gen.top_p, 1.0, 0);
    CHECK_NEAR(r.gen.min_p, 0.0, 0);
    CHECK_EQ_INT(r.gen.top_k, 0);
    CHECK_EQ_INT(r.gen.n, 1);
    CHECK_EQ_INT(r.gen.max_tokens, 0); /* chat: until the end of generation */
    CHECK_EQ_INT(r.gen.logprobs, -1);
    CHECK_EQ_INT(r.gen.stream, 0);
    CHECK_EQ_INT(r.gen.has_seed, 0);
    CHECK_EQ_INT(r.gen.n_stop, 0);
    CHECK(r.gen.stop == NULL);
    CHECK_EQ_INT(r.gen.n_logit_bias, 0);
    api_chat_request_free(&r);
}

static void test_chat_fields(void) {
    api_chat_request r;
    api_error e;
    const char *body =
        "{\"model\":\"m\",\"messages\":[{\"role\":\"developer\",\"content\":\"sys\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"bc\"}],\"name\":\"x\"},"
        "{\"role\":\"assistant\",\"content\":\"ok\"},{\"role\":\"system\",\"content\":\"\"}],"
        "\"temperature\":0,\"top_p\":0.5,\"top_k\":40,\"min_p\":0.05,\"presence_penalty\":-2,\"frequency_penalty\":2,"
        "\"seed\":-1,\"stop\":[\"x\",\"yz\"],\"logit_bias\":{\"5\":-100,\"7\":2.5},\"n\":3,\"stream\":true,"
        "\"stream_options\":{\"include_usage\":true},\"max_completion_tokens\":7,\"logprobs\":true,\"top_logprobs\":3,"
        "\"user\":\"u\",\"store\":false,\"metadata\":{},\"tools\":[],\"tool_choice\":\"none\","
        "\"response_format\":{\"type\":\"text\"},\"ignore_eos\":true,\"frequency_penalty\":null}";
    CHECK_EQ_INT(chat(body, 10, &r, &e), 0);
    if (r.n_messages == 4) {
        CHECK_EQ_INT(r.messages[0].role, API_ROLE_SYSTEM);
        CHECK_EQ_INT(r.messages[1].role, API_ROLE_USER);
        CHECK(!strcmp(r.messages[1].content, "abc"));
        CHECK_EQ_INT(r.messages[2].role, API_ROLE_ASSISTANT);
        CHECK(!strcmp(r.messages[3].content, ""));
    }
    CHECK(r.model && !strcmp(r.model, "m"));
    CHECK_NEAR(r.gen.temperature, 0.0, 0);
    CHECK_NEAR(r.gen.top_p, 0.5, 0);
    CHECK_EQ_INT(r.gen.top_k, 40);
    CHECK_NEAR(r.gen.min_p, 0.05, 0);
    CHECK_NEAR(r.gen.presence_penalty, -2.0, 0);
    CHECK_NEAR(r.gen.frequency_penalty, 2.0, 0); /* the later null leaves it */
    CHECK_EQ_INT(r.gen.has_seed, 1);
    CHECK(r.gen.seed == UINT64_MAX); /* -1 wraps */
    CHECK_EQ_INT(r.gen.n_stop, 2);
    if (r.gen.n_stop == 2) {
        CHECK(!strcmp(r.gen.stop[0], "x"));
        CHECK(!strcmp(r.gen.stop[1], "yz"));
        CHECK(r.gen.stop[2] == NULL);
    }
    CHECK_EQ_INT(r.gen.n_logit_bias, 2);
    if (r.gen.n_logit_bias == 2) {
        CHECK_EQ_INT(r.gen.logit_bias[0].token, 5);
        CHECK_NEAR(r.gen.logit_bias[0].bias, -100.0, 0);
        CHECK_EQ_INT(r.gen.logit_bias[1].token, 7);
        CHECK_NEAR(r.gen.logit_bias[1].bias, 2.5, 0);
    }
    CHECK_EQ_INT(r.gen.n, 3);
    CHECK_EQ_INT(r.gen.stream, 1);
    CHECK_EQ_INT(r.gen.include_usage, 1);
    CHECK_EQ_INT(r.gen.max_tokens, 7);
    CHECK_EQ_INT(r.gen.logprobs, 3);
    CHECK_EQ_INT(r.gen.ignore_eos, 1);
    api_chat_request_free(&r);

    CHECK_EQ_INT(chat("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"logprobs\":true,\"seed\":42,"
                      "\"stop\":\"end\",\"max_tokens\":5,\"max_completion_tokens\":5,\"temperature\":null}",
                      0, &r, &e), 0);
    CHECK_EQ_INT(r.gen.logprobs, 0); /* the chosen token's, no alternatives */
    CHECK(r.gen.seed == 42);
    CHECK_EQ_INT(r.gen.n_stop, 1);
    CHECK(r.gen.n_stop == 1 && !strcmp(r.gen.stop[0], "end") && r.gen.stop[1] == NULL);
    CHECK_EQ_INT(r.gen.max_tokens, 5);
    CHECK_NEAR(r.gen.temperature, 1.0, 0);
    api_chat_request_free(&r);
    /* the bounds themselves are allowed */
    CHECK_EQ_INT(chat("{\"messages\":[{\"role\":\"user\",\"content\":\"\"}],\"temperature\":2,\"top_p\":0,\"n\":128,"
                      "\"logprobs\":true,\"top_logprobs\":20,\"max_tokens\":2147483647}", 0, &r, &e), 0);
    CHECK_EQ_INT(r.gen.n, 128);
    CHECK_EQ_INT(r.gen.logprobs, 20);
    CHECK_EQ_INT(r.gen.max_tokens, INT32_MAX);
    api_chat_request_free(&r);
}

static void test_chat_errors(void) {
    const char *m = "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]";
    char b[512];
#define WITH(extra, param) (snprintf(b, sizeof b, "{%s,%s}", m, extra), chat_fails(b, param))
    WITH("\"temperature\":2.000001", "temperature");
    WITH("\"temperature\":-0.1", "temperature");
    WITH("\"temperature\":\"1\"", "temperature");
    WITH("\"top_p\":1.5", "top_p");
    WITH("\"min_p\":-1", "min_p");
    WITH("\"top_k\":-1", "top_k");
    WITH("\"top_k\":2.5", "top_k");
    WITH("\"presence_penalty\":3", "presence_penalty");
    WITH("\"max_tokens\":0", "max_tokens");
    WITH("\"max_tokens\":2147483648", "max_tokens");
    WITH("\"max_tokens\":1e400", "max_tokens"); /* cJSON reads infinity */
    WITH("\"max_tokens\":5,\"max_completion_tokens\":6", "max_completion_tokens");
    WITH("\"n\":0", "n");
    WITH("\"n\":129", "n");
    WITH("\"seed\":1.5", "seed");
    WITH("\"seed\":1e19", "seed");
    WITH("\"stream\":1", "stream");
    WITH("\"stream_options\":{\"include_usage\":true}", "stream_options"); /* without stream */
    WITH("\"stream\":true,\"stream_options\":{\"other\":1}", "stream_options.other");
    WITH("\"stop\":[\"a\",2]", "stop[1]");
    WITH("\"stop\":\"\"", "stop");
    WITH("\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\","
         "\"17\"]", "stop");
    WITH("\"stop\":{}", "stop");
    WITH("\"logit_bias\":{\"4096\":1}", "logit_bias.4096");
    WITH("\"logit_bias\":{\"-1\":1}", "logit_bias.-1");
    WITH("\"logit_bias\":{\"1\":101}", "logit_bias.1");
    WITH("\"logit_bias\":{\"1\":\"x\"}", "logit_bias.1");
    WITH("\"logit_bias\":[1]", "logit_bias");
    WITH("\"logprobs\":1", "logprobs");
    WITH("\"top_logprobs\":1", "top_logprobs");
    WITH("\"logprobs\":true,\"top_logprobs\":21", "top_logprobs");
    WITH("\"frobnicate\":1", "frobnicate");
    WITH("\"tools\":[{\"type\":\"function\"}]", "tools");
    WITH("\"tool_choice\":\"auto\"", "tool_choice");
    WITH("\"response_format\":{\"type\":\"json_object\"}", "response_format");
    WITH("\"modalities\":[\"text\",\"audio\"]", "modalities");
    WITH("\"audio\":{}", "audio");
    WITH("\"model\":5", "model");
    WITH("\"user\":5", "user");
#undef WITH
    chat_fails("{}", "messages");
    chat_fails("{\"messages\":[]}", "messages");
    chat_fails("{\"messages\":\"hi\"}", "messages");
    chat_fails("{\"messages\":[\"hi\"]}", "messages[0]");
    chat_fails("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"content\":\"b\"}]}", "messages[1].role");
    chat_fails("{\"messages\":[{\"role\":\"user\"}]}", "messages[0].content");
    chat_fails("{\"messages\":[{\"role\":\"user\",\"content\":null}]}", "messages[0].content");
    chat_fails("{\"messages\":[{\"role\":\"user\",\"content\":7}]}", "messages[0].content");
    chat_fails("{\"messages\":[{\"role\":\"wizard\",\"content\":\"a\"}]}", "messages[0].role");
    chat_fails("{\"messages\":[{\"role\":\"tool\",\"content\":\"a\"}]}", "messages[0].role");
    chat_fails("{\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"tool_calls\":[{}]}]}", "messages[0].tool_calls");
    chat_fails("{\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"extra\":1}]}", "messages[0].extra");
    chat_fails("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]}",
               "messages[0].content[0].type");
    chat_fails("{\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"a\"}]}]}", "messages[0].content[0].type");
    chat_fails("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}", "messages[0].content[0].text");
    chat_fails("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":1}]}]}",
               "messages[0].content[0].text");
    chat_fails("{\"messages\":[{\"role\":\"user\",\"content\":[\"a\"]}]}", "messages[0].content[0]");
    chat_fails("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\",\"x\":1}]}]}",
               "messages[0].content[0].x");
}

/* JSON errors carry the byte offset; these are where the text first goes wrong. */
static void test_json_errors(void) {
    api_chat_request r;
    api_error e;
    CHECK_EQ_INT(chat("{\"a\" 1}", 0, &r, &e), -1);  /* a ':' was due at byte 5 */
    CHECK_MSG(strstr(e.message, "at byte 5 of 7") != NULL, "%s", e.message);
    CHECK(!strcmp(e.code, "invalid_json"));
    CHECK(e.param[0] == '\0');
    CHECK_EQ_INT(chat("{\"messages\": [", 0, &r, &e), -1);
    CHECK_MSG(strstr(e.message, "ends early, at byte 14 of 14") != NULL, "%s", e.message);
    CHECK_EQ_INT(chat("{} x", 0, &r, &e), -1);       /* trailing text at byte 3 */
    CHECK_MSG(strstr(e.message, "at byte 3 of 4") != NULL, "%s", e.message);
    CHECK_EQ_INT(chat("", 0, &r, &e), -1);
    CHECK(strstr(e.message, "empty") != NULL);
    CHECK_EQ_INT(chat(" \n ", 0, &r, &e), -1);
    CHECK(strstr(e.message, "empty") != NULL);
    CHECK_EQ_INT(chat("[1]", 0, &r, &e), -1);
    CHECK(strstr(e.message, "JSON object") != NULL);
    CHECK_EQ_INT(chat("{\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}", 0, &r, &e), -1);
    CHECK_MSG(strstr(e.message, "at byte 40") != NULL, "%s", e.message); /* where the escape starts */
    /* "\\u0000" is a backslash and "u0000": allowed */
    CHECK_EQ_INT(chat("{\"messages\":[{\"role\":\"user\",\"content\":\"a\\\\u0000b\"}]}", 0, &r, &e), 0);
    CHECK(r.n_messages == 1 && !strcmp(r.messages[0].content, "a\\u0000b"));
    api_chat_request_free(&r);
    const char bad[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"\xc3(\"}]}";
    CHECK_EQ_INT(chat(bad, 0, &r, &e), -1);
    CHECK(!strcmp(e.code, "invalid_utf8"));
    CHECK_MSG(strstr(e.message, "at byte 39") != NULL, "%s", e.message); /* the 0xc3 after content":" */
    /* a NUL byte in the body (the length says where it ends, not the NUL) */
    const char nul[] = "{\"messages\":[]}\0";
    memset(&e, 0, sizeof e);
    CHECK_EQ_INT(api_parse_chat(nul, sizeof nul - 1, 0, &r, &e), -1);
    CHECK(strstr(e.message, "NUL") != NULL);
    /* nesting deeper than cJSON's limit (1000) fails cleanly */
    size_t depth = 1500;
    char *deep = malloc(2 * depth + 1);
    memset(deep, '[', depth);
    memset(deep + depth, ']', depth);
    deep[2 * depth] = '\0';
    CHECK_EQ_INT(chat(deep, 0, &r, &e), -1);
    CHECK(!strcmp(e.code, "invalid_json"));
    free(deep);
}

static void test_completions(void) {
    api_completion_request r;
    api_error e;
    CHECK_EQ_INT(completion("{\"prompt\":\"And God said\"}", 4096, &r, &e), 0);
    CHECK_EQ_INT(r.n_prompts, 1);
    CHECK(r.n_prompts == 1 && r.prompts[0].text && !strcmp(r.prompts[0].text, "And God said"));
    CHECK_EQ_INT(r.gen.max_tokens, 16); /* the completions API's default */
    CHECK_EQ_INT(r.gen.logprobs, -1);
    api_completion_request_free(&r);

    CHECK_EQ_INT(completion("{\"prompt\":[1,2,9],\"logprobs\":5,\"echo\":false,\"suffix\":\"\",\"best_of\":2,\"n\":2}", 10,
                            &r, &e), 0);
    CHECK_EQ_INT(r.n_prompts, 1);
    if (r.n_prompts == 1) {
        CHECK(r.prompts[0].text == NULL);
        CHECK_EQ_INT(r.prompts[0].n_tokens, 3);
        CHECK(r.prompts[0].n_tokens == 3 && r.prompts[0].tokens[0] == 1 && r.prompts[0].tokens[2] == 9);
    }
    CHECK_EQ_INT(r.gen.logprobs, 5);
    CHECK_EQ_INT(r.gen.n, 2);
    api_completion_request_free(&r);

    CHECK_EQ_INT(completion("{\"prompt\":[[1],[2,3]]}", 10, &r, &e), 0);
    CHECK_EQ_INT(r.n_prompts, 2);
    CHECK(r.n_prompts == 2 && r.prompts[1].n_tokens == 2 && r.prompts[1].tokens[1] == 3);
    api_completion_request_free(&r);
    CHECK_EQ_INT(completion("{\"prompt\":[\"a\",\"\"]}", 10, &r, &e), 0);
    CHECK(r.n_prompts == 2 && !strcmp(r.prompts[0].text, "a") && !strcmp(r.prompts[1].text, ""));
    api_completion_request_free(&r);

    completion_fails("{}", 10, "prompt");
    completion_fails("{\"prompt\":[]}", 10, "prompt");
    completion_fails("{\"prompt\":5}", 10, "prompt");
    completion_fails("{\"prompt\":[[]]}", 10, "prompt[0]");
    completion_fails("{\"prompt\":[1,\"a\"]}", 10, "prompt[1]");
    completion_fails("{\"prompt\":[\"a\",1]}", 10, "prompt[1]");
    completion_fails("{\"prompt\":[10]}", 10, "prompt[0]");
    completion_fails("{\"prompt\":[-1]}", 10, "prompt[0]");
    completion_fails("{\"prompt\":[[1],[2,1.5]]}", 10, "prompt[1][1]");
    completion_fails("{\"prompt\":\"a\",\"logprobs\":6}", 10, "logprobs");
    completion_fails("{\"prompt\":\"a\",\"logprobs\":true}", 10, "logprobs");
    completion_fails("{\"prompt\":\"a\",\"echo\":true}", 10, "echo");
    completion_fails("{\"prompt\":\"a\",\"suffix\":\"x\"}", 10, "suffix");
    completion_fails("{\"prompt\":\"a\",\"best_of\":3}", 10, "best_of");
    completion_fails("{\"prompt\":\"a\",\"max_completion_tokens\":3}", 10, "max_completion_tokens");
    completion_fails("{\"prompt\":\"a\",\"messages\":[]}", 10, "messages");
    completion_fails("{\"prompt\":[\"a\",\"b\",\"c\"],\"n\":43}", 10, "n"); /* 129 choices */
}

static void test_tokenize(void) {
    api_tokenize_request t;
    api_error e;
    const char *b = "{\"content\":\"x\"}";
    CHECK_EQ_INT(api_parse_tokenize(b, strlen(b), &t, &e), 0);
    CHECK(t.content && !strcmp(t.content, "x") && t.content_len == 1);
    CHECK_EQ_INT(t.add_special, 0);
    CHECK_EQ_INT(t.parse_special, 1);
    CHECK_EQ_INT(t.with_pieces, 0);
    api_tokenize_request_free(&t);
    b = "{\"content\":\"\",\"add_special\":true,\"parse_special\":false,\"with_pieces\":true}";
    CHECK_EQ_INT(api_parse_tokenize(b, strlen(b), &t, &e), 0);
    CHECK(t.add_special == 1 && t.parse_special == 0 && t.with_pieces == 1 && t.content_len == 0);
    api_tokenize_request_free(&t);
    b = "{\"add_special\":true}";
    CHECK_EQ_INT(api_parse_tokenize(b, strlen(b), &t, &e), -1);
    CHECK(!strcmp(e.param, "content"));
    b = "{\"content\":1}";
    CHECK_EQ_INT(api_parse_tokenize(b, strlen(b), &t, &e), -1);
    CHECK(!strcmp(e.param, "content"));

    api_detokenize_request d;
    b = "{\"tokens\":[]}";
    CHECK_EQ_INT(api_parse_detokenize(b, strlen(b), 4096, &d, &e), 0);
    CHECK_EQ_INT(d.n_tokens, 0);
    api_detokenize_request_free(&d);
    b = "{\"tokens\":[0,4095]}";
    CHECK_EQ_INT(api_parse_detokenize(b, strlen(b), 4096, &d, &e), 0);
    CHECK(d.n_tokens == 2 && d.tokens[1] == 4095);
    api_detokenize_request_free(&d);
    b = "{\"tokens\":[0,4096]}";
    CHECK_EQ_INT(api_parse_detokenize(b, strlen(b), 4096, &d, &e), -1);
    CHECK(!strcmp(e.param, "tokens[1]"));
    b = "{\"tokens\":\"1,2\"}";
    CHECK_EQ_INT(api_parse_detokenize(b, strlen(b), 4096, &d, &e), -1);
    CHECK(!strcmp(e.param, "tokens"));
}

int main(void) {
    test_utf8();
    test_chat_defaults();
    test_chat_fields();
    test_chat_errors();
    test_json_errors();
    test_completions();
    test_tokenize();
    return test_finish();
}
