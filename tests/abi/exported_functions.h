/* Tables the build generates from the public headers (see generate_function_table.cmake). */
#ifndef KF_TESTS_ABI_EXPORTED_FUNCTIONS_H
#define KF_TESTS_ABI_EXPORTED_FUNCTIONS_H

#include <stddef.h>

#include "kernel_fusion/kernel_fusion.h"

/* Any function pointer; converted back only for comparison. */
typedef void (*kf_any_fn)(void);

/* A function declared KF_API and the address the linker resolved for it. */
typedef struct kf_exported_function {
  const char* name;
  kf_any_fn address;
} kf_exported_function;

/* A member of kf_api_t and the exported function it must point to. */
typedef struct kf_api_member {
  const char* name; /* NULL ends the list */
  size_t offset;
  kf_any_fn function;
} kf_api_member;

extern const kf_exported_function kf_exported_functions[];
extern const size_t kf_exported_function_count;
/* How many KF_API tokens the headers hold (outside comments and #define lines). */
extern const size_t kf_api_token_count;
extern const kf_api_member kf_api_members[];
/* Table members without a function and functions without a member; NULL-terminated. */
extern const char* const kf_api_table_problems[];

#endif
