// The metrics endpoint's HTTP/1.x rules, without I/O: what to answer to the
// bytes a client has sent so far. The endpoint takes no request bodies and
// serves two GET paths, so a request is its head alone; anything else is
// refused from the head, before a body byte is read (the server then closes
// the connection). The server around it is metrics_server.hpp.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace cushare::sched::http {

enum class Endpoint { none, metrics, healthz };

struct Verdict {
  enum class Kind {
    incomplete,  // no complete head yet and under the size limit: read more
    respond,     // answer `status`; a 200 names its endpoint
  };
  Kind kind = Kind::incomplete;
  int status = 0;
  Endpoint endpoint = Endpoint::none;
  bool keep_alive = false;     // only ever true for a 200
  std::size_t head_bytes = 0;  // bytes of `received` the head took (respond only)
  std::string_view reason;     // why an error status, for its body
};

// Decides on the request at the start of `received`. Refusals, in order:
// no complete head within `max_head_bytes` → 431; malformed request line or
// header → 400; a version other than HTTP/1.0 or 1.1 → 505; an announced
// body (Content-Length > 0, any Transfer-Encoding) → 413; a path other than
// /metrics and /healthz (query ignored) → 404; a method other than GET → 405.
Verdict parse_request(std::string_view received, std::size_t max_head_bytes);

// A complete response: status line, Content-Type, Content-Length,
// Connection (keep-alive or close), `Allow: GET` with a 405, then `body`.
std::string format_response(int status, std::string_view content_type, std::string_view body,
                            bool keep_alive);

// The response to a refused or timed-out request: a one-line text body, and
// the connection closed after it.
std::string format_error(int status, std::string_view reason);

}  // namespace cushare::sched::http
