# CUSHARE_SANITIZE=address|thread instruments every target. Processes that
# LD_PRELOAD an instrumented libcushare.so into an uninstrumented program (or
# preload it ahead of the program's own runtime) need the sanitizer runtime
# first and link-order checks relaxed: tests take CUSHARE_TEST_ENV and
# CUSHARE_TEST_PRELOAD_PREFIX from here instead of hard-coding LD_PRELOAD.
set(CUSHARE_TEST_ENV "")
set(CUSHARE_TEST_PRELOAD_PREFIX "")
# Instrumented code is compiled at -O1 with line tables only (-g1): the
# sanitizers' recommended level, whose reports keep file:line frames, at about
# half the compile time of -O2 -g (an instrumented build of the tree is most of
# CI's time on two cores). These come after the build type's flags, so they win.
# Tests that judge timing read CUSHARE_TEST_SANITIZED (tests/lib/cushare_timing.py):
# instrumented code is slower on the paths a hand-off waits for.
if(NOT CUSHARE_SANITIZE STREQUAL "")
  add_compile_options(-O1 -g1)
  list(APPEND CUSHARE_TEST_ENV "CUSHARE_TEST_SANITIZED=1")
endif()
if(CUSHARE_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libasan.so
                  OUTPUT_VARIABLE _asan OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(CUSHARE_TEST_PRELOAD_PREFIX "${_asan}:")
  list(APPEND CUSHARE_TEST_ENV
       "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0:abort_on_error=1"
       "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
elseif(CUSHARE_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libtsan.so
                  OUTPUT_VARIABLE _tsan OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(CUSHARE_TEST_PRELOAD_PREFIX "${_tsan}:")
  list(APPEND CUSHARE_TEST_ENV
       "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=${PROJECT_SOURCE_DIR}/tests/sanitizers/tsan.supp")
elseif(NOT CUSHARE_SANITIZE STREQUAL "")
  message(FATAL_ERROR "CUSHARE_SANITIZE must be '', 'address' or 'thread', not '${CUSHARE_SANITIZE}'")
endif()
