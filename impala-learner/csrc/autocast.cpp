// libtorch's autocast for the CPU and CUDA, which tch 0.24 binds only for CUDA (its
// `autocast` calls the deprecated CUDA-only functions). Autocast state is per thread: each
// learner and env-runner thread enters and leaves it around its own forward passes. Also
// `torch.set_flush_denormal`, which tch does not bind.
#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <ATen/detail/CUDAHooksInterface.h>

namespace {
at::DeviceType device_type(bool cuda) { return cuda ? at::kCUDA : at::kCPU; }
}  // namespace

extern "C" {

// Turns bfloat16 autocast on for the device type and writes what it replaced; 0 on success.
int impala_autocast_bf16_enter(bool cuda, bool *was_enabled, int *was_dtype) {
  try {
    at::DeviceType type = device_type(cuda);
    *was_enabled = at::autocast::is_autocast_enabled(type);
    *was_dtype = static_cast<int>(at::autocast::get_autocast_dtype(type));
    at::autocast::set_autocast_enabled(type, true);
    at::autocast::set_autocast_dtype(type, at::kBFloat16);
    at::autocast::increment_nesting();
    return 0;
  } catch (...) {
    return 1;
  }
}

// Restores what `impala_autocast_bf16_enter` replaced; the outermost exit drops the cached
// bfloat16 copies of the weights, as torch.autocast's exit does. 0 on success.
int impala_autocast_exit(bool cuda, bool was_enabled, int was_dtype) {
  try {
    at::DeviceType type = device_type(cuda);
    if (at::autocast::decrement_nesting() == 0) {
      at::autocast::clear_cache();
    }
    at::autocast::set_autocast_enabled(type, was_enabled);
    at::autocast::set_autocast_dtype(type, static_cast<at::ScalarType>(was_dtype));
    return 0;
  } catch (...) {
    return 1;
  }
}

// Whether autocast is on for the device type on this thread.
bool impala_autocast_is_enabled(bool cuda) {
  try {
    return at::autocast::is_autocast_enabled(device_type(cuda));
  } catch (...) {
    return false;
  }
}

// Whether this build's CUDA (cuDNN 8 or later on a device of compute capability 8.0 or
// more) convolves in bfloat16.
bool impala_cuda_bf16_supported() {
  try {
    return at::detail::getCUDAHooks().supportsBFloat16ConvolutionWithCuDNNv8();
  } catch (...) {
    return false;
  }
}

// torch.set_flush_denormal(on) for the calling thread: whether this CPU can flush denormals.
bool impala_set_flush_denormal(bool on) {
  try {
    return at::globalContext().setFlushDenormal(on);
  } catch (...) {
    return false;
  }
}
}
