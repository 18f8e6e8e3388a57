// The doctest runner's main() for every test binary. ctest runs one case per entry
// (--test-case=NAME, from doctest_discover_tests); an entry whose filter matches no case would pass
// without running anything, so a run that starts no case fails. A case that skipped (skip.h) makes
// the run exit 77, which ctest reports as skipped.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "skip.h"

namespace {

int g_cases_started = 0;
bool g_skipped = false;

// Counts the cases that start; reports nothing itself.
struct CaseCounter : doctest::IReporter {
  explicit CaseCounter(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData&) override { ++g_cases_started; }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

REGISTER_LISTENER("case_counter", 1, CaseCounter);

}  // namespace

namespace spmd::test {

void mark_skipped(const std::string& reason) {
  std::printf("SKIP: %s\n", reason.c_str());
  std::fflush(stdout);
  g_skipped = true;
}

}  // namespace spmd::test

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int result = context.run();
  if (context.shouldExit() || result != 0) return result;  // a query (--list-test-cases) or a failure
  if (g_cases_started == 0) {
    std::fprintf(stderr, "no test case matches the filters: nothing ran, which is not a pass\n");
    return 1;
  }
  return g_skipped ? 77 : 0;
}
