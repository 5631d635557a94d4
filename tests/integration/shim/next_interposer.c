/* A second interposer, preloaded after libcushare.so: its getppid() looks up
 * the next getppid with dlsym(RTLD_NEXT). Through the shim's dlsym hook that
 * must still mean "the definition after this library" (libc's), not "after
 * the shim" (this library again, which would recurse). */
#define _GNU_SOURCE /* NOLINT(bugprone-reserved-identifier): glibc's feature-test macro */
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

pid_t getppid(void) {
  static pid_t (*next)(void);
  if (!next) {
    next = (pid_t(*)(void))dlsym(RTLD_NEXT, "getppid");
    if (next == NULL || next == getppid) {
      fputs("interposer-recursion: dlsym(RTLD_NEXT) resolved relative to the wrong object\n",
            stderr);
      _exit(99);
    }
  }
  return next();
}
