// The CUDA implementation of ktune's torch custom ops, in C++: the dispatcher calls it without
// entering Python, which is what keeps the host time of an op call near eager PyTorch's.
//
// ktune/torch_op.py builds this file once per torch installation (against that torch's headers
// and libraries, with the C++ compiler there) and loads it with torch.ops.load_library. It does
// not link libktune: Python binds each op to a loaded kernel, passing the kernel's handle and
// ktune_launch's address from the libktune the process already loaded, with the shapes and
// dtypes that kernel takes. One boxed kernel serves every op: it finds the op's binding by name,
// checks the tensors the way the Python path does (same messages, as ValueError), allocates the
// outputs and workspace from PyTorch's caching allocator and launches on the current stream:
// nothing synchronises the host, so a CUDA graph can capture it.
//
// Only C symbols are called from Python (ctypes); they never throw.

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace
{

// ktune.h's ktune_error, field for field (the binding checks the size at bind).
struct KtuneError {
    int code;
    char msg[512];
};
using LaunchFn = int (*)(void *kernel, void *const *inputs, void *const *outputs, void *workspace,
                         void *stream, KtuneError *err);

struct Tensor {
    std::string name;
    c10::ScalarType dtype;
    std::vector<int64_t> shape;
    int64_t packed; // bytes of a pre-packed input (uint8), 0 when passed as it is
};

struct Binding {
    void *kernel = nullptr; // ktune_kernel *, nullptr once its runtime closed
    LaunchFn launch = nullptr;
    c10::DeviceIndex device = 0;
    std::vector<Tensor> inputs, outputs;
    uint64_t workspace = 0;
    std::string shapes;                  // "M=64, N=128": for messages
    std::unique_ptr<torch::Library> lib; // the CUDA kernel's registration, alive with the entry
};

std::shared_mutex registry_lock; // launches read, bind and drop write
std::unordered_map<std::string, std::unique_ptr<Binding>> registry; // "ktune::<op>"

// Messages are built with std::string and std::to_string, never iostreams (TORCH_CHECK's
// c10::str is one): formatting a number through a stream in this library crashed in a process
// where torch.compile had run (torch 2.11, g++ 13).
[[noreturn]] void fail(bool value_error, const std::string &msg)
{
    const c10::SourceLocation here{__func__, __FILE__, static_cast<uint32_t>(__LINE__)};
    if (value_error)
        throw c10::ValueError(here, msg);
    throw c10::Error(here, msg);
}

std::string dims(c10::IntArrayRef d)
{
    std::string s = "[";
    for (size_t i = 0; i < d.size(); i++)
        s += (i ? ", " : "") + std::to_string(d[i]);
    return s + "]";
}

// "torch.float32 (f32)": how the Python path names a dtype.
std::string dtype_text(c10::ScalarType t, bool with_ktune_name)
{
    switch (t) {
    case at::kFloat:
        return with_ktune_name ? "torch.float32 (f32)" : "torch.float32";
    case at::kHalf:
        return with_ktune_name ? "torch.float16 (f16)" : "torch.float16";
    case at::kBFloat16:
        return with_ktune_name ? "torch.bfloat16 (bf16)" : "torch.bfloat16";
    default:
        return std::string("torch.") + c10::toString(t);
    }
}

// The checks of Kernel._call (runtime.py), with its messages: every input's dtype, shape and
// layout, then every input's device (so that each message shows on a machine without a GPU).
void check_input(const Binding &b, size_t i, const at::Tensor &t)
{
    const Tensor &d = b.inputs[i];
    const std::string what = "input " + std::to_string(i) + " '" + d.name + "'";
    if (d.packed) {
        if (t.scalar_type() != at::kByte || t.numel() != d.packed || !t.is_contiguous())
            fail(true, what + ": this kernel wants it pre-packed (" + std::to_string(d.packed) +
                           " bytes): pass kernel.prepack('" + d.name + "', " + d.name + ")");
        return;
    }
    if (t.scalar_type() != d.dtype)
        fail(true, what + ": dtype is " + dtype_text(t.scalar_type(), false) + ", expected " +
                       dtype_text(d.dtype, true));
    if (t.sizes() != c10::IntArrayRef(d.shape))
        fail(true, what + ": shape is " + dims(t.sizes()) + ", expected " + dims(d.shape) +
                       " (shapes " + b.shapes + ")");
    if (!t.is_contiguous())
        fail(true, what + ": is not contiguous (call .contiguous())");
}

void check_device(const Binding &b, size_t i, const at::Tensor &t)
{
    const std::string what = "input " + std::to_string(i) + " '" + b.inputs[i].name + "'";
    if (!t.is_cuda())
        fail(true, what + ": is on " + t.device().str() + ", not on a CUDA device");
    if (t.get_device() != b.device)
        fail(true, what + ": is on " + t.device().str() + ", but this kernel runs on cuda:" +
                       std::to_string(static_cast<int>(b.device)));
}

void launch_boxed(const c10::OperatorHandle &op, torch::jit::Stack *stack)
{
    std::shared_lock<std::shared_mutex> read(registry_lock);
    auto found = registry.find(op.schema().name());
    if (found == registry.end())
        fail(false, op.schema().name() + ": not bound to a kernel");
    const Binding &b = *found->second;
    if (!b.kernel)
        fail(true, op.schema().name() + ": no kernel for this op is loaded any more (look it up "
                                        "again and call as_torch_op())");
    const size_t n_in = b.inputs.size(), n_out = b.outputs.size();
    auto args = torch::jit::last(*stack, n_in);
    c10::SmallVector<void *, 16> in(n_in), out(n_out);
    for (size_t i = 0; i < n_in; i++)
        check_input(b, i, args[i].toTensor());
    for (size_t i = 0; i < n_in; i++) {
        const at::Tensor &t = args[i].toTensor();
        check_device(b, i, t);
        in[i] = t.data_ptr();
    }
    const auto on = at::TensorOptions().device(c10::Device(c10::DeviceType::CUDA, b.device));
    c10::SmallVector<at::Tensor, 4> outs;
    for (size_t i = 0; i < n_out; i++) {
        outs.push_back(at::empty(b.outputs[i].shape, on.dtype(b.outputs[i].dtype)));
        out[i] = outs.back().data_ptr();
    }
    at::Tensor ws; // alive until the launch is enqueued, then reusable in stream order
    if (b.workspace)
        ws = at::empty({static_cast<int64_t>(b.workspace)}, on.dtype(at::kByte));
    const c10::Device dev(c10::DeviceType::CUDA, b.device);
    void *stream =
        c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(dev).native_handle();
    KtuneError err{};
    int rc = b.launch(b.kernel, in.data(), out.data(), b.workspace ? ws.data_ptr() : nullptr,
                      stream, &err);
    if (rc != 0)
        fail(false, std::string("ktune_launch: ") + err.msg);
    torch::jit::drop(*stack, n_in);
    for (auto &t : outs)
        torch::jit::push(*stack, std::move(t));
}

void set_error(char *err, size_t len, const char *what)
{
    if (err && len)
        std::snprintf(err, len, "%s", what);
}

std::vector<Tensor> tensors(int n, const char *const *names, const int *dtypes, const int *ranks,
                            const int64_t *dims_flat, const int64_t *packed)
{
    std::vector<Tensor> v(static_cast<size_t>(n));
    for (int i = 0; i < n; i++) {
        v[i].name = names[i];
        v[i].dtype = static_cast<c10::ScalarType>(dtypes[i]);
        v[i].shape.assign(dims_flat, dims_flat + ranks[i]);
        dims_flat += ranks[i];
        v[i].packed = packed ? packed[i] : 0;
    }
    return v;
}

} // namespace

extern "C" {

// Bumped when a signature below changes; the binding refuses another.
int ktune_torch_ext_abi(void)
{
    return 1;
}

size_t ktune_torch_ext_error_size(void)
{
    return sizeof(KtuneError);
}

// The ScalarType code of torch's float32, float16, bfloat16 and uint8, in that order (the binding
// passes dtypes as these codes).
void ktune_torch_ext_dtypes(int *out)
{
    out[0] = static_cast<int>(at::kFloat);
    out[1] = static_cast<int>(at::kHalf);
    out[2] = static_cast<int>(at::kBFloat16);
    out[3] = static_cast<int>(at::kByte);
}

// Binds op "ktune::<name>" (defined already, by the binding) to a kernel: the first bind of a
// name registers the op's CUDA kernel, a later one (another kernel with the same key) replaces
// the kernel launched. Dimensions are flattened, rank by rank. 0, or -1 with err filled.
int ktune_torch_ext_bind(const char *name, void *kernel, void *launch, int device, int n_in,
                         const char *const *in_names, const int *in_dtypes, const int *in_ranks,
                         const int64_t *in_dims, const int64_t *in_packed, int n_out,
                         const char *const *out_names, const int *out_dtypes, const int *out_ranks,
                         const int64_t *out_dims, uint64_t workspace, const char *shapes, char *err,
                         size_t err_len)
{
    try {
        auto b = std::make_unique<Binding>();
        b->kernel = kernel;
        b->launch = reinterpret_cast<LaunchFn>(launch);
        b->device = static_cast<c10::DeviceIndex>(device);
        b->inputs = tensors(n_in, in_names, in_dtypes, in_ranks, in_dims, in_packed);
        b->outputs = tensors(n_out, out_names, out_dtypes, out_ranks, out_dims, nullptr);
        b->workspace = workspace;
        b->shapes = shapes;
        const std::string full = std::string("ktune::") + name;
        std::unique_lock<std::shared_mutex> write(registry_lock);
        auto &slot = registry[full];
        if (slot) {
            b->lib = std::move(slot->lib);
        } else {
            b->lib = std::make_unique<torch::Library>(torch::Library::IMPL, "ktune",
                                                      c10::DispatchKey::CUDA, __FILE__, __LINE__);
            try {
                b->lib->impl(name, torch::CppFunction::makeFromBoxedFunction<&launch_boxed>());
            } catch (...) {
                registry.erase(full);
                throw;
            }
        }
        slot = std::move(b);
        return 0;
    } catch (const std::exception &e) {
        set_error(err, err_len, e.what());
    } catch (...) {
        set_error(err, err_len, "unknown C++ exception");
    }
    return -1;
}

// The op's kernel went away (its runtime closed): calls raise until a bind gives it another.
void ktune_torch_ext_unbind(const char *name)
{
    std::unique_lock<std::shared_mutex> write(registry_lock);
    auto found = registry.find(std::string("ktune::") + name);
    if (found != registry.end())
        found->second->kernel = nullptr;
}

// Removes the op's CUDA kernel registration (the binding is destroying the op's definition).
void ktune_torch_ext_drop(const char *name)
{
    std::unique_ptr<Binding> gone;
    std::unique_lock<std::shared_mutex> write(registry_lock);
    auto found = registry.find(std::string("ktune::") + name);
    if (found != registry.end()) {
        gone = std::move(found->second);
        registry.erase(found);
    }
    write.unlock();
    // the Library deregisters in its destructor, outside the lock: a dispatcher call
    // blocked on it would otherwise wait on us
}

} // extern "C"
