// top: the status refreshed in place until `q` or Ctrl-C. The terminal is put
// in non-canonical mode (keys arrive without Enter) and restored on every exit
// path; with stdin/stdout not a terminal it just prints frames.
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <csignal>
#include <iostream>

#include "tools/cli_common.hpp"
#include "tools/commands.hpp"
#include "tools/status_render.hpp"

namespace cushare::tools {

namespace {

volatile std::sig_atomic_t g_interrupted = 0;
void on_interrupt(int) {
  g_interrupted = 1;
}

class TerminalSession {
 public:
  TerminalSession() {
    if (::isatty(STDIN_FILENO) && ::tcgetattr(STDIN_FILENO, &saved_) == 0) {
      termios raw = saved_;
      raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);  // ISIG stays: Ctrl-C -> SIGINT
      raw.c_cc[VMIN] = 0;
      raw.c_cc[VTIME] = 0;
      restore_ = ::tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
    }
    screen_ = ::isatty(STDOUT_FILENO);
    if (screen_)
      std::cout << "\x1b[?1049h\x1b[?25l" << std::flush;  // alternate screen, hide cursor
    struct sigaction sa {};
    sa.sa_handler = on_interrupt;  // no SA_RESTART: poll() returns EINTR
    ::sigaction(SIGINT, &sa, &old_int_);
    ::sigaction(SIGTERM, &sa, &old_term_);
  }
  ~TerminalSession() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
    if (screen_) std::cout << "\x1b[?25h\x1b[?1049l" << std::flush;
    if (restore_) ::tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  bool screen() const { return screen_; }

 private:
  termios saved_{};
  bool restore_ = false;
  bool screen_ = false;
  struct sigaction old_int_ {
  }, old_term_{};
};

std::size_t terminal_width() {
  winsize ws{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 40) return ws.ws_col;
  return kDefaultWidth;
}

// Waits up to `ms` for a key; true when the user asked to quit.
bool quit_requested(int ms) {
  pollfd pfd{STDIN_FILENO, POLLIN, 0};
  const int ready = ::poll(&pfd, 1, ms);
  if (g_interrupted) return true;
  if (ready <= 0) return false;
  if (pfd.revents & (POLLHUP | POLLERR)) return false;  // closed stdin: keep refreshing
  char key = 0;
  const ssize_t n = ::read(STDIN_FILENO, &key, 1);
  return n == 1 && (key == 'q' || key == 'Q');
}

}  // namespace

int run_top(const GlobalOptions& global, const TopOptions& options) {
  if (!(options.interval_s >= 0.1 && options.interval_s <= 3600))
    throw CliError(kExitUsage, "--interval must be between 0.1 and 3600 seconds");
  // 0 frames would either print nothing or, read as "no limit", never return
  // in a script: leaving --iterations out is how to run until q.
  if (options.iterations && *options.iterations == 0)
    throw CliError(kExitUsage,
                   "--iterations 0 draws no frame: give N >= 1, or leave it out to run until q");
  if (global.json())
    throw CliError(kExitUsage, "top has no JSON output: use `cusharectl status -o json`");
  (void)fetch_status(global.run_dir);  // fail before touching the terminal (bad run dir)
  g_interrupted = 0;
  TerminalSession session;
  const int wait_ms = static_cast<int>(std::lround(options.interval_s * 1000));
  for (unsigned frame = 0; !options.iterations || frame < *options.iterations; ++frame) {
    std::string text;
    try {
      text = render_top(fetch_status(global.run_dir), terminal_width());
    } catch (const std::exception& e) {
      text = std::string("cusharectl top: ") + e.what() +
             "\n";  // keep running: the run dir may come back
    }
    if (session.screen()) std::cout << "\x1b[H\x1b[2J";
    std::cout << text << std::flush;
    if (options.iterations && frame + 1 == *options.iterations) break;
    if (quit_requested(wait_ms)) break;
  }
  return kExitOk;
}

}  // namespace cushare::tools
