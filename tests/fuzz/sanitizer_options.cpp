// Default AddressSanitizer / UBSan options of fuzz_tests (the environment's ASAN_OPTIONS and
// UBSAN_OPTIONS still override them): every report is fatal, leaks included, with a stack trace.
extern "C" {

__attribute__((used, visibility("default"))) const char* __asan_default_options() {
  return "detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:"
         "check_initialization_order=1:handle_abort=1:"
         "hard_rss_limit_mb=4096";
}

__attribute__((used, visibility("default"))) const char* __ubsan_default_options() {
  return "print_stacktrace=1:halt_on_error=1";
}

}  // extern "C"
