// What dies with a context. The driver frees everything created in a context
// when the context is destroyed or, for a primary context, reset or released
// for the last time: a program that keeps using a reset primary context must
// find none of its old modules, streams, events or memory.
#include "tests/fakegpu/cuda/driver.hpp"

namespace fakegpu {

void destroy_context_state(Context* ctx) {
  for (auto [object, kind] : take_owned_handles(ctx)) {
    switch (kind) {
      case HandleKind::module:
        drop_module(object);
        break;
      case HandleKind::event:
        drop_event(object);
        break;
      case HandleKind::array:
        drop_array(object);
        break;
      case HandleKind::mipmapped_array:
        drop_mipmapped_array(object);
        break;
      default:  // streams stay allocated once forgotten, as in cuStreamDestroy
        break;
    }
  }
  free_owned_regions(ctx);
  // A recreated primary context gives each thread a fresh per-thread
  // default stream: the objects are kept (a call in flight may hold one),
  // with nothing queued and no capture.
  {
    std::lock_guard<std::mutex> guard(ctx->per_thread_mu);
    for (auto& [thread, s] : ctx->per_thread_streams) {
      s->last_seq = 0;
      s->capture = CU_STREAM_CAPTURE_STATUS_NONE;
      s->graph = nullptr;
      s->capture_origin = nullptr;
      s->capture_joined.clear();
      s->capture_ops = s->capture_joined_ops = 0;
    }
  }
  ctx->blocking_captures = 0;
}

}  // namespace fakegpu
