# Compiles the public headers with a strict compiler invocation, so the result shows in CTest.
#
#   cmake -DCOMPILER=<cc> -DLANG=C|CXX -DSTD=c99|c11|c++17 -DINCLUDE_DIR=<include>
#         -DSOURCE=<test source> -DWORK_DIR=<dir> -P compile_headers.cmake
#
# Compiles SOURCE (which uses every header), then each header alone in its own translation
# unit (each must be self-contained), with -std=STD -Wall -Wextra -pedantic -Werror.
cmake_minimum_required(VERSION 3.20)
set(flags -std=${STD} -Wall -Wextra -pedantic -Werror -fsyntax-only -I${INCLUDE_DIR})
if(LANG STREQUAL "C")
  list(APPEND flags -x c)
  set(ext c)
  file(GLOB headers "${INCLUDE_DIR}/kernel_fusion/*.h")
else()
  list(APPEND flags -x c++)
  set(ext cpp)
  file(GLOB headers "${INCLUDE_DIR}/kernel_fusion/*.h" "${INCLUDE_DIR}/kernel_fusion/*.hpp")
endif()
file(MAKE_DIRECTORY "${WORK_DIR}")

set(units "${SOURCE}")
foreach(header IN LISTS headers)
  get_filename_component(name "${header}" NAME)
  string(MAKE_C_IDENTIFIER "${name}" id)
  set(unit "${WORK_DIR}/only_${id}.${ext}")
  file(WRITE "${unit}" "#include \"kernel_fusion/${name}\"\n#include \"kernel_fusion/${name}\"\nint kf_unit_${id};\n")
  list(APPEND units "${unit}")
endforeach()

set(failed 0)
foreach(unit IN LISTS units)
  execute_process(COMMAND "${COMPILER}" ${flags} "${unit}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(rc EQUAL 0)
    message(STATUS "ok   ${STD}: ${unit}")
  else()
    message(STATUS "FAIL ${STD}: ${unit}\n${out}")
    math(EXPR failed "${failed} + 1")
  endif()
endforeach()
if(failed GREATER 0)
  message(FATAL_ERROR "${failed} translation unit(s) failed to compile as ${STD}")
endif()
