#include "train/signals.h"

#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "base/error.h"

namespace gpt2 {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;
bool g_installed = false;
struct sigaction g_previous_term {};
struct sigaction g_previous_int {};

void write_stderr(const char* text) {
  // Nothing to do about a failed write inside a signal handler.
  const ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

extern "C" void on_stop_signal(int signal_number) {
  if (g_stop_signal != 0) {
    write_stderr(signal_number == SIGINT
                     ? "\ngpt2-train: second signal (SIGINT): exiting at once\n"
                     : "\ngpt2-train: second signal (SIGTERM): exiting at once\n");
    ::_exit(128 + signal_number);
  }
  g_stop_signal = signal_number;
  write_stderr(signal_number == SIGINT
                   ? "\ngpt2-train: SIGINT: stopping after the current step (send it again to "
                     "exit at once)\n"
                   : "\ngpt2-train: SIGTERM: stopping after the current step (send it again to "
                     "exit at once)\n");
}

}  // namespace

StopSignals::StopSignals() {
  GPT2_CHECK(!g_installed, "one StopSignals at a time");
  g_stop_signal = 0;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  // Interrupted reads and writes resume: a signal must not turn into a failed file operation.
  action.sa_flags = SA_RESTART;
  if (::sigaction(SIGTERM, &action, &g_previous_term) != 0 ||
      ::sigaction(SIGINT, &action, &g_previous_int) != 0)
    GPT2_FAIL("cannot install the SIGTERM/SIGINT handlers: ", std::strerror(errno));
  g_installed = true;
}

StopSignals::~StopSignals() {
  ::sigaction(SIGTERM, &g_previous_term, nullptr);
  ::sigaction(SIGINT, &g_previous_int, nullptr);
  g_installed = false;
}

int StopSignals::received() { return static_cast<int>(g_stop_signal); }

const char* signal_name(int signal_number) {
  switch (signal_number) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
  }
  static thread_local char text[32];
  std::snprintf(text, sizeof text, "signal %d", signal_number);
  return text;
}

}  // namespace gpt2
