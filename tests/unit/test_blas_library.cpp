// The BLAS choice for the fused CPU kernels: the launcher's OPENBLAS_CORETYPE decision as a pure
// function, and the description the runtime line prints.
#include <doctest/doctest.h>

#include "kernels/cpu/blas_library.h"

using spmd::kernels::cpu::openblas_coretype_override;

TEST_CASE("blas: a generic OpenBLAS core on an AVX-512 or AVX2 CPU is replaced for the workers") {
  CHECK(openblas_coretype_override("Prescott", "", true, true) == std::optional<std::string>("SkylakeX"));
  CHECK(openblas_coretype_override("Prescott", "", false, true) == std::optional<std::string>("Haswell"));
  CHECK(openblas_coretype_override("Katmai", "", true, true) == std::optional<std::string>("SkylakeX"));
  // Forced onto a generic core by the environment: replaced as well.
  CHECK(openblas_coretype_override("Prescott", "Prescott", true, true) == std::optional<std::string>("SkylakeX"));
}

TEST_CASE("blas: detection that worked, a user's own core and an old CPU are left alone") {
  CHECK_FALSE(openblas_coretype_override("Cooperlake", "", true, true).has_value());
  CHECK_FALSE(openblas_coretype_override("SkylakeX", "Haswell", true, true).has_value());
  CHECK_FALSE(openblas_coretype_override("Haswell", "Haswell", true, true).has_value());
  CHECK_FALSE(openblas_coretype_override("Prescott", "", false, false).has_value());
}

TEST_CASE("blas: a user's OPENBLAS_CORETYPE narrower than the CPU's vectors is named, not replaced") {
  using spmd::kernels::cpu::openblas_forced_core_note;
  const auto avx2_on_avx512 = openblas_forced_core_note("Haswell", true, true);
  REQUIRE(avx2_on_avx512.has_value());
  CHECK(avx2_on_avx512->find("OPENBLAS_CORETYPE=Haswell") != std::string::npos);
  CHECK(avx2_on_avx512->find("AVX2 kernels on this CPU with AVX-512") != std::string::npos);
  CHECK(avx2_on_avx512->find("SkylakeX") != std::string::npos);
  CHECK(openblas_forced_core_note("zen", true, false).has_value());  // OpenBLAS reads names in any case
  const auto old_on_avx2 = openblas_forced_core_note("Sandybridge", false, true);
  REQUIRE(old_on_avx2.has_value());
  CHECK(old_on_avx2->find("pre-AVX2 kernels on this CPU with AVX2") != std::string::npos);
  // Wide enough, nothing set, a generic core (replaced for the workers instead), an old CPU: nothing.
  CHECK_FALSE(openblas_forced_core_note("SkylakeX", true, true).has_value());
  CHECK_FALSE(openblas_forced_core_note("cooperlake", true, true).has_value());
  CHECK_FALSE(openblas_forced_core_note("Haswell", false, true).has_value());
  CHECK_FALSE(openblas_forced_core_note("", true, true).has_value());
  CHECK_FALSE(openblas_forced_core_note("Prescott", true, true).has_value());
  CHECK_FALSE(openblas_forced_core_note("Sandybridge", false, false).has_value());
}

TEST_CASE("blas: the description names a library") {
  const std::string text = spmd::kernels::cpu::blas_description();
  CAPTURE(text);
  CHECK((text.find("MKL") != std::string::npos || text.find("OpenBLAS") != std::string::npos ||
         text.find("BLAS") != std::string::npos || text == "aten::mm"));
}
