/* The compiled form of a grammar, shared by the parser (grammar.c) and the
 * recognizer (grammar_state.c).
 *
 * Every rule is a list of alternatives; every alternative is a run of
 * elements in one flat array, ended by a GE_END element. Groups and
 * repetitions were rewritten into extra rules at compile time, so an
 * element is only a character set or a reference to a rule:
 *   x*      ->  R ::= x R | ""
 *   x+      ->  x R  (R as for x*)
 *   x?      ->  R ::= x | ""
 *   x{m,n}  ->  x ... x (m times) O(n-m), O(k) ::= x O(k-1) | "", O(1) ::= x | ""
 * Character sets are sorted, merged, inclusive code-point ranges (negated
 * classes are complemented at compile time). */
#ifndef STRATA_SAMPLE_GRAMMAR_INTERNAL_H
#define STRATA_SAMPLE_GRAMMAR_INTERNAL_H

#include "sample/grammar.h"

enum grammar_elem_type {
    GE_END = 0,  /* end of an alternative */
    GE_REF = 1,  /* a: rule id */
    GE_CHAR = 2, /* a: first range (index into ranges, in pairs), b: number of ranges */
};

typedef struct grammar_elem {
    uint32_t type, a, b;
} grammar_elem;

struct grammar {
    grammar_elem *elems; /* n_elems */
    uint32_t n_elems;
    uint32_t *ranges;    /* 2 * n_ranges: lo, hi inclusive */
    uint32_t n_ranges;
    uint32_t *alts;      /* n_alts: index of each alternative's first element */
    uint32_t n_alts;
    uint32_t *rule_alt0; /* n_rules: first alternative of each rule */
    uint32_t *rule_n_alts;
    uint32_t n_rules;
    uint32_t root;
};

/* Whether code point cp is in the set of element e (GE_CHAR). */
static inline bool grammar_elem_has(const grammar *g, const grammar_elem *e, uint32_t cp)
{
    const uint32_t *r = g->ranges + 2 * (size_t)e->a;
    /* sets are short in practice; a binary search for long ones */
    uint32_t lo = 0, hi = e->b;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (cp < r[2 * mid]) hi = mid;
        else if (cp > r[2 * mid + 1]) lo = mid + 1;
        else return true;
    }
    return false;
}

/* Whether the set of e meets [lo, hi]. */
static inline bool grammar_elem_meets(const grammar *g, const grammar_elem *e, uint32_t lo,
                                      uint32_t hi)
{
    const uint32_t *r = g->ranges + 2 * (size_t)e->a;
    for (uint32_t i = 0; i < e->b; i++) {
        if (r[2 * i] <= hi && r[2 * i + 1] >= lo) return true;
    }
    return false;
}

#endif
