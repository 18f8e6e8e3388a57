// train.optimizer and train.muon: torch.optim.Muon's defaults, every setting parsed once into its
// type, bad values refused naming the key, and the resolved config carrying them.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "config/config.h"
#include "test_support.h"
#include "usage_error.h"

using namespace spmd;
using spmd::test::contains;
using spmd::test::usage_error_of;

TEST_CASE("muon config: adamw by default, and train.muon has torch.optim.Muon's defaults") {
  const Config c = parse_config("", "t.yaml");
  CHECK(c.train.optimizer == Optimizer::kAdamW);
  const MuonConfig& m = c.train.muon;
  CHECK(m.lr == 1e-3);
  CHECK(m.weight_decay == 0.1);
  CHECK(m.momentum == 0.95);
  CHECK(m.nesterov);
  CHECK(m.ns_steps == 5);
  CHECK(m.ns_coefficients == std::vector<double>{3.4445, -4.775, 2.0315});
  CHECK(m.eps == 1e-7);
  CHECK(m.adjust_lr_fn == MuonAdjustLr::kOriginal);
  CHECK(m.ns_dtype == MatmulDtype::kBFloat16);
  CHECK_FALSE(contains(c.resolved_yaml, "muon"));  // an AdamW run's resolved config is as it was
}

TEST_CASE("muon config: every setting is read, and the resolved config parses back to it") {
  const Config c = parse_config(
      "train: {optimizer: muon, muon: {lr: 0.02, weight_decay: 0.01, momentum: 0.9, nesterov: false, ns_steps: 3, "
      "ns_coefficients: [3, -4, 2], eps: 1.0e-6, adjust_lr_fn: match_rms_adamw, ns_dtype: float32}}\n",
      "t.yaml");
  CHECK(c.train.optimizer == Optimizer::kMuon);
  const MuonConfig& m = c.train.muon;
  CHECK(m.lr == 0.02);
  CHECK(m.weight_decay == 0.01);
  CHECK(m.momentum == 0.9);
  CHECK_FALSE(m.nesterov);
  CHECK(m.ns_steps == 3);
  CHECK(m.ns_coefficients == std::vector<double>{3, -4, 2});
  CHECK(m.eps == 1e-6);
  CHECK(m.adjust_lr_fn == MuonAdjustLr::kMatchRmsAdamW);
  CHECK(m.ns_dtype == MatmulDtype::kFloat32);
  const Config again = parse_config(c.resolved_yaml, "resolved.yaml");
  CHECK(again.train.optimizer == Optimizer::kMuon);
  CHECK(again.train.muon == c.train.muon);
  CHECK(again.resolved_yaml == c.resolved_yaml);
  // --set reaches the nested keys; a muon run's resolved config names its settings.
  const Config set = parse_config("", "t.yaml", {"train.optimizer=muon", "train.muon.ns_dtype=float32"});
  CHECK(set.train.muon.ns_dtype == MatmulDtype::kFloat32);
  CHECK(contains(set.resolved_yaml, "ns_dtype: float32"));
}

TEST_CASE("muon config: bad values exit 2 naming the key") {
  struct Case {
    std::string set, said;
  };
  const std::vector<Case> cases{
      {"train.optimizer=sgd", "train.optimizer: expected one of adamw, muon"},
      {"train.muon.lr=0", "train.muon.lr: expected a positive number"},
      {"train.muon.momentum=1.5", "train.muon.momentum: expected a number in [0, 1)"},
      {"train.muon.ns_steps=100", "train.muon.ns_steps: expected an integer in [1, 99]"},
      {"train.muon.ns_coefficients=[1, 2]", "train.muon.ns_coefficients: expected a list of three numbers"},
      {"train.muon.ns_coefficients=[1, x, 2]", "train.muon.ns_coefficients[1]: expected a number"},
      {"train.muon.eps=-1", "train.muon.eps: expected a positive number"},
      {"train.muon.adjust_lr_fn=spectral", "train.muon.adjust_lr_fn: expected one of original, match_rms_adamw"},
      {"train.muon.ns_dtype=float16", "train.muon.ns_dtype: expected one of bfloat16, float32"},
      {"train.muon.beta=1", "train.muon.beta: unknown key 'beta'"},
      {"train.muon=3", "train.muon: expected a map of Muon settings"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.set);
    const std::string message = usage_error_of([&] { parse_config("", "t.yaml", {c.set}); });
    CHECK_MESSAGE(contains(message, c.said), message);
  }
}
