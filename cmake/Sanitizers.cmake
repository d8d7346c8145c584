# Sanitizer and fuzzing builds (issue 13). Included by the top-level CMakeLists before any
# target is defined, so that every library, test and tool of the build is instrumented.
#
#   MEMPLAN_SANITIZE=ON  AddressSanitizer + UndefinedBehaviorSanitizer. Undefined behaviour
#                        aborts (-fno-sanitize-recover) so that a test hitting it fails.
#                        `make test SANITIZE=1` configures build-asan with it. The executor
#                        stays out (MEMPLAN_WITH_TORCH=OFF there): LibTorch is not built with
#                        sanitizers, and mixing instrumented and uninstrumented C++ containers
#                        across its ABI gives false reports.
#   MEMPLAN_FUZZ=ON      libFuzzer targets in fuzz/ (needs clang). Implies the sanitizers and
#                        adds coverage instrumentation (-fsanitize=fuzzer-no-link) everywhere.
option(MEMPLAN_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)
option(MEMPLAN_FUZZ "Build the libFuzzer targets in fuzz/ (clang only; implies MEMPLAN_SANITIZE)" OFF)

if(MEMPLAN_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "MEMPLAN_FUZZ needs clang (libFuzzer): configure with CXX=clang++")
  endif()
  set(MEMPLAN_SANITIZE ON CACHE BOOL "" FORCE)
endif()

if(MEMPLAN_SANITIZE)
  if(MEMPLAN_WITH_TORCH)
    message(STATUS "memplan: MEMPLAN_SANITIZE turns the executor off (LibTorch is not built with sanitizers)")
    set(MEMPLAN_WITH_TORCH OFF CACHE BOOL "" FORCE)
  endif()
  # float-cast-overflow (a double too large for the integer it is cast to) is part of
  # clang's "undefined" but not of gcc's; name it for both.
  add_compile_options(-fsanitize=address,undefined,float-cast-overflow
                      -fno-sanitize-recover=undefined,float-cast-overflow -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined,float-cast-overflow)
  if(MEMPLAN_FUZZ)
    add_compile_options(-fsanitize=fuzzer-no-link)
  else()
    # The test build: -O1 -g1 (after the build type's flags, so they win) is ASan's
    # recommended level with line tables for the reports, and compiles in about a third less
    # time than -O2 -g on CI's two cores.
    add_compile_options(-O1 -g1)
  endif()
  add_feature_info(sanitizers MEMPLAN_SANITIZE "AddressSanitizer + UndefinedBehaviorSanitizer")
endif()
