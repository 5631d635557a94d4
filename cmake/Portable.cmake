# The libraries cushare loads into processes it did not build — libcushare.so,
# and fakegpu's libcuda.so.1 / libnvidia-ml.so.1 standing in for the driver's —
# must load in whatever userland a container brings. They are linked against
# Debian bullseye's glibc (2.31; scripts/bullseye makes the sysroot, once per
# build folder), with the C++ runtime linked in and the few symbols that
# runtime wants from a newer glibc defined locally (portable/glibc_floor.cpp).
# The result needs only glibc's own libraries at GLIBC_2.28 or lower: the test
# portable.abi checks it (docs/portability.md).
#
# Sanitizer builds keep the host's glibc and shared runtimes (the sanitizer
# runtimes are bound to them); CUSHARE_PORTABLE=OFF does the same for a
# machine that cannot reach the Debian archive.
option(CUSHARE_PORTABLE "Link the preloaded libraries for glibc 2.28 and later (needs the Debian archive once)" ON)
if(NOT CUSHARE_SANITIZE STREQUAL "")
  set(CUSHARE_PORTABLE OFF)
endif()
set(CUSHARE_GLIBC_FLOOR 2.28)
set(CUSHARE_BULLSEYE_DIR ${CMAKE_BINARY_DIR}/bullseye CACHE PATH
    "Where scripts/bullseye keeps its package cache, the sysroot and the test root")
set(CUSHARE_SYSROOT ${CUSHARE_BULLSEYE_DIR}/sysroot)

if(CUSHARE_PORTABLE AND NOT EXISTS ${CUSHARE_SYSROOT}/.complete)
  message(STATUS "Making the bullseye sysroot in ${CUSHARE_SYSROOT} (once per build folder)")
  execute_process(COMMAND ${PROJECT_SOURCE_DIR}/scripts/bullseye sysroot ${CUSHARE_BULLSEYE_DIR}
                  RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR
      "scripts/bullseye could not make the sysroot the portable libcushare.so links against "
      "(exit ${_rc}). Configure with -DCUSHARE_PORTABLE=OFF for a shim that loads only where "
      "this machine's glibc (or a newer one) runs.")
  endif()
endif()

if(CUSHARE_PORTABLE)
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-multiarch
                  OUTPUT_VARIABLE _multiarch OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(_sysroot_libs ${CUSHARE_SYSROOT}/usr/lib/${_multiarch})
  # The sysroot's directories come first so its libc.so, crt files and
  # libpthread/libdl are found before the host's; the compiler's own runtime
  # (libstdc++.a, libgcc_eh.a) still comes from the compiler.
  set(CUSHARE_PORTABLE_LINK_OPTIONS
      --sysroot=${CUSHARE_SYSROOT} -B${_sysroot_libs}/
      -L${_sysroot_libs} -L${CUSHARE_SYSROOT}/lib/${_multiarch}
      -static-libstdc++ -static-libgcc -Wl,--no-undefined -Wl,--as-needed)
endif()

# Makes a shared library loadable in foreign userlands (no-op unless CUSHARE_PORTABLE).
function(cushare_portable_library target)
  if(CUSHARE_PORTABLE)
    target_sources(${target} PRIVATE $<TARGET_OBJECTS:cushare_glibc_floor>)
    target_link_options(${target} PRIVATE ${CUSHARE_PORTABLE_LINK_OPTIONS})
    # Before glibc 2.34 threads and the loader's API live in their own libraries.
    target_link_libraries(${target} PRIVATE pthread dl)
  endif()
endfunction()
