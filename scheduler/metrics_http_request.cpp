#include "scheduler/metrics_http_request.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

namespace cushare::sched::http {
namespace {

bool is_tchar(char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), is_tchar);
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return (x | 0x20) == (y | 0x20);
         });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

Verdict refuse(int status, std::string_view reason) {
  return {.kind = Verdict::Kind::respond, .status = status, .reason = reason};
}

struct RequestLine {
  std::string_view method, path;
  bool http10 = false;
};

// `line` without its line ending. Fills `out`, or returns the refusal.
std::optional<Verdict> parse_request_line(std::string_view line, RequestLine& out) {
  const auto sp1 = line.find(' ');
  const auto sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos) return refuse(400, "malformed request line");
  const auto method = line.substr(0, sp1);
  const auto target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const auto version = line.substr(sp2 + 1);
  if (!is_token(method) || target.empty() ||
      std::any_of(target.begin(), target.end(), [](char c) { return c <= ' ' || c == 0x7f; }))
    return refuse(400, "malformed request line");
  if (version == "HTTP/1.1") {
    out.http10 = false;
  } else if (version == "HTTP/1.0") {
    out.http10 = true;
  } else if (version.size() == 8 && version.starts_with("HTTP/") && version[6] == '.') {
    return refuse(505, "only HTTP/1.0 and HTTP/1.1 are served");
  } else {
    return refuse(400, "malformed request line");
  }
  out.method = method;
  out.path = target.substr(0, target.find('?'));
  return std::nullopt;
}

// Any body at all is refused, so only "is there one" matters: a
// Content-Length other than zero, or any Transfer-Encoding.
std::optional<Verdict> check_header(std::string_view line, bool& close, bool& keep_alive) {
  if (line.front() == ' ' || line.front() == '\t') return refuse(400, "folded header line");
  const auto colon = line.find(':');
  if (colon == std::string_view::npos || !is_token(line.substr(0, colon)))
    return refuse(400, "malformed header line");
  const auto name = line.substr(0, colon);
  const auto value = trim(line.substr(colon + 1));
  if (iequals(name, "Content-Length")) {
    if (value.empty() ||
        !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return refuse(400, "malformed Content-Length");
    if (value.find_first_not_of('0') != std::string_view::npos)
      return refuse(413, "request bodies are not accepted");
  } else if (iequals(name, "Transfer-Encoding")) {
    return refuse(413, "request bodies are not accepted");
  } else if (iequals(name, "Connection")) {
    std::string_view rest = value;
    while (!rest.empty()) {
      const auto comma = rest.find(',');
      const auto option = trim(rest.substr(0, comma));
      if (iequals(option, "close")) close = true;
      if (iequals(option, "keep-alive")) keep_alive = true;
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
  }
  return std::nullopt;
}

std::string_view reason_phrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Content Too Large";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Error";
  }
}

}  // namespace

Verdict parse_request(std::string_view received, std::size_t max_head_bytes) {
  RequestLine request;
  bool close = false, keep_alive = false;
  std::size_t pos = 0;
  for (bool first = true;; first = false) {
    const auto newline = received.find('\n', pos);
    if (newline == std::string_view::npos || newline >= max_head_bytes) {
      if (received.size() >= max_head_bytes)
        return refuse(431, "request head longer than the limit");
      return {};
    }
    auto line = received.substr(pos, newline - pos);
    if (line.ends_with('\r')) line.remove_suffix(1);
    pos = newline + 1;
    std::optional<Verdict> refused;
    if (first) {
      refused =
          line.empty() ? refuse(400, "malformed request line") : parse_request_line(line, request);
    } else if (line.empty()) {
      break;
    } else {
      refused = check_header(line, close, keep_alive);
    }
    if (refused) return *refused;
  }
  Verdict v{.kind = Verdict::Kind::respond, .head_bytes = pos};
  if (request.path == "/metrics") {
    v.endpoint = Endpoint::metrics;
  } else if (request.path == "/healthz") {
    v.endpoint = Endpoint::healthz;
  } else {
    v.status = 404;
    v.reason = "only /metrics and /healthz are served";
    return v;
  }
  if (request.method != "GET") {
    v.endpoint = Endpoint::none;
    v.status = 405;
    v.reason = "only GET is served";
    return v;
  }
  v.status = 200;
  v.keep_alive = !close && (!request.http10 || keep_alive);
  return v;
}

std::string format_response(int status, std::string_view content_type, std::string_view body,
                            bool keep_alive) {
  std::string out = fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: {}\r\n{}\r\n",
      status, reason_phrase(status), content_type, body.size(), keep_alive ? "keep-alive" : "close",
      status == 405 ? "Allow: GET\r\n" : "");
  out += body;
  return out;
}

std::string format_error(int status, std::string_view reason) {
  return format_response(status, "text/plain; charset=utf-8", fmt::format("{}\n", reason), false);
}

}  // namespace cushare::sched::http
