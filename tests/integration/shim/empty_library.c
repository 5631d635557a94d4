/* A libcuda.so.1 / libnvidia-ml.so.1 that exports no function at all: the
 * shim over a library that is not a driver (missing_function_probe). */
__attribute__((visibility("hidden"))) int cushare_test_empty_library;
