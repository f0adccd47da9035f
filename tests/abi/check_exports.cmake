# Checks what the built library exports and how it is named.
#
#   cmake -DLIBRARY=<libkernel_fusion.so...> -DNM=<nm> -DREADELF=<readelf>
#         -DDECLARED=<exported_functions.txt> -DSONAME=libkernel_fusion.so.0 -P check_exports.cmake
#
# - `nm -D --defined-only` lists only kf_* symbols (plus the version script's node name): no C++,
#   CUDA runtime or other internal symbol leaks;
# - the exported kf_* functions are exactly the ones the public headers declare (DECLARED, written
#   by generate_function_table.cmake): nothing undeclared is exported;
# - `readelf -d` shows the SONAME, and no NEEDED entry for libcuda, a shared CUDA runtime or
#   NVRTC (the library must load on machines without a driver or the CUDA toolkit; NVRTC is
#   loaded when a fused kernel is first compiled).
cmake_minimum_required(VERSION 3.20)
set(errors "")

execute_process(COMMAND "${NM}" -D --defined-only "${LIBRARY}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE nm_out ERROR_VARIABLE nm_err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} -D --defined-only ${LIBRARY} failed (${rc}): ${nm_err}")
endif()
string(REPLACE "\n" ";" nm_lines "${nm_out}")
set(exported "")
foreach(line IN LISTS nm_lines)
  if(line STREQUAL "")
    continue()
  endif()
  # "<address> <type> <name>[@@VERSION]"
  if(NOT line MATCHES "^[0-9a-fA-F]* *([A-Za-z]) ([^@ ]+)(@@?[A-Za-z0-9_.]+)?$")
    string(APPEND errors "  unparsed nm line: ${line}\n")
    continue()
  endif()
  set(type "${CMAKE_MATCH_1}")
  set(name "${CMAKE_MATCH_2}")
  if(type STREQUAL "A" AND name MATCHES "^KERNEL_FUSION_[0-9]+$")
    continue()  # the version node of cmake/kernel_fusion.map
  endif()
  if(NOT name MATCHES "^kf_")
    string(APPEND errors "  exported symbol outside the kf_ namespace: ${line}\n")
    continue()
  endif()
  if(NOT type MATCHES "^[TtWi]$")
    string(APPEND errors "  exported kf_ symbol is not a function (type ${type}): ${name}\n")
  endif()
  list(APPEND exported "${name}")
endforeach()

file(STRINGS "${DECLARED}" declared)
foreach(name IN LISTS exported)
  if(NOT name IN_LIST declared)
    string(APPEND errors "  ${name} is exported but not declared KF_API in a public header\n")
  endif()
endforeach()
foreach(name IN LISTS declared)
  if(NOT name IN_LIST exported)
    string(APPEND errors "  ${name} is declared KF_API but not exported\n")
  endif()
endforeach()
list(LENGTH exported n_exported)

execute_process(COMMAND "${READELF}" -d "${LIBRARY}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE dyn ERROR_VARIABLE dyn_err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${READELF} -d ${LIBRARY} failed (${rc}): ${dyn_err}")
endif()
if(dyn MATCHES "\\(SONAME\\)[^\n]*\\[([^]\n]*)\\]")
  set(soname "${CMAKE_MATCH_1}")
  if(NOT soname STREQUAL SONAME)
    string(APPEND errors "  SONAME is ${soname}, expected ${SONAME}\n")
  endif()
else()
  string(APPEND errors "  no SONAME in the dynamic section\n")
endif()
string(REGEX MATCHALL "\\(NEEDED\\)[^\n]*\\[[^]\n]*\\]" needed "${dyn}")
foreach(entry IN LISTS needed)
  if(entry MATCHES "\\[(libcuda\\.so[^]]*|libcudart\\.so[^]]*|libnvrtc[^]]*)\\]")
    string(APPEND errors "  links ${CMAKE_MATCH_1}: the library must load without a CUDA driver "
                         "or toolkit\n")
  endif()
endforeach()

if(NOT errors STREQUAL "")
  message(FATAL_ERROR "export check of ${LIBRARY} failed:\n${errors}")
endif()
message(STATUS "${LIBRARY}: ${n_exported} kf_* functions exported, all declared; SONAME ${soname}")
