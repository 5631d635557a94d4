// The driver's own thread. The real libcuda starts threads of its own when it
// initialises (a process that uses CUDA shows them in `ps -T`), so no CUDA
// process is single-threaded. A single-threaded process takes glibc's
// unlocked fast paths (malloc, stdio), and fakegpu's launches ran ~9 % faster
// in one than in a process with any second thread: a baseline no real
// program has, which made every thread an interposer starts look like
// launch overhead.
#pragma once

namespace fakegpu {

// Starts it once per process (cuInit); it only sleeps, with every signal
// blocked so that none is delivered to it instead of the program's threads.
void start_driver_thread();

}  // namespace fakegpu
