# Run by the ctest test package_library_only (cmake -P). From the source tree SOURCE_DIR, in
# the scratch directory WORK_DIR:
#   1. configures a library-only build (tests, examples, benchmarks and tools off) and installs
#      it without building anything: the headers and the CMake package files must be installed
#      and nothing else;
#   2. builds and runs the find_package consumer (tests/package/find_package) against it;
#   3. configures with the tool on, installs without building: the tool's install rule must
#      not fail (it is OPTIONAL) and no tool may be installed.
# Inputs: SOURCE_DIR, WORK_DIR, GENERATOR, MAKE_PROGRAM, CXX_COMPILER.
cmake_minimum_required(VERSION 3.20)

foreach(var SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER)
    if(NOT DEFINED ${var})
        message(FATAL_ERROR "library_only.cmake: ${var} is not set")
    endif()
endforeach()

function(run what)
    execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "${what} failed (${rc}):\n${out}")
    endif()
    message(STATUS "${what}: ok")
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
set(make_program)
if(MAKE_PROGRAM)
    set(make_program -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
endif()

# 1. Library only: configure, install, no build.
set(lib_build ${WORK_DIR}/lib-build)
set(lib_prefix ${WORK_DIR}/lib-prefix)
run("configure (library only)"
    ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${lib_build} -G ${GENERATOR} ${make_program}
        -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
        -DTLPTM_BUILD_TESTS=OFF -DTLPTM_BUILD_EXAMPLES=OFF -DTLPTM_BUILD_BENCH=OFF
        -DTLPTM_BUILD_TOOLS=OFF)
run("install (library only)" ${CMAKE_COMMAND} --install ${lib_build} --prefix ${lib_prefix})
foreach(f include/tlptm/tlptm.hpp include/tlptm/pool.hpp include/tlptm/detail/layout.hpp)
    if(NOT EXISTS ${lib_prefix}/${f})
        message(FATAL_ERROR "the library-only install lacks ${f}")
    endif()
endforeach()
file(GLOB_RECURSE config_files ${lib_prefix}/*/tlptmConfig.cmake)
list(LENGTH config_files n)
if(NOT n EQUAL 1)
    message(FATAL_ERROR "expected one tlptmConfig.cmake under ${lib_prefix}, found: ${config_files}")
endif()
get_filename_component(config_dir ${config_files} DIRECTORY)
if(EXISTS ${lib_prefix}/bin)
    message(FATAL_ERROR "the library-only install installed programs: ${lib_prefix}/bin")
endif()

# 2. A consumer finds the installed copy and builds.
run("find_package consumer"
    ${CMAKE_CTEST_COMMAND} --build-and-test
        ${SOURCE_DIR}/tests/package/find_package ${WORK_DIR}/consumer
        --build-generator ${GENERATOR}
        --build-project tlptm_find_package_consumer
        --build-options -DCMAKE_PREFIX_PATH=${lib_prefix} -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
            ${make_program} -DTLPTM_EXPECTED_DIR=${config_dir}
        --test-command tlptm_find_package_consumer)

# 3. The tool on, nothing built: the install skips the tool instead of failing.
set(tool_build ${WORK_DIR}/tool-build)
set(tool_prefix ${WORK_DIR}/tool-prefix)
run("configure (tool on)"
    ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${tool_build} -G ${GENERATOR} ${make_program}
        -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
        -DTLPTM_BUILD_TESTS=OFF -DTLPTM_BUILD_EXAMPLES=OFF -DTLPTM_BUILD_BENCH=OFF
        -DTLPTM_BUILD_TOOLS=ON)
run("install without a build (tool on)"
    ${CMAKE_COMMAND} --install ${tool_build} --prefix ${tool_prefix})
if(NOT EXISTS ${tool_prefix}/include/tlptm/tlptm.hpp)
    message(FATAL_ERROR "the install without a build lacks the headers")
endif()
if(EXISTS ${tool_prefix}/bin/tlptm)
    message(FATAL_ERROR "a tool that was never built was installed")
endif()

file(REMOVE_RECURSE ${WORK_DIR})
