// Inputs in QNN shared memory (a program compiled with shared_buffer=True):
// each input's bytes go to a buffer from QnnExecuTorchAllocCustomMem and are
// registered with QnnExecuTorchAddCustomMemTensorAddr, as an app does to let
// the HTP read them without a copy. The functions are looked up at run time
// (dlsym, at the first `hold`): a runtime without the QNN backend has none,
// which is the step's error, not the runner's link failure.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace harness {

class SharedInputs {
 public:
  SharedInputs() = default;
  ~SharedInputs();  // frees every buffer (QnnExecuTorchFreeCustomMem)
  SharedInputs(const SharedInputs&) = delete;
  SharedInputs& operator=(const SharedInputs&) = delete;

  // A registered buffer holding `bytes` of `data`; nullptr with `why` set when
  // the runtime has no such function or its allocation failed.
  void* hold(const void* data, size_t bytes, std::string& why);

 private:
  using AllocFn = void* (*)(size_t, size_t);
  using AddFn = void (*)(void*, void*);
  using FreeFn = void (*)(void*);
  AllocFn alloc_ = nullptr;
  AddFn add_ = nullptr;
  FreeFn free_ = nullptr;
  std::vector<void*> held_;
};

}  // namespace harness
