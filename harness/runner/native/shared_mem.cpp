#include "shared_mem.h"

#include <dlfcn.h>

#include <cstring>

namespace harness {

namespace {
// executorch::runtime::MemoryAllocator::kDefaultAlignment, which the runtime's
// header asks callers of QnnExecuTorchAllocCustomMem to use.
constexpr size_t kAlignment = 16;
}  // namespace

SharedInputs::~SharedInputs() {
  for (void* p : held_) {
    free_(p);
  }
}

void* SharedInputs::hold(const void* data, size_t bytes, std::string& why) {
  if (alloc_ == nullptr) {  // looked up on the first use: most executes hold nothing
    alloc_ = reinterpret_cast<AllocFn>(::dlsym(RTLD_DEFAULT, "QnnExecuTorchAllocCustomMem"));
    add_ = reinterpret_cast<AddFn>(
        ::dlsym(RTLD_DEFAULT, "QnnExecuTorchAddCustomMemTensorAddr"));
    free_ = reinterpret_cast<FreeFn>(::dlsym(RTLD_DEFAULT, "QnnExecuTorchFreeCustomMem"));
  }
  if (alloc_ == nullptr || add_ == nullptr || free_ == nullptr) {
    why = "this runtime has no QnnExecuTorchAllocCustomMem / "
          "QnnExecuTorchAddCustomMemTensorAddr / QnnExecuTorchFreeCustomMem "
          "(no QNN backend in the runner)";
    return nullptr;
  }
  void* p = alloc_(bytes, kAlignment);
  if (p == nullptr) {
    why = "QnnExecuTorchAllocCustomMem(" + std::to_string(bytes) + ", " +
        std::to_string(kAlignment) + ") returned null";
    return nullptr;
  }
  held_.push_back(p);
  if (bytes > 0) {
    std::memcpy(p, data, bytes);
  }
  add_(p, p);  // the tensor starts at the buffer's start
  return p;
}

}  // namespace harness
