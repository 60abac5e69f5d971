/* test_server_replies.c: the server's memory of recent chat replies
 * (src/server/replies.c): which remembered prompt + reply covers a text's
 * start, the tokens it gives, the longest winning, the oldest entry going
 * when full. Expected values are written out by hand. */
#include <stdlib.h>
#include <string.h>

#include "server/replies.h"
#include "test.h"

static size_t match(reply_memory *m, const char *text, int32_t **t, size_t *n) {
    return reply_memory_match(m, text, strlen(text), 2, t, n);
}

int main(void) {
    reply_memory *m = reply_memory_create(2);
    CHECK(m != NULL);
    int32_t *t = NULL;
    size_t n = 99;
    CHECK_EQ_INT((int)match(m, "anything", &t, &n), 0);
    CHECK(t == NULL && n == 0);

    const int32_t p1[] = {1, 10, 11}, g1[] = {20, 21};
    reply_memory_add(m, "<u>hi</u><a>", 12, p1, 3, "hello", 5, g1, 2);
    /* a later turn: the first prompt, the reply, then more */
    CHECK_EQ_INT((int)match(m, "<u>hi</u><a>hello</a><u>again</u><a>", &t, &n), 17);
    CHECK_EQ_INT((int)n, 5);
    const int32_t want1[] = {1, 10, 11, 20, 21};
    CHECK(t && !memcmp(t, want1, sizeof want1));
    free(t);
    /* the reply edited by the client: no match */
    CHECK_EQ_INT((int)match(m, "<u>hi</u><a>hellO</a>", &t, &n), 0);
    CHECK(t == NULL);
    /* shorter than the remembered text: no match */
    CHECK_EQ_INT((int)match(m, "<u>hi</u><a>hel", &t, &n), 0);

    /* a second, longer conversation that extends the first: it wins */
    const int32_t p2[] = {1, 10, 11, 20, 21, 12, 13}, g2[] = {30};
    reply_memory_add(m, "<u>hi</u><a>hello</a><u>x</u><a>", 32, p2, 7, "yes", 3, g2, 1);
    CHECK_EQ_INT((int)match(m, "<u>hi</u><a>hello</a><u>x</u><a>yes</a>", &t, &n), 35);
    CHECK_EQ_INT((int)n, 8);
    CHECK(t && t[7] == 30);
    free(t);
    /* the first still serves a branch of it */
    CHECK_EQ_INT((int)match(m, "<u>hi</u><a>hello</a><u>y</u>", &t, &n), 17);
    free(t);

    /* full (2 entries): a third drops the oldest, the first */
    const int32_t p3[] = {2}, g3[] = {40, 41};
    reply_memory_add(m, "<s>", 3, p3, 1, "", 0, g3, 0); /* an empty reply: the prompt alone */
    CHECK_EQ_INT((int)match(m, "<u>hi</u><a>hello</a><u>y</u>", &t, &n), 0);
    CHECK_EQ_INT((int)match(m, "<s>z", &t, &n), 3);
    CHECK_EQ_INT((int)n, 1);
    free(t);
    CHECK_EQ_INT((int)match(m, "<u>hi</u><a>hello</a><u>x</u><a>yes!", &t, &n), 35);
    free(t);
    /* nothing is kept of an empty prompt */
    reply_memory_add(m, "", 0, p3, 0, "a", 1, g3, 1);
    CHECK_EQ_INT((int)match(m, "a", &t, &n), 0);
    reply_memory_free(m);
    reply_memory_free(NULL);
    return test_finish();
}
