/* bypass_probe: what a tenant's native code can do past any user-space shim.
 * It starts like any CUDA program (cuInit and its context through the normal
 * symbols, so the shim sees a process of the allocation), then reaches the
 * real driver's functions another way and uses them:
 *
 *   --via dlvsym    glibc's own dlsym, found with dlvsym(RTLD_NEXT, "dlsym", ...)
 *   --via dlmopen   libcuda.so.1 in a new link-map namespace (no preloads there),
 *                   its functions found with that namespace's own dlsym
 *   --via elf       the loaded libcuda.so.1's .dynsym, read from its file
 *
 *   bypass_probe --via WAY alloc BYTES STEP HOLD_MS
 *       allocates BYTES in STEP-byte steps past the shim, prints one JSON line,
 *       holds the memory for HOLD_MS
 *   bypass_probe --via WAY launch SECONDS PTX_FILE
 *       launches 1 ms `spin` kernels past the launch gate for SECONDS
 *
 * Linked against libcuda (fakegpu's or the real one) and libdl only.
 */
#define _GNU_SOURCE /* NOLINT(bugprone-reserved-identifier): glibc's feature-test macro */
#include <cuda.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef CUresult (*init_fn)(unsigned);
typedef CUresult (*device_get_fn)(CUdevice*, int);
typedef CUresult (*retain_fn)(CUcontext*, CUdevice);
typedef CUresult (*set_current_fn)(CUcontext);
typedef CUresult (*alloc_fn)(CUdeviceptr*, size_t);
typedef CUresult (*module_load_fn)(CUmodule*, const void*);
typedef CUresult (*get_function_fn)(CUfunction*, CUmodule, const char*);
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void**, void**);
typedef CUresult (*sync_fn)(void);

static void* (*lookup)(const char* name);

/* ---- way 1: glibc's dlsym, not the interposed one ---- */
static void* (*real_dlsym)(void*, const char*);
static void* cuda_handle;
static void* via_dlvsym(const char* name) {
  return real_dlsym(cuda_handle, name);
}

/* ---- way 2: another link-map namespace ---- */
static void* ns_cuda;
static void* (*ns_dlsym)(void*, const char*);
static void* via_dlmopen(const char* name) {
  return ns_dlsym(ns_cuda, name);
}

/* ---- way 3: the ELF symbol table of the loaded library ---- */
struct loaded {
  const char* path;
  uintptr_t base;
};
static struct loaded cuda_object;
static int find_cuda(struct dl_phdr_info* info, size_t size, void* data) {
  (void)size;
  (void)data;
  if (info->dlpi_name && strstr(info->dlpi_name, "libcuda.so.1")) {
    cuda_object.path = info->dlpi_name;
    cuda_object.base = info->dlpi_addr;
    return 1;
  }
  return 0;
}
static const unsigned char* elf_image;
static size_t elf_size;
static void* via_elf(const char* name) {
  const Elf64_Ehdr* eh = (const Elf64_Ehdr*)elf_image;
  const Elf64_Shdr* sh = (const Elf64_Shdr*)(elf_image + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; ++i) {
    if (sh[i].sh_type != SHT_DYNSYM) continue;
    const Elf64_Sym* syms = (const Elf64_Sym*)(elf_image + sh[i].sh_offset);
    const char* strings = (const char*)(elf_image + sh[sh[i].sh_link].sh_offset);
    const size_t n = sh[i].sh_size / sizeof(Elf64_Sym);
    for (size_t k = 0; k < n; ++k) {
      if (syms[k].st_shndx == SHN_UNDEF || syms[k].st_value == 0) continue;
      if (strcmp(strings + syms[k].st_name, name) == 0)
        return (void*)(cuda_object.base + syms[k].st_value);
    }
  }
  return NULL;
}

static int setup(const char* way) {
  if (strcmp(way, "dlvsym") == 0) {
    real_dlsym = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!real_dlsym) real_dlsym = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    cuda_handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    lookup = via_dlvsym;
    return real_dlsym && cuda_handle ? 0 : -1;
  }
  if (strcmp(way, "dlmopen") == 0) {
    ns_cuda = dlmopen(LM_ID_NEWLM, "libcuda.so.1", RTLD_NOW);
    if (!ns_cuda) return -1;
    Lmid_t lmid;
    if (dlinfo(ns_cuda, RTLD_DI_LMID, &lmid) != 0) return -1;
    void* ns_libc = dlmopen(lmid, "libc.so.6", RTLD_NOW);
    if (!ns_libc) return -1;
    /* The interposed dlsym passes names it does not hook straight through. */
    ns_dlsym = dlsym(ns_libc, "dlsym");
    lookup = via_dlmopen;
    return ns_dlsym ? 0 : -1;
  }
  if (strcmp(way, "elf") == 0) {
    dl_iterate_phdr(find_cuda, NULL);
    if (!cuda_object.path) return -1;
    const int fd = open(cuda_object.path, O_RDONLY);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) return -1;
    elf_size = (size_t)sb.st_size;
    elf_image = mmap(NULL, elf_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    lookup = via_elf;
    return elf_image == MAP_FAILED ? -1 : 0;
  }
  return -1;
}

static void hold(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char** argv) {
  if (argc < 4 || strcmp(argv[1], "--via") != 0) {
    fprintf(stderr,
            "usage: bypass_probe --via dlvsym|dlmopen|elf alloc BYTES STEP HOLD_MS\n"
            "       bypass_probe --via dlvsym|dlmopen|elf launch SECONDS PTX_FILE\n");
    return 2;
  }
  const char* way = argv[2];
  const char* what = argv[3];
  /* A normal start: the shim sees it (cuInit, a context). */
  CUdevice dev;
  CUcontext ctx;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
    printf("{\"error\":\"normal start failed\"}\n");
    return 1;
  }
  if (setup(way) != 0) {
    printf("{\"error\":\"cannot set up the %s way: %s\"}\n", way, dlerror() ? dlerror() : "");
    return 1;
  }
  if (strcmp(way, "dlmopen") == 0) {
    /* Another namespace has another instance of the driver library: it needs
       its own initialisation and context, made past the shim too. */
    init_fn init = (init_fn)lookup("cuInit");
    device_get_fn get = (device_get_fn)lookup("cuDeviceGet");
    retain_fn retain = (retain_fn)lookup("cuDevicePrimaryCtxRetain");
    set_current_fn set = (set_current_fn)lookup("cuCtxSetCurrent");
    if (!init || !get || !retain || !set || init(0) != CUDA_SUCCESS ||
        get(&dev, 0) != CUDA_SUCCESS || retain(&ctx, dev) != CUDA_SUCCESS ||
        set(ctx) != CUDA_SUCCESS) {
      printf("{\"error\":\"cannot start the driver in the new namespace\"}\n");
      return 1;
    }
  }
  if (strcmp(what, "alloc") == 0 && argc == 7) {
    const size_t total = strtoull(argv[4], NULL, 10), step = strtoull(argv[5], NULL, 10);
    alloc_fn alloc = (alloc_fn)lookup("cuMemAlloc_v2");
    if (!alloc || (void*)alloc == dlsym(RTLD_DEFAULT, "cuMemAlloc_v2")) {
      printf("{\"error\":\"the %s way did not reach past the shim\"}\n", way);
      return 1;
    }
    size_t got = 0;
    CUresult r = CUDA_SUCCESS;
    while (got + step <= total) {
      CUdeviceptr p;
      if ((r = alloc(&p, step)) != CUDA_SUCCESS) break;
      got += step;
    }
    printf("{\"via\":\"%s\",\"bytes\":%zu,\"last\":%d}\n", way, got, (int)r);
    fflush(stdout);
    hold(strtol(argv[6], NULL, 10));
    return 0;
  }
  if (strcmp(what, "launch") == 0 && argc == 6) {
    const double seconds = strtod(argv[4], NULL);
    FILE* f = fopen(argv[5], "rb");
    if (!f) return 1;
    static char ptx[1 << 16];
    const size_t n = fread(ptx, 1, sizeof ptx - 1, f);
    fclose(f);
    ptx[n] = 0;
    module_load_fn load = (module_load_fn)lookup("cuModuleLoadData");
    get_function_fn getf = (get_function_fn)lookup("cuModuleGetFunction");
    launch_fn launch = (launch_fn)lookup("cuLaunchKernel");
    sync_fn sync = (sync_fn)lookup("cuCtxSynchronize");
    CUmodule mod;
    CUfunction fn;
    if (!load || !getf || !launch || !sync || load(&mod, ptx) != CUDA_SUCCESS ||
        getf(&fn, mod, "spin") != CUDA_SUCCESS) {
      printf("{\"error\":\"no spin kernel\"}\n");
      return 1;
    }
    unsigned long long ns = 1000000, launches = 0;
    void* params[] = {&ns};
    const double end = now_s() + seconds;
    while (now_s() < end) {
      for (int i = 0; i < 8; ++i) {
        if (launch(fn, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL) != CUDA_SUCCESS) return 1;
        ++launches;
      }
      sync();
    }
    printf("{\"via\":\"%s\",\"launches\":%llu}\n", way, launches);
    return 0;
  }
  fprintf(stderr, "bypass_probe: bad arguments\n");
  return 2;
}
