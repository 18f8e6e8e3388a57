// Async-signal-safe flag for a graceful stop.
#include "train/stop_signal.h"

#include <signal.h>
#include <unistd.h>

#include <csignal>

namespace spmd {

namespace {
volatile std::sig_atomic_t g_stop_signal = 0;

void on_stop_signal(int sig) {
  if (g_stop_signal != 0) _exit(128 + sig);  // second signal: no more waiting
  g_stop_signal = sig;
}
}  // namespace

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  action.sa_flags = SA_RESTART;  // collectives blocked in a syscall go on
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

int stop_signal_received() { return g_stop_signal; }

}  // namespace spmd
