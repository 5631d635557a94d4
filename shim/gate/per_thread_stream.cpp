#include "shim/gate/per_thread_stream.hpp"

namespace cushare::shim::gate {

namespace detail {
__attribute__((
    tls_model("initial-exec"))) constinit thread_local std::uint64_t t_launching_thread_id = 0;

std::uint64_t assign_launching_thread_id() noexcept {
  static std::atomic<std::uint64_t> next{1};
  t_launching_thread_id = next.fetch_add(1, std::memory_order_relaxed);
  return t_launching_thread_id;
}
}  // namespace detail

}  // namespace cushare::shim::gate
