#include "tests/fakegpu/cuda/driver.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <strings.h>
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "tests/fakegpu/cuda/size_math.hpp"

namespace fakegpu {

Driver& driver() {
  static Driver* instance =
      new Driver();  // never destroyed: other threads may still call in at exit
  return *instance;
}

namespace {

thread_local std::vector<Context*> tls_stack;

// The driver frees a process's contexts and memory when it exits.
__attribute__((destructor)) void release_at_exit() {
  Driver& d = driver();
  if (!d.initialized || d.file == nullptr || d.pid != getpid()) return;
  d.shut_down = true;
  StateLock lock(*d.file);
  release_process(lock.state(), d.proc, lock.now());
}

}  // namespace

CUdevice ordinal_of(int physical_index) {
  const auto& v = driver().visible;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == physical_index) return static_cast<CUdevice>(i);
  }
  return -1;
}

std::vector<int> parse_visible_devices(const char* text, const SharedState& s) {
  std::vector<int> out;
  const int count = static_cast<int>(s.header.device_count);
  if (text == nullptr) {
    for (int i = 0; i < count; ++i) out.push_back(i);
    return out;
  }
  const std::string list(text);
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    std::string item = list.substr(start, end - start);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    int found = -1;
    if (!item.empty() && item.size() < 6 &&
        item.find_first_not_of("0123456789") == std::string::npos) {
      const int index = std::stoi(item);
      if (index < count) found = index;
    } else if (item.size() > 4 && strncasecmp(item.c_str(), "GPU-", 4) == 0) {
      int matches = 0;
      for (int i = 0; i < count; ++i) {
        if (strncasecmp(s.devices[i].uuid, item.c_str(), item.size()) == 0) {
          found = i;
          ++matches;
        }
      }
      if (matches != 1) found = -1;  // unknown or ambiguous prefix
    }
    if (found < 0 || std::find(out.begin(), out.end(), found) != out.end()) break;
    out.push_back(found);
    start = end + 1;
  }
  return out;
}

std::vector<Context*>& context_stack() {
  return tls_stack;
}

CUresult check_ready() {
  Driver& d = driver();
  if (d.shut_down.load(std::memory_order_relaxed)) return CUDA_ERROR_DEINITIALIZED;
  if (!d.initialized.load(std::memory_order_acquire)) {
    return d.init_error != CUDA_SUCCESS ? d.init_error : CUDA_ERROR_NOT_INITIALIZED;
  }
  if (d.forked.load(std::memory_order_relaxed))
    return CUDA_ERROR_NOT_INITIALIZED;  // CUDA is unusable after fork
  return CUDA_SUCCESS;
}

Context* current_context() {
  return tls_stack.empty() ? nullptr : tls_stack.back();
}

CUresult need_context(Context** out) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  Context* c = current_context();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (!context_alive(c) || !c->active) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *out = c;
  return CUDA_SUCCESS;
}

void set_current(Context* ctx) {
  if (tls_stack.empty()) {
    if (ctx) tls_stack.push_back(ctx);
  } else if (ctx) {
    tls_stack.back() = ctx;
  } else {
    tls_stack.pop_back();
  }
}

Context* as_context(CUcontext ctx) {
  return handle_object<Context>(ctx, HandleKind::context);
}

bool context_alive(const Context* ctx) {
  return is_handle(ctx, HandleKind::context);
}

namespace {

thread_local bool tls_null_is_per_thread = false;

Stream* per_thread_stream(Context& ctx) {
  // Apart from the ids of created streams (no lock shared with them).
  static std::atomic<uint64_t> next_per_thread_id{uint64_t{1} << 62};
  const std::thread::id me = std::this_thread::get_id();
  std::lock_guard<std::mutex> guard(ctx.per_thread_mu);
  Stream*& s = ctx.per_thread_streams[me];
  if (s == nullptr) {
    s = new Stream();
    s->ctx = &ctx;
    s->id = next_per_thread_id.fetch_add(1);
  }
  return s;
}

}  // namespace

PerThreadDefaultStream::PerThreadDefaultStream() : outer_(tls_null_is_per_thread) {
  tls_null_is_per_thread = true;
}

PerThreadDefaultStream::~PerThreadDefaultStream() {
  tls_null_is_per_thread = outer_;
}

bool is_builtin_stream(CUstream stream) {
  return stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD;
}

bool names_legacy_stream(CUstream stream) {
  return stream == CU_STREAM_LEGACY || (stream == nullptr && !tls_null_is_per_thread);
}

void capture_state_changed(Stream* s, bool capturing) {
  if (s->flags & CU_STREAM_NON_BLOCKING) return;
  s->ctx->blocking_captures.fetch_add(capturing ? 1 : -1);
}

CUresult resolve_stream(CUstream stream, Stream** out) {
  if (names_legacy_stream(stream)) {
    // Its work would wait for the capturing streams' (the driver's
    // "implicit dependency"): refused until their captures end.
    const Context* ctx = current_context();
    if (ctx != nullptr && ctx->blocking_captures.load() > 0)
      return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  }
  return resolve_stream_object(stream, out);
}

CUresult resolve_stream_object(CUstream stream, Stream** out) {
  if (is_builtin_stream(stream)) {
    Context* ctx = current_context();
    if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    *out = names_legacy_stream(stream) ? &ctx->default_stream : per_thread_stream(*ctx);
    return CUDA_SUCCESS;
  }
  Stream* s = handle_object<Stream>(stream, HandleKind::stream);
  if (s == nullptr) abort_if_freed(stream, "a call on a stream");
  if (s == nullptr || s->ctx == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *out = s;
  return CUDA_SUCCESS;
}

namespace {

uint64_t clamp_sleep(uint64_t hint) {
  return std::clamp<uint64_t>(hint, 20'000, 50'000'000);
}

bool slot_matches(const SharedState& s, const Context* ctx) {
  if (ctx->slot < 0) return false;  // an inactive primary context
  const ContextSlot& c = s.contexts[ctx->slot];
  return c.state == SlotState::live && c.generation == ctx->generation;
}

}  // namespace

Lane lane_of(const Stream& stream) {
  if (&stream == &stream.ctx->default_stream) return {stream.id, LaneOrder::legacy};
  if (stream.flags & CU_STREAM_NON_BLOCKING) return {stream.id, LaneOrder::non_blocking};
  return {stream.id, LaneOrder::blocking};
}

CUresult submit(Stream* stream, ItemKind kind, uint64_t duration_ns, int32_t slot, uint64_t ticket,
                uint64_t* seq) {
  Driver& d = driver();
  Context* ctx = stream->ctx;
  const uint32_t depth = d.config.queue_depth;
  for (;;) {
    uint64_t wake;
    {
      StateLock lock(*d.file);
      SharedState& s = lock.state();
      if (!slot_matches(s, ctx)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
      const uint64_t n = enqueue(s, ctx->slot, kind, duration_ns, slot, ticket, depth, lock.now(),
                                 lane_of(*stream));
      if (n != 0) {
        stream->last_seq.store(n, std::memory_order_relaxed);
        ctx->last_seq.store(n, std::memory_order_relaxed);
        if (seq) *seq = n;
        return CUDA_SUCCESS;
      }
      // Queue full: like a full push buffer, block until it has drained to
      // half (waking per slot would cost a wake-up per kernel).
      const uint64_t lane = lane_of(*stream).id;
      wake = lock.now() + clamp_sleep(drain_hint_ns(s, ctx->slot, lock.now(), &lane));
    }
    sleep_until_ns(wake);
  }
}

namespace {

bool done_through(const SharedState& s, const Context* ctx, uint64_t seq, const Stream* stream) {
  return stream ? lane_done_through(s, ctx->slot, stream->id, seq)
                : context_done_through(s, ctx->slot, seq);
}

}  // namespace

CUresult query(Context* ctx, uint64_t seq, const Stream* stream) {
  Driver& d = driver();
  StateLock lock(*d.file);
  const SharedState& s = lock.state();
  if (!slot_matches(s, ctx)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  return done_through(s, ctx, seq, stream) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

namespace {

// Sleeps until `done(state)` holds, by the engine's hint for item `seq` (of
// every stream, or `*lane`'s), or the context is gone.
template <typename Done>
CUresult sleep_until_done(Context* ctx, uint64_t seq, const uint64_t* lane, Done done) {
  Driver& d = driver();
  for (;;) {
    uint64_t wake;
    {
      StateLock lock(*d.file);
      const SharedState& s = lock.state();
      if (!slot_matches(s, ctx)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
      if (done(s)) return CUDA_SUCCESS;
      wake = lock.now() + clamp_sleep(wait_hint_ns(s, ctx->slot, seq, lock.now(), lane));
    }
    sleep_until_ns(wake);
  }
}

}  // namespace

CUresult wait_for(Context* ctx, uint64_t seq, const Stream* stream) {
  return sleep_until_done(ctx, seq, stream ? &stream->id : nullptr,
                          [&](const SharedState& s) { return done_through(s, ctx, seq, stream); });
}

CUresult wait_host_reached(Context* ctx, const Stream* stream, uint64_t seq, int32_t slot,
                           uint64_t ticket) {
  // Reached once the items before it on its stream completed: the hint is theirs.
  return sleep_until_done(ctx, seq - 1, &stream->id,
                          [&](const SharedState& s) { return s.events[slot].reached >= ticket; });
}

uint64_t va_alloc(uint64_t size, uint64_t alignment) {
  Driver& d = driver();
  if (d.va_base == 0) {
    // 4 TiB of PROT_NONE address space: no memory, just unique device-like
    // addresses. Less where the address space is restricted (ThreadSanitizer
    // leaves about 1.5 TiB for mappings).
    uint64_t want = 4ull << 40;
    void* p = MAP_FAILED;
    for (; want >= (128ull << 30); want /= 2) {
      p = mmap(nullptr, want, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p != MAP_FAILED) break;
    }
    if (p == MAP_FAILED) return 0;
    d.va_size = want;
    d.va_base = (reinterpret_cast<uint64_t>(p) + (2ull << 20) - 1) & ~((2ull << 20) - 1);
    d.va_free[d.va_base] = want - (d.va_base - reinterpret_cast<uint64_t>(p));
  }
  // More than the whole reservation never fits; checking first also keeps the
  // rounding below from wrapping.
  if (size > d.va_size) return 0;
  size = (size + 511) & ~uint64_t{511};
  for (auto it = d.va_free.begin(); it != d.va_free.end(); ++it) {
    uint64_t start = 0;
    if (!round_up(it->first, alignment, &start)) continue;
    const uint64_t end = it->first + it->second;
    if (start > end || size > end - start) continue;
    const uint64_t free_base = it->first;
    d.va_free.erase(it);
    if (start > free_base) d.va_free[free_base] = start - free_base;
    if (start + size < end) d.va_free[start + size] = end - (start + size);
    return start;
  }
  return 0;
}

void va_release(uint64_t base, uint64_t size) {
  Driver& d = driver();
  size = (size + 511) & ~uint64_t{511};
  auto [it, inserted] = d.va_free.emplace(base, size);
  if (!inserted) return;
  auto next = std::next(it);
  if (next != d.va_free.end() && it->first + it->second == next->first) {
    it->second += next->second;
    d.va_free.erase(next);
  }
  if (it != d.va_free.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      d.va_free.erase(it);
    }
  }
}

Region* find_region(uint64_t addr, uint64_t len, uint64_t* base_out) {
  Driver& d = driver();
  auto it = d.regions.upper_bound(addr);
  if (it == d.regions.begin()) return nullptr;
  --it;
  if (addr < it->first || addr + len > it->first + it->second.size || addr + len < addr)
    return nullptr;
  if (base_out) *base_out = it->first;
  return &it->second;
}

uint8_t* backing_bytes(Region& r, uint64_t offset, bool for_write) {
  if (!r.backing) return nullptr;
  return backing_bytes(*r.backing, offset + r.backing_offset, for_write);
}

uint8_t* backing_bytes(Backing& b, uint64_t offset, bool for_write) {
  if (b.host) return b.host + offset;
  if (!b.lazy && !b.unbacked && for_write) {
    Driver& d = driver();
    if (d.backed_bytes + b.size <= d.config.host_backing_limit) {
      b.lazy.reset(new (std::nothrow) uint8_t[b.size]());
      if (b.lazy) d.backed_bytes += b.size;
    }
    if (!b.lazy) b.unbacked = true;
  }
  return b.lazy ? b.lazy.get() + offset : nullptr;
}

void release_backing(Backing& b) {
  Driver& d = driver();
  if (b.lazy || b.shared) d.backed_bytes -= std::min(d.backed_bytes, b.size);
  b.lazy.reset();
  if (b.shared) b.host = nullptr;
  b.shared.reset();
}

CUresult charge_device(int device, uint64_t bytes) {
  Driver& d = driver();
  for (int attempt = 0; attempt < 2; ++attempt) {
    StateLock lock(*d.file, attempt == 1);
    if (charge(lock.state(), d.proc, static_cast<uint32_t>(device), bytes)) return CUDA_SUCCESS;
  }
  return CUDA_ERROR_OUT_OF_MEMORY;
}

void uncharge_device(int device, uint64_t bytes) {
  Driver& d = driver();
  StateLock lock(*d.file);
  uncharge(lock.state(), d.proc, static_cast<uint32_t>(device), bytes);
}

uint64_t copy_duration_ns(uint64_t bytes, bool device_local) {
  const long double bw =
      static_cast<long double>(driver().config.copy_bytes_per_s) * (device_local ? 10 : 1);
  return static_cast<uint64_t>(static_cast<long double>(bytes) * 1e9L / bw);
}

CUresult copy_end_bytes(uint64_t addr, bool device, uint64_t bytes, bool write, uint8_t** out) {
  uint64_t base = 0;
  Region* r = find_region(addr, bytes, &base);
  if (r == nullptr) {
    if (device) return CUDA_ERROR_INVALID_VALUE;
    *out = reinterpret_cast<uint8_t*>(addr);
    return CUDA_SUCCESS;
  }
  *out = backing_bytes(*r, addr - base, write);
  return CUDA_SUCCESS;
}

CUresult copy_bytes(uint64_t dst, bool dst_device, uint64_t src, bool src_device, uint64_t bytes) {
  if (bytes == 0) return CUDA_SUCCESS;
  Driver& d = driver();
  std::lock_guard<std::mutex> guard(d.mu);
  uint8_t *to = nullptr, *from = nullptr;
  if (CUresult r = copy_end_bytes(dst, dst_device, bytes, true, &to); r != CUDA_SUCCESS) return r;
  if (CUresult r = copy_end_bytes(src, src_device, bytes, false, &from); r != CUDA_SUCCESS)
    return r;
  if (to == nullptr) return CUDA_SUCCESS;  // unbacked destination: the bytes are not kept
  if (from == nullptr) {
    std::memset(to, 0, bytes);
  } else {
    std::memmove(to, from, bytes);
  }
  return CUDA_SUCCESS;
}

CUresult fill_bytes(uint64_t dst, uint64_t element_size, uint64_t value, uint64_t count,
                    uint64_t pitch, uint64_t width_elements, uint64_t height) {
  Driver& d = driver();
  std::lock_guard<std::mutex> guard(d.mu);
  // The bytes the fill reaches; a span that does not fit in 64 bits reaches
  // past every allocation.
  uint64_t row_bytes = 0, span = 0;
  if (!mul_size(width_elements, element_size, &row_bytes)) return CUDA_ERROR_INVALID_VALUE;
  const bool fits = height == 0
                        ? mul_size(count, element_size, &span)
                        : mul_size(pitch, height - 1, &span) && add_size(span, row_bytes, &span);
  if (!fits) return CUDA_ERROR_INVALID_VALUE;
  if (span == 0) return CUDA_SUCCESS;
  uint64_t base = 0;
  Region* r = find_region(dst, span, &base);
  if (r == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint8_t* bytes = backing_bytes(*r, dst - base, true);
  if (bytes == nullptr) return CUDA_SUCCESS;
  auto fill_row = [&](uint8_t* p, uint64_t n) {
    for (uint64_t i = 0; i < n; ++i) std::memcpy(p + i * element_size, &value, element_size);
  };
  if (height == 0) {
    fill_row(bytes, count);
  } else {
    for (uint64_t y = 0; y < height; ++y) fill_row(bytes + y * pitch, width_elements);
  }
  return CUDA_SUCCESS;
}

Function* as_function(CUfunction f) {
  return handle_object<Function>(f, HandleKind::function);
}

uint64_t kernel_duration_ns(const Function* f, void** params, void** extra) {
  if (!f->spin) return driver().config.kernel_ns;
  uint64_t ns = 0;
  if (params && params[0]) {
    std::memcpy(&ns, params[0], sizeof ns);
  } else if (extra) {
    for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER && extra[i + 1])
        std::memcpy(&ns, extra[i + 1], sizeof ns);
    }
  }
  return ns;
}

}  // namespace fakegpu
