#include "tests/fakegpu/cuda/driver_thread.hpp"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

namespace fakegpu {
namespace {
void* sleep_forever(void*) {
  for (;;) pause();  // every signal blocked: never returns
  return nullptr;
}
}  // namespace

void start_driver_thread() {
  // The new thread inherits the mask: block everything around its creation.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t t;
  if (pthread_create(&t, nullptr, sleep_forever, nullptr) == 0) {
    pthread_setname_np(t, "fakegpu-driver");
    pthread_detach(t);
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

}  // namespace fakegpu
