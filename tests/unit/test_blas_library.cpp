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

TEST_CASE("blas: the description names a library") {
  const std::string text = spmd::kernels::cpu::blas_description();
  CAPTURE(text);
  CHECK((text.find("MKL") != std::string::npos || text.find("OpenBLAS") != std::string::npos ||
         text.find("BLAS") != std::string::npos || text == "aten::mm"));
}
