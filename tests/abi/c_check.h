/* CHECK(cond, fmt, ...) for the pure C tests: reports the failing line and counts it in
 * `failures`, which each test's main() turns into its exit status. */
#ifndef KF_TESTS_ABI_C_CHECK_H
#define KF_TESTS_ABI_C_CHECK_H

#include <stdio.h>

static int failures = 0;

#define CHECK(cond, ...)                                      \
  do {                                                        \
    if (!(cond)) {                                            \
      fprintf(stderr, "%s:%d: FAILED: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                           \
      fputc('\n', stderr);                                    \
      ++failures;                                             \
    }                                                         \
  } while (0)

#endif /* KF_TESTS_ABI_C_CHECK_H */
