// Graceful stop on SIGINT/SIGTERM for a training rank: the first signal asks the loop to stop
// after the current step (and checkpoint); a second one exits at once.
#pragma once

namespace spmd {

void install_stop_handlers();
// 0 while no stop was requested, else the signal number that asked for it.
int stop_signal_received();

}  // namespace spmd
