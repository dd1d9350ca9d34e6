/* Reasoning in model output: the part of a chat reply that a reasoning
 * model writes before its answer, returned as OpenAI-style
 * `reasoning_content` (llama-server's and vLLM's field) apart from
 * `content`. Pure functions; the output parsed is untrusted.
 *
 * Formats, detected from the chat template's text:
 *   THINK    <think>REASONING</think>ANSWER (Qwen3, QwQ, DeepSeek-R1 and
 *            its distills, SmolLM3, Ministral 3 Reasoning, ...). When the
 *            rendered prompt already ends with <think> (the template opens
 *            the block itself, as DeepSeek-R1's does), the output starts
 *            inside it. A block never closed (the reply was cut short) is
 *            all reasoning. The reasoning is trimmed of surrounding
 *            whitespace, the answer of its leading whitespace.
 *   THINK_BRACKET  [THINK]REASONING[/THINK]ANSWER, as THINK (Ministral 3
 *            Reasoning, Magistral; the markers are control tokens there,
 *            which the server keeps as text for the split:
 *            reasoning_markers)
 *   HARMONY  gpt-oss's messages: [<|start|>assistant]<|channel|>CHANNEL
 *            [ to=RECIPIENT][ <|constrain|>json]<|message|>BODY, each
 *            ended by <|end|>, <|return|>, <|call|>, the next message or
 *            the end of the output. Channel "analysis" is reasoning; a
 *            message to "functions.NAME" is a call of NAME with BODY as
 *            its arguments; any other message ("final", a "commentary"
 *            preamble) is content. Text outside any message is content,
 *            unless it is only whitespace.
 *   RECIPIENTS functionary v3.2's replies (not reasoning, but split the
 *            same way): the prompt ends with ">>>", and the reply is
 *            messages RECIPIENT\nBODY joined by ">>>". Recipient "all"
 *            is content (its trailing whitespace trimmed); any other
 *            name is a call of it with BODY as its arguments (content,
 *            as the raw body, when that is no JSON object). A reply
 *            whose first line is no recipient (not "all" nor a function
 *            name, after any leading blanks) is content, whole. Applied whatever reasoning_format
 *            says: the framing is never the answer.
 *
 * Streaming: reasoning_split on a growing output (final false) returns
 * only what no later text can change: its reasoning and content are
 * prefixes of those of every longer output that starts with it, and of
 * the finished one. A tail that may still become a marker is held back,
 * as are calls (they come with the finished output). */
#ifndef STRATA_SERVE_REASONING_H
#define STRATA_SERVE_REASONING_H

#include "serve/tool_calls.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum reasoning_format {
    REASONING_NONE,    /* no reasoning syntax: all output is content */
    REASONING_THINK,
    REASONING_HARMONY,
    REASONING_RECIPIENTS,
    REASONING_THINK_BRACKET,
} reasoning_format;

/* The reasoning syntax of the model whose chat template is tmpl
 * (NUL-terminated; NULL: ChatML, none). */
reasoning_format reasoning_detect(const char *tmpl);

/* The marker texts format f splits on ([n]; NULL when none): a server
 * keeps those that are control tokens of its vocabulary in the text it
 * detokenizes (textgen_keep), or the split would never see them. */
const char *const *reasoning_markers(reasoning_format f, size_t *n);

/* Whether a rendered prompt[0..n) leaves the model inside a reasoning
 * block (it ends with <think> and optional whitespace). */
bool reasoning_prompt_open(const char *prompt, size_t n);
/* Whether it ends with a THINK block closed (</think> and optional
 * whitespace: the template's way of turning reasoning off). */
bool reasoning_prompt_closed(const char *prompt, size_t n);

/* The grammar of a THINK reply whose answer must match answer (GBNF the
 * server wrote: a JSON Schema's or a forced call's, start rule `root`):
 * the reasoning block, then up to 8 blanks, then the answer. open: the
 * prompt left the model inside the block, so the output starts with its
 * text and must close it; otherwise the block ("<think>" ... "</think>")
 * is optional (a prompt that closed the block itself wants none: the
 * caller keeps the answer's grammar as it is). The block's text is anything without "</think>" (the split
 * ends it at the first one). *out malloc'd; 0, or -1 when memory ran out. */
int reasoning_grammar(const char *answer, bool open, char **out);

typedef struct reasoning_parts {
    char *reasoning; /* malloc'd, NUL-terminated */
    size_t n_reasoning;
    char *content;   /* malloc'd, NUL-terminated */
    size_t n_content;
    tool_call *calls; /* HARMONY, RECIPIENTS, final only: messages to functions (name,
                         compact JSON arguments), malloc'd */
    size_t n_calls;
} reasoning_parts;

/* Splits output text[0..n) of format f (open: the prompt left the model
 * inside a THINK block) into reasoning, content and (HARMONY, RECIPIENTS)
 * calls; with
 * final false, only what is settled (above). A call whose arguments are
 * not a JSON object is content, as its raw body. NONE gives the whole text
 * as content. 0, or -1 when memory ran out. Free with reasoning_parts_free. */
int reasoning_split(reasoning_format f, bool open, const char *text, size_t n, bool final,
                    reasoning_parts *out);
void reasoning_parts_free(reasoning_parts *p);

#endif
