# Installs the current build into a fresh prefix, then builds and runs tests/install/consumer
# against it twice: with CMake's find_package(KernelFusion), and with a plain compiler command
# fed by `pkg-config --cflags --libs kernel_fusion`; and, given a Python interpreter, runs
# consumer/consumer.py with the installed Python package.
#
#   cmake -DBUILD_DIR=<build> -DSOURCE_DIR=<source> -DWORK_DIR=<dir> -DCONSUMER_DIR=<tests/install/consumer>
#         -DGENERATOR=<gen> -DMAKE_PROGRAM=<prog> -DC_COMPILER=<cc> -DPKG_CONFIG=<pkg-config>
#         [-DEXTRA_C_FLAGS=<flags>] [-DCONFIG=<build config>] [-DPYTHON=<python3>]
#         -P run_install_test.cmake
cmake_minimum_required(VERSION 3.20)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " command "${ARGN}")
    message(FATAL_ERROR "command failed (${rc}): ${command}\n${out}")
  endif()
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

set(prefix "${WORK_DIR}/prefix")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

# ---- install
set(config_args "")
if(CONFIG)
  set(config_args --config "${CONFIG}")
endif()
run("${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}" ${config_args})
message(STATUS "installed into ${prefix}")

# What a user gets: headers, the versioned library and its links, the CMake package, the .pc,
# and the Python package where the build installs it (the install options, defined after tests/
# is configured, are read from the build's cache as `cmake --install` reads them).
load_cache("${BUILD_DIR}" READ_WITH_PREFIX "" KF_INSTALL_PYTHON KF_PYTHON_INSTALL_DIR)
set(python_dir "")
if(KF_INSTALL_PYTHON AND IS_ABSOLUTE "${KF_PYTHON_INSTALL_DIR}")
  message(STATUS "the Python package goes to ${KF_PYTHON_INSTALL_DIR}, outside the prefix: "
                 "not tested")
elseif(KF_INSTALL_PYTHON)
  set(python_dir "${KF_PYTHON_INSTALL_DIR}")
endif()
set(python_files "")
if(python_dir)
  foreach(module __init__ _capi _dlpack _graph _installed)
    list(APPEND python_files "${python_dir}/kernel_fusion/${module}.py")
  endforeach()
endif()
file(GLOB_RECURSE installed RELATIVE "${prefix}" LIST_DIRECTORIES false "${prefix}/*")
foreach(expected "include/kernel_fusion/kernel_fusion.h" "include/kernel_fusion/kernel_fusion.hpp"
                 "lib*/libkernel_fusion.so" "lib*/libkernel_fusion.so.0"
                 "lib*/cmake/KernelFusion/KernelFusionConfig.cmake"
                 "lib*/cmake/KernelFusion/KernelFusionConfigVersion.cmake"
                 "lib*/cmake/KernelFusion/KernelFusionTargets.cmake"
                 "lib*/pkgconfig/kernel_fusion.pc" ${python_files})
  string(REPLACE "." "\\." pattern "${expected}")
  string(REPLACE "*" "[^/]*" pattern "${pattern}")
  set(found FALSE)
  foreach(file IN LISTS installed)
    if(file MATCHES "^${pattern}$")
      set(found TRUE)
    endif()
  endforeach()
  if(NOT found)
    string(REPLACE ";" "\n  " listing "${installed}")
    message(FATAL_ERROR "the install tree lacks ${expected}; it holds:\n  ${listing}")
  endif()
endforeach()
foreach(file IN LISTS installed)
  if(file MATCHES "(^|/)(kf_test|gtest|gmock)|kf_build_flags")
    message(FATAL_ERROR "a build-internal file was installed: ${file}")
  endif()
endforeach()
# The Python package is its modules alone: no tests, no bytecode, no subdirectories.
if(python_dir)
  file(GLOB_RECURSE package_files RELATIVE "${prefix}/${python_dir}/kernel_fusion"
       LIST_DIRECTORIES false "${prefix}/${python_dir}/kernel_fusion/*")
  foreach(file IN LISTS package_files)
    if(NOT file MATCHES "^[A-Za-z0-9_]+\\.py$")
      message(FATAL_ERROR "the Python package holds ${file}, which is not one of its modules")
    endif()
  endforeach()
endif()

# The exported targets must not ask users for build-only targets (kf_build_flags) or for the
# CUDA runtime the library links privately and statically.
file(GLOB target_files "${prefix}/lib*/cmake/KernelFusion/KernelFusionTargets*.cmake")
foreach(file IN LISTS target_files)
  file(READ "${file}" text)
  if(text MATCHES "(CUDA::[A-Za-z_]+|kf_build_flags|cudart|Threads::Threads|GTest)")
    message(FATAL_ERROR "${file} refers to ${CMAKE_MATCH_1}, which users of the installed package "
                        "neither have nor need")
  endif()
  foreach(tree "${BUILD_DIR}" "${SOURCE_DIR}")
    string(FIND "${text}" "${tree}" at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "${file} refers to the build machine's tree ${tree}")
    endif()
  endforeach()
endforeach()

# ---- 1. CMake: find_package(KernelFusion) in a project that enables only C.
set(cmake_build "${WORK_DIR}/cmake-consumer")
set(configure_args -S "${CONSUMER_DIR}" -B "${cmake_build}" -G "${GENERATOR}"
    "-DCMAKE_PREFIX_PATH=${prefix}" "-DCMAKE_C_COMPILER=${C_COMPILER}" -DCMAKE_BUILD_TYPE=Release
    "-DCMAKE_C_FLAGS=${EXTRA_C_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${EXTRA_C_FLAGS}")
if(MAKE_PROGRAM)
  list(APPEND configure_args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
run("${CMAKE_COMMAND}" ${configure_args})
run("${CMAKE_COMMAND}" --build "${cmake_build}")
file(GLOB_RECURSE consumer_exe LIST_DIRECTORIES false "${cmake_build}/consumer")
if(NOT consumer_exe)
  message(FATAL_ERROR "the CMake consumer was not built in ${cmake_build}")
endif()
list(GET consumer_exe 0 consumer_exe)
run("${consumer_exe}")  # imported targets give the build tree an RPATH to the prefix
message(STATUS "find_package: ${run_output}")

# ---- 2. pkg-config with a plain compiler command. The .pc file must point at this prefix even
# though the build was configured for another one.
if(NOT PKG_CONFIG)
  message(FATAL_ERROR "pkg-config not found; the pkg-config half of the install test needs it")
endif()
file(GLOB pc_dirs LIST_DIRECTORIES true "${prefix}/lib*/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "${pc_dirs}")
unset(ENV{PKG_CONFIG_LIBDIR})
run("${PKG_CONFIG}" --cflags kernel_fusion)
string(STRIP "${run_output}" cflags)
run("${PKG_CONFIG}" --libs kernel_fusion)
string(STRIP "${run_output}" libs)
message(STATUS "pkg-config --cflags --libs kernel_fusion: ${cflags} ${libs}")
separate_arguments(cflags UNIX_COMMAND "${cflags}")
separate_arguments(libs UNIX_COMMAND "${libs}")
separate_arguments(extra UNIX_COMMAND "${EXTRA_C_FLAGS}")
# Only the installed headers may be visible: a consumer must not find the source tree's.
foreach(flag IN LISTS cflags libs)
  if(flag MATCHES "^-[IL](.*)$")
    get_filename_component(dir "${CMAKE_MATCH_1}" REALPATH)
    get_filename_component(real_prefix "${prefix}" REALPATH)
    string(FIND "${dir}/" "${real_prefix}/" at)
    if(NOT at EQUAL 0)
      message(FATAL_ERROR "pkg-config flag ${flag} points outside the install prefix ${prefix}")
    endif()
  endif()
endforeach()
set(pkg_exe "${WORK_DIR}/pkg-config-consumer")
run("${C_COMPILER}" -std=c99 -Wall -Wextra -pedantic -Werror ${extra} ${cflags}
    "${CONSUMER_DIR}/consumer.c" -o "${pkg_exe}" ${libs} -lm)
file(GLOB lib_dirs LIST_DIRECTORIES true "${prefix}/lib*")
string(REPLACE ";" ":" lib_path "${lib_dirs}")
run("${CMAKE_COMMAND}" -E env "LD_LIBRARY_PATH=${lib_path}" "${pkg_exe}")
message(STATUS "pkg-config: ${run_output}")

# ---- 3. Python: the installed package, imported from its install directory with no KF_LIBRARY,
# finds the installed library from where it lies and runs an op on the CPU.
if(NOT PYTHON)
  message(STATUS "python: no interpreter given (none found, or a sanitizer build): not run")
elseif(NOT python_dir)
  message(STATUS "python: the package is not installed into the prefix: not run")
else()
  run("${CMAKE_COMMAND}" -E env --unset=KF_LIBRARY "PYTHONPATH=${prefix}/${python_dir}"
      PYTHONDONTWRITEBYTECODE=1 "${PYTHON}" "${CONSUMER_DIR}/consumer.py" "${prefix}")
  message(STATUS "python: ${run_output}")
endif()
