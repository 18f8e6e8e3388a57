// Muon's update on whole matrices, for the torch.optim.Muon oracle (tests/oracle/test_muon.py):
// reads matrices (as nn.Linear holds them) and a gradient per step from a safetensors file, runs
// our momentum, Newton-Schulz and step on each, and writes every step's results for Python to
// compare with torch's, bit for bit.
//   muon_worker IN.safetensors OUT.safetensors
// IN's metadata: matrices (comma-separated names), steps, lr, weight_decay, momentum, nesterov
// (0|1), ns_steps, ns_a, ns_b, ns_c, eps, adjust_lr_fn, ns_dtype. IN holds NAME.param and
// NAME.grad.K; OUT holds NAME.ns.K (the orthogonalised update, as float32), NAME.buf.K and
// NAME.param.K after step K.
#include <sstream>
#include <string>
#include <vector>

#include "ckpt/safetensors.h"
#include "muon/muon_update.h"
#include "util/error.h"
#include "util/guarded_main.h"

using namespace spmd;

namespace {
MuonConfig muon_worker_config(const std::map<std::string, std::string>& meta) {
  MuonConfig c;
  c.weight_decay = std::stod(meta.at("weight_decay"));
  c.momentum = std::stod(meta.at("momentum"));
  c.nesterov = meta.at("nesterov") == "1";
  c.ns_steps = std::stoll(meta.at("ns_steps"));
  c.ns_coefficients = {std::stod(meta.at("ns_a")), std::stod(meta.at("ns_b")), std::stod(meta.at("ns_c"))};
  c.eps = std::stod(meta.at("eps"));
  c.adjust_lr_fn =
      meta.at("adjust_lr_fn") == "match_rms_adamw" ? MuonAdjustLr::kMatchRmsAdamW : MuonAdjustLr::kOriginal;
  c.ns_dtype = meta.at("ns_dtype") == "float32" ? MatmulDtype::kFloat32 : MatmulDtype::kBFloat16;
  return c;
}
}  // namespace

int main(int argc, char** argv) {
  return guarded_main("muon_worker", [&] {
    if (argc != 3) throw UsageError("usage: muon_worker IN.safetensors OUT.safetensors");
    const SafetensorsFile in(argv[1]);
    const auto& meta = in.metadata();
    const MuonConfig config = muon_worker_config(meta);
    const double lr = std::stod(meta.at("lr"));
    const int steps = std::stoi(meta.at("steps"));
    std::vector<NamedTensor> out;
    std::stringstream names(meta.at("matrices"));
    for (std::string name; std::getline(names, name, ',');) {
      at::Tensor param = in.tensor(name + ".param").clone();
      at::Tensor buf = at::zeros_like(param);
      for (int k = 0; k < steps; ++k) {
        const at::Tensor grad = in.tensor(name + ".grad." + std::to_string(k)).clone();
        const at::Tensor update = muon_momentum_update(buf, grad, config);
        const at::Tensor ortho = newton_schulz(update, config);
        muon_apply(param, ortho, lr, muon_adjusted_lr(lr, config.adjust_lr_fn, param.size(0), param.size(1)),
                   config.weight_decay);
        const std::string k_name = "." + std::to_string(k);
        out.push_back({name + ".ns" + k_name, ortho.to(at::kFloat)});
        out.push_back({name + ".buf" + k_name, buf.clone()});
        out.push_back({name + ".param" + k_name, param.clone()});
      }
    }
    write_safetensors(argv[2], out);
    return 0;
  });
}
