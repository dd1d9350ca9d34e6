/* libFuzzer target for the tool-call parsers (src/serve/tool_calls.c),
 * which read model output: the first byte picks the format (modulo the
 * number of formats), the rest is the output. Checked on every input:
 *   - without a call, the content is the whole output, byte for byte;
 *   - with calls, each has a name and arguments that are a JSON object,
 *     and the content is no longer than the output;
 *   - the streamed text prefix of every prefix of the output is within it,
 *     and what a stream would have sent as content before the end (the
 *     largest of them) begins the final content.
 * The same output also goes through the reasoning split (src/serve/
 * reasoning.c; the first byte's high bits pick its format and whether
 * the prompt left the model inside <think>): its calls have names and
 * object arguments, and the settled parts of every prefix are prefixes
 * of the finished parts and grow with the prefix.
 * A crash, a sanitizer report or a failed check (a trap) is a finding. */
#include "serve/reasoning.h"
#include "serve/tool_calls.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok)
{
    if (!ok) __builtin_trap();
}

static int starts(const char *p, size_t np, const char *s, size_t ns)
{
    return np <= ns && memcmp(p, s, np) == 0;
}

static void check_reasoning(reasoning_format f, int open, const char *text, size_t n)
{
    reasoning_parts fin;
    if (reasoning_split(f, open, text, n, 1, &fin) != 0) return;
    check(fin.n_reasoning + fin.n_content <= n);
    for (size_t i = 0; i < fin.n_calls; i++) {
        check(fin.calls[i].name != NULL && fin.calls[i].name[0] != '\0');
        json_t *a = json_loads(fin.calls[i].arguments, 0, NULL);
        check(json_is_object(a));
        json_decref(a);
    }
    size_t last_r = 0, last_c = 0;
    for (size_t k = 0; k <= n && k <= 512; k++) {
        reasoning_parts p;
        if (reasoning_split(f, open, text, k, 0, &p) != 0) break;
        check(p.n_calls == 0);
        check(p.n_reasoning >= last_r && p.n_content >= last_c);
        check(starts(p.reasoning, p.n_reasoning, fin.reasoning, fin.n_reasoning));
        check(starts(p.content, p.n_content, fin.content, fin.n_content));
        last_r = p.n_reasoning;
        last_c = p.n_content;
        reasoning_parts_free(&p);
    }
    reasoning_parts_free(&fin);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    tool_format f = (tool_format)(data[0] % (TOOL_FORMAT_UNSUPPORTED + 1));
    const char *text = (const char *)data + 1;
    size_t n = size - 1;
    tool_parsed p;
    if (tool_calls_parse(f, text, n, &p) != 0) return 0; /* out of memory */
    if (p.n_calls == 0) {
        check(p.n_content == n && memcmp(p.content, text, n) == 0);
    } else {
        check(p.n_content <= n);
        for (size_t i = 0; i < p.n_calls; i++) {
            check(p.calls[i].name != NULL && p.calls[i].name[0] != '\0');
            json_t *a = json_loads(p.calls[i].arguments, 0, NULL);
            check(json_is_object(a));
            json_decref(a);
        }
    }
    size_t sent = 0;
    for (size_t k = 0; k <= n && k <= 4096; k++) {
        size_t safe = tool_calls_text_prefix(f, text, k);
        check(safe <= k);
        if (safe > sent) sent = safe;
    }
    if (n <= 4096) check(sent <= p.n_content && memcmp(p.content, text, sent) == 0);
    tool_parsed_free(&p);
    check_reasoning((reasoning_format)((data[0] >> 4) % (REASONING_THINK_BRACKET + 1)), (data[0] & 0x80) != 0,
                    text, n);
    return 0;
}
