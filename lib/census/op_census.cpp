// The RecordFunction observer behind op_census.h. The callbacks are plain functions: the census
// in progress lives in a static guarded by a mutex, and each thread's open records in a
// thread_local stack (records nest per thread; backward may run on autograd's threads).
#include "census/op_census.h"

#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/function_schema.h>
#include <ATen/record_function.h>
#include <c10/util/intrusive_ptr.h>

#include "util/error.h"

namespace spmd::census {

namespace {

constexpr int kOutside = -1;  // no user scope: "other", or "optimizer" after the last backward node
constexpr int kOther = -2;    // "other" whatever the time

// One open record on this thread.
struct Frame {
  at::RecordScope scope = at::RecordScope::FUNCTION;
  bool ignored = false;         // not counted: inside an atomic op, or a stray thread's op
  bool atomic = false, free = false;
  bool child_launched = false;  // some descendant was counted: this one is composite
  bool backward = false;        // in the backward pass
  bool engine = false;          // the autograd engine's range around a node, its gradient sums and hooks
  int region = kOutside;
  OpCall call;                  // FUNCTION records: the inputs, as the start callback saw them
};

struct ArgSchema {
  std::string name;
  bool written = false, out = false;
};

// What the dispatcher knows of an op.
struct OpInfo {
  std::vector<ArgSchema> args;
  bool kernel = false;  // a kernel of its own for a device (not a composite of other ops)
};

// A forward output's storage, watched until backward begins.
struct Produced {
  c10::weak_intrusive_ptr<c10::StorageImpl> storage;
  at::ScalarType dtype;
  std::vector<int64_t> shape;
  int region;
};

struct Pending {
  Launch launch;
  int region;
  int64_t order;
};

struct State {
  std::thread::id owner;
  std::vector<std::string> regions;
  std::unordered_map<std::string, int> region_ids;
  std::map<int64_t, int> forward_seq_region;  // a forward op's sequence number -> its region
  std::unordered_map<std::string, OpInfo> ops;  // by "name.overload"
  std::unordered_map<const void*, Produced> produced;
  std::vector<Pending> launches;
  int64_t order = 0, last_backward_end = -1;
  CensusLog log;
};

std::mutex g_mutex;
State* g_state = nullptr;  // under g_mutex
thread_local std::vector<Frame> t_stack;

int region_id(State& s, const std::string& name) {
  auto [it, added] = s.region_ids.emplace(name, static_cast<int>(s.regions.size()));
  if (added) s.regions.push_back(name);
  return it->second;
}

// The region of a backward node: that of the latest forward op at or before its sequence number.
int backward_region(const State& s, int64_t seq) {
  auto it = s.forward_seq_region.upper_bound(seq);
  if (seq < 0 || it == s.forward_seq_region.begin()) return kOther;
  const int region = std::prev(it)->second;
  return region == kOutside ? kOther : region;
}

const OpInfo& op_info(State& s, const at::RecordFunction& fn) {
  const std::string key = std::string(fn.name()) + "." + fn.overload_name();
  auto it = s.ops.find(key);
  if (it != s.ops.end()) return it->second;
  OpInfo info;
  if (const auto schema = fn.operator_schema())
    for (const c10::Argument& a : schema->arguments()) {
      const bool written = a.alias_info() && a.alias_info()->isWrite();
      info.args.push_back({a.name(), written, written && a.kwarg_only()});
    }
  if (const auto name = fn.operator_name())
    if (const auto op = c10::Dispatcher::singleton().findOp(*name))
      info.kernel = op->hasKernelForDispatchKey(c10::DispatchKey::CPU) ||
                    op->hasKernelForDispatchKey(c10::DispatchKey::CUDA);
  return s.ops.emplace(key, std::move(info)).first->second;
}

TensorInfo info_of(const at::Tensor& t) {
  TensorInfo i;
  i.dtype = t.scalar_type();
  i.shape = t.sizes().vec();
  i.bytes = static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size());
  i.storage = t.has_storage() ? static_cast<const void*>(t.storage().unsafeGetStorageImpl()) : nullptr;
  i.impl = t.unsafeGetTensorImpl();
  return i;
}

// The defined tensors in a value: a tensor, a list of them, optional ones.
void tensors_in(const c10::IValue& v, std::vector<at::Tensor>& into) {
  if (v.isTensor()) {
    if (v.toTensor().defined()) into.push_back(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorVector())
      if (t.defined()) into.push_back(t);
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) tensors_in(e, into);
  } else if (v.isTuple()) {
    for (const c10::IValue& e : v.toTupleRef().elements()) tensors_in(e, into);
  }
}

OpCall call_of(State& s, const at::RecordFunction& fn) {
  OpCall call;
  call.name = fn.name();
  call.overload = fn.overload_name();
  const std::vector<ArgSchema>& schema = op_info(s, fn).args;
  const auto inputs = fn.inputs();
  for (size_t i = 0; i < inputs.size(); ++i) {
    OpArg arg;
    if (i < schema.size()) {
      arg.name = schema[i].name;
      arg.written = schema[i].written;
      arg.out = schema[i].out;
    }
    if (inputs[i].isBool()) arg.flag = inputs[i].toBool();
    std::vector<at::Tensor> tensors;
    tensors_in(inputs[i], tensors);
    for (const at::Tensor& t : tensors) arg.tensors.push_back(info_of(t));
    call.args.push_back(std::move(arg));
  }
  return call;
}

}  // namespace

namespace {

bool has_prefix(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

std::string region_name(const State& s, int region) {
  return region >= 0 ? s.regions[static_cast<size_t>(region)] : "other";
}

// Backward begins: the forward outputs still alive are what the graph (and caches) hold.
void begin_backward(State& s) {
  if (s.log.backward_ran) return;
  s.log.backward_ran = true;
  for (auto& [id, p] : s.produced) {
    const auto storage = p.storage.lock();
    if (storage) s.log.saved.push_back({p.dtype, p.shape, static_cast<int64_t>(storage->nbytes()), region_name(s, p.region)});
  }
  s.produced.clear();
}

// The frame a record opens, with its place: region, pass, and whether it counts at all.
Frame open_frame(State& s, const at::RecordFunction& fn, Frame* parent) {
  Frame f;
  f.scope = fn.scope();
  const std::string_view name = fn.name();
  if (parent && (parent->ignored || parent->atomic)) f.ignored = true;
  const bool engine = has_prefix(name, "autograd::engine::");
  if (!parent && std::this_thread::get_id() != s.owner && f.scope == at::RecordScope::FUNCTION && !engine) {
    ++s.log.off_thread_ops;  // inside some op's parallel region on the recording thread
    f.ignored = true;
  }
  if (f.ignored) return f;
  if (parent) {
    f.backward = parent->backward;
    f.region = parent->region;
  }
  if (f.scope == at::RecordScope::USER_SCOPE) {
    f.region = region_id(s, std::string(name));
  } else if (f.scope == at::RecordScope::BACKWARD_FUNCTION) {
    begin_backward(s);
    f.backward = true;
    f.region = backward_region(s, fn.seqNr());
    // What the engine does with the node's gradients (sums to the inputs' shapes, accumulation
    // into the next node's inputs) is the node's region's too.
    if (parent && parent->engine) parent->region = f.region;
  } else if (engine) {  // the engine's range around a node, its gradients' sums and hooks
    f.backward = f.engine = f.free = true;
    f.region = kOther;
  } else {
    if (is_host_sync(name)) ++s.log.host_syncs[std::string(name)];
    // An op with a kernel of its own is one launch whatever that kernel calls on a CPU (a
    // reduction's fill of its output, a loop of per-tensor ops).
    f.atomic = is_atomic_op(name) || op_info(s, fn).kernel;
    f.free = is_free_op(name);
    if (!f.backward && fn.seqNr() >= 0) s.forward_seq_region[fn.seqNr()] = f.region;
    f.call = call_of(s, fn);
  }
  return f;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_state) {
    Frame stray;  // opened while no census records; its end is ignored
    stray.ignored = true;
    t_stack.push_back(std::move(stray));
    return nullptr;
  }
  t_stack.push_back(open_frame(*g_state, fn, t_stack.empty() ? nullptr : &t_stack.back()));
  return nullptr;
}

// A forward op's outputs in storages of their own (not views of its inputs, not in-place).
void watch_outputs(State& s, const Frame& f, const std::vector<at::Tensor>& outputs) {
  for (const at::Tensor& t : outputs) {
    if (!t.has_storage()) continue;
    const void* id = t.storage().unsafeGetStorageImpl();
    bool input = false;
    for (const OpArg& a : f.call.args)
      for (const TensorInfo& i : a.tensors) input = input || i.storage == id;
    if (!input && !s.produced.count(id))
      s.produced.emplace(id, Produced{t.storage().getWeakStorageImpl(), t.scalar_type(), t.sizes().vec(), f.region});
  }
}

void close_op(State& s, Frame& f, const at::RecordFunction& fn, bool launched) {
  std::vector<at::Tensor> outputs;
  for (const c10::IValue& v : fn.outputs()) tensors_in(v, outputs);
  if (!f.backward && !s.log.backward_ran) watch_outputs(s, f, outputs);
  if (!launched) return;
  for (const at::Tensor& t : outputs) f.call.outputs.push_back(info_of(t));
  Launch l;
  l.name = f.call.name;
  l.backward = f.backward;
  l.cost = op_cost(f.call);
  for (const OpArg& a : f.call.args) l.inputs.insert(l.inputs.end(), a.tensors.begin(), a.tensors.end());
  l.outputs = std::move(f.call.outputs);
  s.launches.push_back({std::move(l), f.region, s.order++});
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* /*context*/) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (t_stack.empty()) return;  // opened before this census
  Frame f = std::move(t_stack.back());
  t_stack.pop_back();
  if (f.ignored || !g_state) return;
  State& s = *g_state;
  bool launched = false;
  if (f.scope == at::RecordScope::FUNCTION) {
    launched = !f.free && (f.atomic || !f.child_launched);
    close_op(s, f, fn, launched);
  }
  if (f.backward) s.last_backward_end = s.order;
  if ((launched || f.child_launched) && !t_stack.empty()) t_stack.back().child_launched = true;
}

}  // namespace

OpCensus::OpCensus() {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    SPMD_ASSERT(!g_state, "one op census at a time");
    g_state = new State;
    g_state->owner = std::this_thread::get_id();
  }
  t_stack.clear();  // a record left open by an earlier census (ended after its finish) is no parent
  handle_ = at::addGlobalCallback(at::RecordFunctionCallback(on_start, on_end)
                                      .needsInputs(true)
                                      .needsOutputs(true)
                                      .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION,
                                               at::RecordScope::USER_SCOPE}));
  active_ = true;
}

OpCensus::~OpCensus() {
  if (active_) finish();
}

CensusLog OpCensus::finish() {
  SPMD_ASSERT(active_, "the op census was finished already");
  at::removeCallback(handle_);
  active_ = false;
  std::unique_ptr<State> s;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    s.reset(g_state);
    g_state = nullptr;
  }
  CensusLog log = std::move(s->log);
  for (Pending& p : s->launches) {
    p.launch.region = p.region == kOutside && log.backward_ran && p.order >= s->last_backward_end
                          ? "optimizer"
                          : region_name(*s, p.region);
    log.launches.push_back(std::move(p.launch));
  }
  return log;
}

}  // namespace spmd::census
