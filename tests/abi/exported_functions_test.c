/* Every function the public headers declare is exported: the generated table takes the address
 * of each one, so linking this program fails for a declared but unexported function. At run time
 * it checks that every address is non-NULL and is what the dynamic linker resolves for the name,
 * that the parser saw every KF_API declaration, and that kf_get_api(KF_API_VERSION_1) serves
 * every function at the member of the same name. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "exported_functions.h"

#include "c_check.h"

static kf_any_fn resolve(const char* name) {
  void* symbol = dlsym(RTLD_DEFAULT, name);
  kf_any_fn fn;
  /* POSIX guarantees the conversion; memcpy keeps ISO C quiet about it. */
  memcpy(&fn, &symbol, sizeof fn);
  return fn;
}

int main(void) {
  size_t i;
  size_t members_checked = 0;
  const kf_api_t* api;

  CHECK(kf_exported_function_count == kf_api_token_count,
        "the headers hold %zu KF_API tokens but %zu declarations were parsed; "
        "fix tests/abi/generate_function_table.cmake or the declaration",
        kf_api_token_count, kf_exported_function_count);

  for (i = 0; i < kf_exported_function_count; ++i) {
    const kf_exported_function* f = &kf_exported_functions[i];
    CHECK(f->address != NULL, "%s has a NULL address", f->name);
    CHECK(resolve(f->name) == f->address, "dlsym(\"%s\") does not resolve to the linked function",
          f->name);
  }

  for (i = 0; kf_api_table_problems[i] != NULL; ++i) {
    CHECK(0, "kf_api_t: %s", kf_api_table_problems[i]);
  }

  api = kf_get_api(KF_API_VERSION_1);
  CHECK(api != NULL, "kf_get_api(KF_API_VERSION_1) returned NULL: %s", kf_get_last_error_message());
  if (api != NULL) {
    CHECK(api->abi_version == KF_API_VERSION_1, "abi_version is %u", (unsigned)api->abi_version);
    CHECK(api->struct_size >= sizeof(kf_api_t), "struct_size %zu < sizeof(kf_api_t) %zu",
          api->struct_size, sizeof(kf_api_t));
    for (i = 0; kf_api_members[i].name != NULL; ++i) {
      const kf_api_member* m = &kf_api_members[i];
      kf_any_fn served;
      memcpy(&served, (const char*)api + m->offset, sizeof served);
      CHECK(served == m->function, "kf_api_t::%s does not point to kf_%s", m->name, m->name);
      ++members_checked;
    }
  }

  printf("%zu exported functions checked, %zu kf_api_t members checked\n",
         kf_exported_function_count, members_checked);
  if (failures != 0) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  return 0;
}
