/* TEST_SANITIZED is 1 in AddressSanitizer builds (gcc or clang), else 0.
 * Such builds run many times slower, so tests thin their workloads there;
 * the normal build runs them in full. */
#ifndef STRATA_TESTS_SANITIZED_H
#define STRATA_TESTS_SANITIZED_H

#if defined(__SANITIZE_ADDRESS__)
#define TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_SANITIZED 1
#endif
#endif
#ifndef TEST_SANITIZED
#define TEST_SANITIZED 0
#endif

#endif
